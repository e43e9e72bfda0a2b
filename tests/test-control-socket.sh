#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What control=PATH may take and what a controller leaves there.
# PATH must be absent or a stale socket: a regular file at PATH is
# refused by name at start (plugin and filter shape) and left intact;
# a socket a running controller listens on makes a second controller
# refuse to start (nbdkit exits non-zero, never serves), and the first
# keeps its socket (the same inode, nbdrep status still answers).  The
# socket is mode 0600.  A stale socket, left by a controller killed
# with -9, is replaced.  A clean stop removes our socket, but not a
# file that replaced it meanwhile.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires python3 -c 'import json'

# nbdkit as start_controller runs it (with the sanitizer's runtime).
nbdkit_cmd=("$NBDKIT")
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" "$NBDKIT")
fi

# refused NAME PATH ARGS...: `nbdkit -U SOCK ARGS... --run CMD` must
# exit non-zero without running CMD, saying "control=PATH:" on stderr
# (kept in $tmpdir/refused-NAME.log).
refused ()
{
  local name=$1 path=$2 log rc=0
  shift 2
  log=$tmpdir/refused-$name.log
  rm -f "$tmpdir/served"
  timeout -k 5 60 "${nbdkit_cmd[@]}" -U "$tmpdir/refused.sock" "$@" \
    --run "touch $tmpdir/served" </dev/null >"$log" 2>&1 || rc=$?
  cat "$log"
  if [ "$rc" -eq 0 ] || [ -e "$tmpdir/served" ]; then
    echo "$0: $name: not refused (exit status $rc)" >&2
    return 1
  fi
  grep -qF "control=$path:" "$log"
}

start_replica 0
start_replica 1
start_replica 2
ctl=$tmpdir/c.ctl

# --- A regular file at PATH is refused and left intact.
echo "not a socket" >"$ctl"
refused file-plugin "$ctl" "$PLUGIN" "$r0_uri" control="$ctl"
grep -q 'exists and is not a socket' "$tmpdir/refused-file-plugin.log"
refused file-filter "$ctl" --filter="$FILTER" memory 64M \
  replica="$r2_uri" control="$ctl"
grep -q 'exists and is not a socket' "$tmpdir/refused-file-filter.log"
test -f "$ctl"
test "$(cat "$ctl")" = "not a socket"
rm "$ctl"

# --- Our socket: mode 0600, and a second controller is refused.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
test -S "$ctl"
test "$(stat -c %a "$ctl")" = 600
wait_volume_state 60 "$ctl" healthy
ino=$(stat -c %i "$ctl")
refused live "$ctl" "$PLUGIN" "$r2_uri" control="$ctl"
grep -q 'another controller is listening' "$tmpdir/refused-live.log"
test -S "$ctl"
test "$(stat -c %i "$ctl")" = "$ino"
"$NBDREP" status "$ctl"

# --- A stale socket (the controller killed with -9) is replaced.
kill_controller c
test -S "$ctl"
restart_controller c
test "$(stat -c %a "$ctl")" = 600
wait_volume_state 60 "$ctl" healthy
"$NBDREP" status "$ctl"

# --- A clean stop removes our socket.
stop_controller c
test ! -e "$ctl"

# --- ... but not a file that replaced it meanwhile.
restart_controller c
echo "someone else's" >"$tmpdir/other"
mv -f "$tmpdir/other" "$ctl"
stop_controller c
test -f "$ctl"
test "$(cat "$ctl")" = "someone else's"
