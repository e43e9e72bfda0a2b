#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A crash just after a slot was given to a new leg (slots.c,
# slots_release).  The slot of leg 2, off the command line, goes to a
# blank leg; until a superblock says the slot is free, leg 2 is judged
# by it at a restart (an incremental resync from its bitmap), so every
# write must still be marked there and the cooler must not let the
# activity log's extents go before those marks are written.  Before the
# fix the slot was freed in memory only, its bitmap no longer marked:
# after kill -9 and a restart with leg 2 back, leg 2 resynced from a
# bitmap that lacked the writes made meanwhile and was uptodate without
# them.
#   1. Legs 0, 1 and 2, max-legs=3: write A.  Clean stop.
#   2. Legs 0 and 1 only (force=true): write B (marked in leg 2's
#      slot).  Clean stop.
#   3. nbdrep add of a blank leg: it gets leg 2's slot, and its resync
#      is held (-D replicate.claim_pause) while writes C are made and
#      cooled; then kill -9, within the hold.
#   4. Restart with legs 0, 1 and 2: every leg that is uptodate, leg 2
#      included once it is, holds A, B and C.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_replica 3 32M

# 1.
full_volume_of_three "$ctl" "$expected"

# 2.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  force=true wait=2
wait_volume_state 30 "$ctl" healthy
write_random "$c_uri" "$expected" $(( 4 * M )) $(( 4 * M ))
stop_controller c

# 3.
start_controller c -D replicate.claim_pause=60000 "$PLUGIN" "$r0_uri" \
  "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
"$NBDREP" add "$ctl" "$r3_uri"
wait_until 30 grep -q 'resync claim: pausing' "$log"
grep 'slot 2 (leg UUID .*) given to a new leg' "$log"
for i in 1 2 3; do
  write_random "$c_uri" "$expected" $(( (12 + i) * M )) 65536
  sleep 2.5
done
wait_until 30 status_check "$ctl" \
  's["volume"]["activity_log"]["hot"] == 0'
! grep 'resync claim: pause over' "$log"      # killed within the hold
kill_controller c

# 4.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_until 60 status_check "$ctl" 'leg(2)["state"] == "uptodate"'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
