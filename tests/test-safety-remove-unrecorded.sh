#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A removal that no superblock records (slots.c, slots_release): when no
# leg is uptodate (the volume has failed), `nbdrep remove` of a failed
# leg that is not a member of the last recorded generation is allowed,
# but its generation bump finds no leg to write: on disk the leg keeps
# its slot, absent, judged by its bitmap if it ever comes back.  So the
# slot must stay tracked (every write marks its bitmap) until a later
# bump records it free.  Before the fix the removal took the slot out
# of the absent slots at once: the writes made once the volume was back
# did not mark it, and the leg, back on the command line of the next
# start (a unit not updated), was resynced from a bitmap without them
# and called uptodate while it lacked them.
#
# Three file legs (0, 1, 2):
#   1. leg 2 is killed (its failure is recorded), A is written;
#   2. legs 1 and 0 are killed: the volume has failed;
#   3. `nbdrep remove CTL 2` is done, its bump recorded by no leg;
#   4. legs 0 and 1 come back, the volume is healthy, B is written (and
#      every other write made from now on);
#   5. clean stop; leg 2's server comes back and the controller starts
#      with the three legs: leg 2 must hold A and B before it is
#      uptodate (the oracle).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))

for i in 0 1 2; do start_replica "$i"; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=3
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 2 * MiB ))

# 1, 2.
kill_replica 2
wait_leg_state 30 "$ctl" 2 failed
write_random "$c_uri" "$expected" $(( 4 * MiB )) "$MiB"       # A
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
kill_replica 0
wait_volume_state 30 "$ctl" failed

# 3.
"$NBDREP" remove "$ctl" 2
status_check "$ctl" 'leg(2)["state"] == "removed"'

# 4.
restart_replica 0
restart_replica 1
wait_volume_state 60 "$ctl" healthy
write_random "$c_uri" "$expected" $(( 8 * MiB )) "$MiB"       # B
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
stop_controller c

# 5.
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
