#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# After a failover to an asynchronous leg (prefer=2 force=true, DESIGN.md
# section 14), the synchronous legs that come back while the promoted
# volume runs hold a generation its history does not know: they are
# refused as a split brain and never written to (they may hold
# acknowledged writes newer than the promoted leg's recovery point, the
# only copy of them, and may still be used by the old controller across
# a partition).  prefer= applies to the election at start only.  The
# operator rebuilds them from the promoted leg (the man page, ASYNCHRONOUS
# LEGS): nbdrep remove then nbdrep add of the same URI while it runs, or a
# restart with the same command line once they are reachable, where
# prefer=2 resolves the split brain for leg 2 even though legs 0 and 1
# hold a higher generation counter.  nbdrep resync --full is no remedy
# (judged again, the leg is refused again): it fails, naming the remedy.
#   1. Legs 0 and 1 synchronous, leg 2 asynchronous: write A, flush; the
#      leg catches up.  Clean stop.
#   2. The synchronous site runs on without leg 2 (unreachable): it
#      takes write D (leg 2 never gets it) and goes through several
#      generations (leg 1 failed and resynced).  Then it is lost (legs 0
#      and 1 stopped, their images kept).
#   3. prefer=2 force=true promotes leg 2, which takes write B.
#   4. Legs 0 and 1 come back: refused (last_error says split brain, not
#      in the history), the volume serves (write C), their images stay
#      byte-for-byte as they were; nbdrep resync --full fails, naming
#      the remedy.
#   5. Leg 0: nbdrep remove, nbdrep add: rebuilt fully under a new index.
#   6. Leg 1: the controller restarted with the same command line:
#      rebuilt fully.
#   7. The oracle: A, B and C read back, D is gone, every leg equal.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))
refused='"split brain" in leg(%d)["last_error"] and "not in this volume" in leg(%d)["last_error"] and leg(%d)["state"] == "failed"'

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
# 1. and 2.
lose_sync_site "$ctl" "$expected" 3

# 3.
fail_over_to_async "$ctl" "$expected"
grep 'refused as a split brain' "$tmpdir/c.log"
new_gen=$(nbdrep_status_get "$ctl" "s['volume']['generation']")
# The old site's counter is the higher one: no election by counter may
# pick it at step 6.
[ "$site_gen" -gt "$new_gen" ]

# 4.
restart_replica 0
restart_replica 1
wait_until 60 status_check "$ctl" "$(printf "$refused" 0 0 0)"
wait_until 60 status_check "$ctl" "$(printf "$refused" 1 1 1)"
status_check "$ctl" 'leg(2)["state"] == "uptodate" and s["volume"]["state"] == "degraded"'
write_random "$c_uri" "$expected" $(( 2 * M )) "$M"
if "$NBDREP" resync "$ctl" 0 --full 2>"$tmpdir/resync.err"; then
  echo "$0: nbdrep resync --full of a leg refused as a split brain said done"
  exit 1
fi
cat "$tmpdir/resync.err"
grep -q 'refused as a split brain.*nbdrep remove it and nbdrep add' \
  "$tmpdir/resync.err"
status_check "$ctl" "$(printf "$refused" 0 0 0)"
cmp "$tmpdir/r0.img" "$tmpdir/r0.before"
cmp "$tmpdir/r1.img" "$tmpdir/r1.before"

# 5.
"$NBDREP" remove "$ctl" 0
"$NBDREP" add "$ctl" "$r0_uri"
wait_until 60 status_check "$ctl" \
  'leg(3)["uri"] == "'"$r0_uri"'" and leg(3)["state"] == "uptodate"'
status_check "$ctl" "$(printf "$refused" 1 1 1)"
cmp "$tmpdir/r1.img" "$tmpdir/r1.before"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r2_uri"

# 6.
stop_controller c
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" prefer=2 force=true wait=2
grep 'prefer=2 resolved a split brain' "$tmpdir/c.log"
wait_volume_state 60 "$ctl" healthy

# 7.
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
