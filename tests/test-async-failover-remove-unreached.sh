#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# After a failover to an asynchronous leg (prefer=2 force=true, DESIGN.md
# section 14) that started while the synchronous legs were unreachable,
# the operator rebuilds one of them as the promotion message and the man
# page (ASYNCHRONOUS LEGS) advise: nbdrep remove, then nbdrep add of its
# URI once its server is back.  The controller never read that leg's
# superblock, so it did not know which metadata slot was the leg's when
# it was removed: the slot kept the leg's UUID.  The add must still
# rebuild it fully from the promoted leg (the explicit remove of the leg
# at that URI is the operator's consent), not refuse it as a split
# brain; and until the add, nothing may touch the removed leg's image.
#   1. Legs 0 and 1 synchronous, leg 2 asynchronous: write A, flush; the
#      leg catches up.  Clean stop.
#   2. The synchronous site runs on without leg 2 (unreachable): it
#      takes write D (leg 2 never gets it) and goes through several
#      generations.  Then it is lost (legs 0 and 1 stopped, images kept).
#   3. prefer=2 force=true promotes leg 2, which takes write B; legs 0
#      and 1 are unreachable throughout.
#   4. Leg 0, never reached: nbdrep remove.  Write C.  Its server comes
#      back: its image stays as it was.
#   5. nbdrep add of its URI while leg 1 has not been reached either:
#      refused (leg 1 may own the slot the storage at that URI claims:
#      its own storage could be answering there), saying so; the image
#      still as it was.
#   6. Leg 1 back: refused as a split brain, reached.  nbdrep add of leg
#      0's URI again: rebuilt fully under a new index.  Leg 1 left as
#      it is.
#   7. The controller restarted with the same command line: leg 1
#      rebuilt; the oracle: A, B and C read back, every leg equal.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))
refused='"split brain" in leg(%d)["last_error"] and '
refused+='"not in this volume" in leg(%d)["last_error"] and '
refused+='leg(%d)["state"] == "failed"'

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
# 1. and 2.
lose_sync_site "$ctl" "$expected" 2

# 3.
fail_over_to_async "$ctl" "$expected"
status_check "$ctl" \
  'leg(0)["state"] == "failed" and leg(1)["state"] == "failed"'

# 4.
"$NBDREP" remove "$ctl" 0
status_check "$ctl" 'leg(0)["state"] == "removed"'
write_random "$c_uri" "$expected" $(( 2 * M )) "$M"
restart_replica 0
sleep 2
cmp "$tmpdir/r0.img" "$tmpdir/r0.before"

# 5.
! "$NBDREP" add "$ctl" "$r0_uri" 2>"$tmpdir/add.err"
cat "$tmpdir/add.err"
grep -q 'split brain.*leg 1 has not been reached' "$tmpdir/add.err"
cmp "$tmpdir/r0.img" "$tmpdir/r0.before"

# 6.
restart_replica 1
wait_until 60 status_check "$ctl" "$(printf "$refused" 1 1 1)"
if ! "$NBDREP" add "$ctl" "$r0_uri" 2>"$tmpdir/add.err"; then
  cat "$tmpdir/add.err"
  echo "$0: nbdrep add of a leg removed before it was ever reached failed"
  exit 1
fi
grep 'slot [0-9]*, of the leg removed before it was reached, freed' \
  "$tmpdir/c.log"
wait_until 60 status_check "$ctl" \
  'leg(3)["uri"] == "'"$r0_uri"'" and leg(3)["state"] == "uptodate"'
status_check "$ctl" "$(printf "$refused" 1 1 1)"
cmp "$tmpdir/r1.img" "$tmpdir/r1.before"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r2_uri"

# 7.
stop_controller c
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" prefer=2 force=true wait=2
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
