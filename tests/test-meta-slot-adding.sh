#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The slot a leg being added owns is not an orphaned slot (slots.c),
# even before nr_legs counts the leg.  nbdrep add judges a returning
# leg (here: it owns its old slot, absent, whose bitmap holds what it
# missed: an incremental resync) before the leg is counted; a blank leg
# that needs a slot in that window (its resync starting, from the
# monitor) must not be given that slot, or the returning leg would
# resync from a bitmap cleared and given to another leg, and miss
# writes.
#   1. Legs 0, 1 and 2, max-legs=3: write A.  Clean stop.
#   2. The controller starts (force=true: a member is missing) with
#      legs 0, 1 and a blank leg 2' whose server is down; leg 2 is off
#      the command line (its slot absent, marked by every write).
#      Write C.
#   3. nbdrep add of leg 2, held for 12 s once judged
#      (-D replicate.add_pause); meanwhile the blank leg's server comes
#      back and the blank leg asks for a slot: there is none (the
#      returning leg's is held), it stays failed.
#   4. The add ends: leg 2 resyncs from its bitmap and becomes uptodate;
#      the oracle (A and C on legs 0, 1 and 2).

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
stop_replica 3
start_controller c -D replicate.add_pause=12000 "$PLUGIN" "$r0_uri" \
  "$r1_uri" "$r3_uri" control="$ctl" force=true wait=2
wait_until 30 status_check "$ctl" \
  'leg(0)["state"] == "uptodate" and leg(1)["state"] == "uptodate"'
write_random "$c_uri" "$expected" "$M" $(( 4 * M ))

# 3.
"$NBDREP" add "$ctl" "$r2_uri" &
adder=$!
wait_until 30 grep -q 'add: pausing' "$log"
restart_replica 3
wait_until 30 grep -q 'leg 2: stale -> failed (the resync could not start)' \
  "$log"
grep 'add: pause over' "$log" && {
  echo "$0: the blank leg asked for a slot only after the pause"
  exit 1
}

# 4.
wait "$adder"
wait_until 60 status_check "$ctl" 'leg(3)["state"] == "uptodate"'
status_check "$ctl" '"no free metadata slot" in leg(2)["last_error"]'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
