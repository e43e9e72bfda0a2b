#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Backups to a WebDAV store (nginx, which makes no missing collection by
# itself: the client makes them with MKCOL), through a real controller
# with two legs: a full and an incremental backup restored byte for
# byte, then a backup interrupted by killing the server in the middle
# of its uploads: nbdrep fails, no manifest exists, the listing is
# unchanged, the controller ends the backup and resyncs the held leg;
# the next backup is incremental from the last complete one and reuses
# the blocks the interrupted one stored (read slowly, it renews the
# controller's hold as it goes).  Last, a live backup with one uptodate
# leg.

source ./functions.sh
source "$abs_top_srcdir/tests/backup-functions.sh"
set -euo pipefail
set -x

requires_nbdsh
requires_webdav

start_nginx

start_replica 0 --file 64M
start_replica 1 --file 64M
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
M=$((1024 * 1024))

$NBDSH -u "$c_uri" -c "
import os
h.pwrite(os.urandom(8 * $M), 0)
h.flush()"

T=$DAV_URL/backups
"$NBDREP" backup "$ctl" "$T" --name one
[ "$(backups_get 'b["one"]["counts"]["uploaded_blocks"]' "$T")" -eq 4 ]
# The manifest went up under a temporary name and was moved into place.
grep -q '"MOVE /backups/volumes/[^ ]*/backups/one\.json\.partial-[0-9a-f]* ' \
  "$tmpdir/dav/access.log"
[ -z "$(find "$DAV_ROOT" -name '*.partial-*')" ]
wait_leg_state 60 "$ctl" 1 uptodate

$NBDSH -u "$c_uri" -c "
import os
h.pwrite(os.urandom(8192), 5 * $M)
h.flush()"
"$NBDREP" backup "$ctl" "$T" --name two
[ "$(backups_get 'b["two"]["counts"]["read_blocks"]' "$T")" -eq 1 ]
[ "$(backups_get 'b["two"]["counts"]["uploaded_blocks"]' "$T")" -eq 1 ]
"$NBDCOPY" "$c_uri" "$tmpdir/two.img"
backup_nbdkit "$T" name=two \
  --run "'$NBDCOPY' \"\$uri\" '$tmpdir/restored.img'"
cmp "$tmpdir/two.img" "$tmpdir/restored.img"
wait_leg_state 60 "$ctl" 1 uptodate

# 16 MiB of new data (8 blocks), read at 2 MiB/s: kill nginx once the
# first new block is stored.
$NBDSH -u "$c_uri" -c "
import os
h.pwrite(os.urandom(16 * $M), 24 * $M)
h.flush()"
volume=$(backups_get 'b["two"]["volume"]' "$T")
blockdir=$DAV_ROOT/backups/volumes/$volume/blocks
count_blocks () { find "$blockdir" -name '*.zst' | wc -l; }
more_blocks_than () { [ "$(count_blocks)" -gt "$1" ]; }
before=$(count_blocks)
"$NBDREP" backup "$ctl" "$T" retries=1 --rate 2M --name three \
  >"$tmpdir/three.out" 2>&1 &
backup_pid=$!
wait_until 60 more_blocks_than "$before"
kill_service nginx
rc=0
wait "$backup_pid" || rc=$?
cat "$tmpdir/three.out"
[ "$rc" -eq 1 ]
grep -q 'backup three failed: no manifest was written' "$tmpdir/three.out"
stored=$(( $(count_blocks) - before ))
[ "$stored" -ge 1 ] && [ "$stored" -lt 8 ]
test ! -e "$DAV_ROOT/backups/volumes/$volume/backups/three.json"

# The controller ended the backup and gives the leg back.
no_backup_running () {
  [ "$(nbdrep_status_get "$ctl" 's["volume"].get("backup")')" = None ]
}
wait_until 30 no_backup_running
wait_leg_state 60 "$ctl" 1 uptodate

# The same store on a restarted server: two backups listed, and the next
# backup reads the 8 changed blocks (since "two", as the interrupted one
# never counted) and stores only those the interrupted one did not.
# Read at 2 MiB/s it takes 8 s: nbdrep renews the hold every 5 s.
start_nginx
T=$DAV_URL/backups
[ "$(backups_get 'sorted(b)' "$T")" = "['one', 'two']" ]
"$NBDREP" backup "$ctl" "$T" --rate 2M --name four
grep -q 'debug: control: backup-renew from uid [0-9]* pid [0-9]*: .*: done$' \
  "$tmpdir/c.log"
[ "$(backups_get 'b["four"]["incremental"]' "$T")" = True ]
[ "$(backups_get 'b["four"]["counts"]["read_blocks"]' "$T")" -eq 8 ]
[ "$(backups_get 'b["four"]["counts"]["existing_blocks"]' "$T")" -eq "$stored" ]
[ "$(backups_get 'b["four"]["counts"]["uploaded_blocks"]' "$T")" -eq $(( 8 - stored )) ]
"$NBDCOPY" "$c_uri" "$tmpdir/four.img"
backup_nbdkit "$T" name=four \
  --run "'$NBDCOPY' \"\$uri\" '$tmpdir/restored.img'"
cmp "$tmpdir/four.img" "$tmpdir/restored.img"
"$NBDREP" backup-verify "$T" four

# With one uptodate leg nothing can be held out: the backup is live,
# nbdrep says so, and the manifest records it.
kill_replica 1
$NBDSH -u "$c_uri" -c "
h.pwrite(b'y' * 4096, 0)
h.flush()"
wait_leg_state 60 "$ctl" 1 failed
"$NBDREP" backup "$ctl" "$T" --name five 2>"$tmpdir/err"
cat "$tmpdir/err"
grep -q 'warning: consistency: live' "$tmpdir/err"
[ "$(backups_get 'b["five"]["consistency"]' "$T")" = live ]
restart_replica 1
wait_leg_state 60 "$ctl" 1 uptodate
