#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg lost for good while the controller was down, then replaced
# (slots.c): its metadata slot, which no leg reached in this run holds,
# is given to the leg that replaces it once no leg of the volume is
# still unreached (one that is may own that slot, and must keep its
# judgement).  Before, the slot stayed absent for ever: nbdrep remove
# frees the slot of a leg it knows, and the controller never read that
# leg's superblock, so a volume with max-legs equal to its legs could
# never take a new leg ("no free metadata slot ... remove a leg first",
# with the leg removed).
#   1. Legs 0, 1 and 2, max-legs=3: write A.  Clean stop.
#   2. Leg 2's server is gone; the controller starts with force=true:
#      write B.
#   3. nbdrep add of a blank leg: refused, naming leg 2 (not reached
#      yet, it may own the free-able slot).
#   4. nbdrep remove 2, nbdrep add of the blank leg: it gets leg 2's
#      slot, is rebuilt fully and becomes uptodate.  Write C.
#   5. The oracle (A, B, C on legs 0, 1 and the new one), and again
#      after a restart with those three legs: healthy.

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
stop_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  force=true wait=2
wait_until 30 status_check "$ctl" \
  'leg(0)["state"] == "uptodate" and leg(1)["state"] == "uptodate"'
write_random "$c_uri" "$expected" "$M" "$M"

# 3.
! "$NBDREP" add "$ctl" "$r3_uri" 2>"$tmpdir/add.err"
cat "$tmpdir/add.err"
grep -q 'leg 2 has not been reached' "$tmpdir/add.err"

# 4.
"$NBDREP" remove "$ctl" 2
if ! "$NBDREP" add "$ctl" "$r3_uri" 2>"$tmpdir/add.err"; then
  cat "$tmpdir/add.err"
  echo "$0: no slot for the leg that replaces one lost for good"
  exit 1
fi
wait_until 60 status_check "$ctl" \
  'leg(3)["state"] == "uptodate" and s["volume"]["state"] == "healthy"'
grep 'slot [0-9]* (leg UUID .*) given to a new leg' "$log"
write_random "$c_uri" "$expected" $(( 2 * M )) "$M"

# 5.
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r3_uri"
stop_controller c
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r3_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r3_uri"
