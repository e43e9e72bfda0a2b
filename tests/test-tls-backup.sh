#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# nbdrep backup reads a TLS leg with its --tls options (DESIGN.md
# section 15): two PSK legs made TLS by the controller's parameters, a
# WebDAV store (nginx).  Without --tls options the backup fails naming
# the source and libnbd's reason, and leaves no backup; with the
# controller's parameters as options it is point-in-time from the held
# leg, and the restored image equals the volume.

source ./functions.sh
source "$abs_top_srcdir/tests/backup-functions.sh"
set -euo pipefail
set -x

requires_nbdsh
requires_webdav
source "$abs_top_srcdir/tests/tls-functions.sh"

psk=$tmpdir/keys.psk
make_psk "$psk" alice
start_nginx
start_replica 0 --file 32M -- --tls=require --tls-psk="$psk"
start_replica 1 --file 32M -- --tls=require --tls-psk="$psk"
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" \
  tls=require tls-psk="$psk" tls-username=alice control="$ctl"
wait_volume_state 30 "$ctl" healthy
"$NBDSH" -u "$c_uri" -c "
import os
h.pwrite(os.urandom(6 * 1024 * 1024), 1024 * 1024)
h.flush()"
T=$DAV_URL/backups

rc=0
"$NBDREP" backup "$ctl" "$T" --name plain 2>"$tmpdir/plain.err" || rc=$?
cat "$tmpdir/plain.err"
test "$rc" -eq 1
grep -q "cannot read the volume at nbd+unix:///?socket=$tmpdir/r[01]\.sock: .*server requires TLS encryption first" \
  "$tmpdir/plain.err"
wait_volume_state 60 "$ctl" healthy

"$NBDREP" backup "$ctl" "$T" --name one --tls=require --tls-psk="$psk" \
  --tls-username=alice >"$tmpdir/one.out"
cat "$tmpdir/one.out"
test "$(backups_get 'b["one"]["consistency"]' "$T")" = point-in-time
test "$(backups_get '"plain" in b' "$T")" = False
"$NBDCOPY" "$c_uri" "$tmpdir/volume.img"
backup_nbdkit "$T" name=one \
  --run "'$NBDCOPY' \"\$uri\" '$tmpdir/restored.img'"
cmp "$tmpdir/volume.img" "$tmpdir/restored.img"
