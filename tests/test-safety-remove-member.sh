#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A failed volume's last member must not be removed (admin.c,
# remove_refusal): when no leg is uptodate, a failed leg that is a
# member of the last recorded generation is one whose failure could not
# be recorded; it comes back uptodate when it returns, and may be the
# only leg holding the newest data.  Found by the fault campaign (make
# check-torture): once it was removed, adding it back made it a blank
# leg to rebuild from nobody, and the volume stayed failed.
#
# Two file legs A and B (0 and 1):
#   1. B is killed (its failure is recorded: A alone is uptodate); W is
#      written and acknowledged, on A only;
#   2. A is killed: the last uptodate leg, the volume has failed;
#   3. `nbdrep remove CTL 0` is refused, naming why (before the rule it
#      was done, and A, added back, was stale with no leg to resync
#      from);
#   4. A's server comes back: A is uptodate again, B's comes back and
#      resyncs from it; the volume is healthy, and W reads back from
#      both legs.

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

start_replica 0
start_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=3
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 4 * MiB ))

# 1, 2.
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" $(( 8 * MiB )) "$MiB"       # W
kill_replica 0
wait_volume_state 30 "$ctl" failed

# 3.
rc=0
out=$("$NBDREP" remove "$ctl" 0 2>&1) || rc=$?
echo "$out"
test "$rc" -ne 0
[[ $out == *"leg 0 cannot be removed: no leg is uptodate, and it is a member of the last recorded generation"* ]]
status_check "$ctl" 'leg(0)["state"] == "failed"'

# 4.
restart_replica 0
wait_leg_state 60 "$ctl" 0 uptodate
restart_replica 1
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
