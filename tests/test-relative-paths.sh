#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Relative file parameters are made absolute before nbdkit forks into
# the background (and changes to "/"): a controller started without -f
# from a directory, with a relative control=PATH, serves its control
# socket in that directory (nbdrep status answers there); one with a
# relative tls-psk=FILE (when psktool is there) reconnects its TLS leg
# after the fork (its key file is still found: the leg's server is
# restarted and the volume is healthy again); the backup plugin turns
# relative credentials= and cafile= into absolute paths (its debug log
# shows the store options it was given).

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires python3 -c 'import json'

BACKUP_PLUGIN="$abs_top_builddir/plugins/backup/.libs/nbdkit-backup-plugin.so"

# nbdkit as start_controller runs it (with the sanitizer's runtime).
nbdkit_cmd=("$NBDKIT")
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" "$NBDKIT")
fi

start_replica 0
mkdir "$tmpdir/rel"
# A unique name: without the fix the socket would land in /.
name=rel-$$-$RANDOM.ctl

# stop_daemon: stop the background nbdkit by the pid in its pidfile
# (it must exit within 60 s), and remove a socket it may have left in /
# (without the fix).  Under the sanitizer runtime, a daemon that logged
# its unload and is still there 5 s later is stuck in glibc's exit (see
# _unloaded_but_stuck in functions.sh): it is killed, and that is not
# a failure.  The daemon runs with -v, which keeps its stderr (rel.log).
stop_daemon ()
{
  local pid i rc=0
  if pid=$(cat "$tmpdir/rel.pid" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null
  then
    rc=1
    for (( i = 0; i < 600; i++ )); do
      if ! kill -0 "$pid" 2>/dev/null; then rc=0; break; fi
      if [ "$SANITIZER" != no ] && (( i % 50 == 0 )) &&
         grep -q 'debug: replicate: unload' "$tmpdir/rel.log" &&
         sleep 5 && kill -0 "$pid" 2>/dev/null; then
        echo "$0: daemon $pid stuck in exit after its unload under the sanitizer runtime: killed"
        kill -KILL "$pid"
        rc=0
        break
      fi
      sleep 0.1
    done
  fi
  rm -f "$tmpdir/rel.pid"
  if [ -S "/$name" ]; then rm -f "/$name"; fi
  return "$rc"
}
cleanup_fn stop_daemon

# --- control=PATH relative, nbdkit in the background (no -f).
(
  cd "$tmpdir/rel"
  "${nbdkit_cmd[@]}" -P "$tmpdir/rel.pid" -U "$tmpdir/rel.sock" \
    -v "$PLUGIN" "$r0_uri" control="$name" </dev/null 2>"$tmpdir/rel.log"
)
wait_for test -s "$tmpdir/rel.pid"
wait_until 30 test -S "$tmpdir/rel/$name"
"$NBDREP" status "$tmpdir/rel/$name"
wait_volume_state 60 "$tmpdir/rel/$name" healthy
stop_daemon
test ! -e "$tmpdir/rel/$name"

# --- tls-psk=FILE relative, nbdkit in the background: the key file is
# read again at every connection, after the fork too.
if command -v psktool >/dev/null; then
  psktool -u alice -p "$tmpdir/rel/rel.psk" >/dev/null
  start_replica 1 -- --tls=require --tls-psk="$tmpdir/rel/rel.psk"
  (
    cd "$tmpdir/rel"
    "${nbdkit_cmd[@]}" -P "$tmpdir/rel.pid" -U "$tmpdir/tls.sock" \
      -v "$PLUGIN" "$r1_uri" tls-psk=rel.psk tls-username=alice \
      control="$name" </dev/null 2>"$tmpdir/rel.log"
  )
  wait_for test -s "$tmpdir/rel.pid"
  wait_until 30 test -S "$tmpdir/rel/$name"
  wait_volume_state 60 "$tmpdir/rel/$name" healthy
  kill_replica 1
  wait_leg_state 30 "$tmpdir/rel/$name" 0 failed
  restart_replica 1
  wait_volume_state 60 "$tmpdir/rel/$name" healthy
  stop_daemon
fi

# --- The backup plugin: credentials= and cafile= made absolute.  The
# store is unreachable (port 9, no retries), so nbdkit exits with an
# error after the parameters are taken.
rc=0
(
  cd "$tmpdir/rel"
  timeout -k 5 60 "${nbdkit_cmd[@]}" -f -v -U "$tmpdir/backup.sock" \
    "$BACKUP_PLUGIN" target=http://127.0.0.1:9/x name=n \
    credentials=rel.netrc cafile=rel.pem retries=0 --run true \
    </dev/null >"$tmpdir/backup.log" 2>&1
) || rc=$?
cat "$tmpdir/backup.log"
test "$rc" -ne 0
grep -qF "store option credentials=$tmpdir/rel/rel.netrc" "$tmpdir/backup.log"
grep -qF "store option cafile=$tmpdir/rel/rel.pem" "$tmpdir/backup.log"
