#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep backup-delete keeps its delete lock alive while it reads the
# remaining manifests (nbdrep/backups.c, mark_blocks), which on a big
# store can take longer than a lock lives.  A lock expired meanwhile
# let a backup run and count on a block of the backup being deleted
# (same data: the store had it, so the backup did not send it again);
# the sweep, which had not seen that backup's manifest, deleted the
# block, and the new backup no longer restored.
#
# Here a lock lives 5 s (NBDREP_LOCK_LIFETIME, for tests) and nginx
# sends a manifest (about 950 bytes) at 512 bytes/s meanwhile
# (start_nginx RATE): each takes about a second, reading the eight
# remaining ones about eight.  Backup one holds block 0 = A; b2 to b9
# rewrote it (B).  While backup-delete one reads the manifests, with
# block 0 = A again, a backup four is tried 6.5 s after the delete
# began, when its lock, not rewritten, would have expired: it must be
# refused (a delete is running), and once the delete is done every
# remaining backup restores byte for byte.  Then four runs, and
# restores.

source ./functions.sh
source "$abs_top_srcdir/tests/backup-functions.sh"
set -euo pipefail
set -x

requires_nbdsh
requires_webdav

export NBDREP_LOCK_LIFETIME=5
start_nginx 512
start_replica 0 --file 4M
start_replica 1 --file 4M
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
K=1024
T=$DAV_URL/backups
bs=(--block-size 64K)

# put FILE: FILE's 64 KiB at block 0 through the controller, flushed.
put () {
  $NBDSH -u "$c_uri" -c "
with open('$1', 'rb') as f:
    h.pwrite(f.read(), 0)
h.flush()"
}

head -c $(( 64 * K )) /dev/urandom >"$tmpdir/A"
head -c $(( 64 * K )) /dev/urandom >"$tmpdir/B"
put "$tmpdir/A"
backup one
put "$tmpdir/B"
for i in 2 3 4 5 6 7 8 9; do
  backup "b$i"
done
put "$tmpdir/A"

# The delete, its manifests slow; four 6.5 s later.
touch "$tmpdir/slow-manifests"
"$NBDREP" backup-delete "$T" one >"$tmpdir/delete.out" 2>&1 &
delete=$!
sleep 6.5
kill -0 "$delete" || {
  cat "$tmpdir/delete.out"
  echo "$0: the delete ended before backup four was tried" >&2
  exit 1
}
rc=0
"$NBDREP" backup "$ctl" "$T" "${bs[@]}" --name four >"$tmpdir/four.out" 2>&1 ||
  rc=$?
cat "$tmpdir/four.out"
rc_delete=0
wait "$delete" || rc_delete=$?
cat "$tmpdir/delete.out"
rm "$tmpdir/slow-manifests"
[ "$rc_delete" -eq 0 ]
if [ "$rc" -eq 0 ]; then
  echo "$0: backup four ran while backup-delete one was sweeping" >&2
  "$NBDCOPY" "$c_uri" "$tmpdir/four.img"
  restores four
  exit 1
fi
grep -q "a delete is running" "$tmpdir/four.out"
wait_leg_state 30 "$ctl" 1 uptodate
restores b2 b9

# After the delete, four runs and restores.
backup four
restores four
