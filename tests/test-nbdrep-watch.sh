#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep watch against a live controller with a slow full resync of leg 1
# (resync-rate=2M): the plain lines when stdout is not a terminal
# (--count=2: exactly two updates, in the documented form); under a
# pseudo-terminal (script -c) the bars are redrawn in place with ANSI
# escape sequences; --until-idle returns once the resync is done; a
# running verify is shown too; an idle volume prints "idle".

set -euo pipefail
source ./functions.sh
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires_nbdsh
requires script --version
requires timeout --version

ctl=$tmpdir/c.ctl
start_replica 0
start_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  resync-rate=2M
wait_for test -S "$ctl"
wait_volume_state 60 "$ctl" healthy

# --- Idle: one update, the line "idle".
test "$("$NBDREP" watch "$ctl" --count=1)" = idle

# --- Data to copy, then a slow full resync of leg 1.
"$NBDSH" -u "$c_uri" -c '
import os
h.pwrite(os.urandom(16 * 1024 * 1024), 0)
h.flush()
'
"$NBDREP" resync "$ctl" 1 --full
wait_leg_state 30 "$ctl" 1 syncing

# --- Not a terminal: one plain line per item and update.
"$NBDREP" watch "$ctl" --count=2 --interval=0.2 >"$tmpdir/plain"
cat "$tmpdir/plain"
test "$(wc -l <"$tmpdir/plain")" -eq 2
line_re='^leg 1 resync full [0-9]+\.[0-9]% [0-9]+/[0-9]+ bytes [0-9]+(\.[0-9])? (B|KiB|MiB|GiB)/s eta ([0-9]+s|\?)$'
grep -Ecx "$line_re" "$tmpdir/plain" | grep -qx 2
if grep -q $'\033' "$tmpdir/plain"; then
  echo "$0: escape sequences in plain output" >&2
  exit 1
fi

# --- A terminal: header and bar, redrawn in place.
script -qec "$(printf '%q ' "$NBDREP" watch "$ctl" --count=3 --interval=0.2)" \
  /dev/null >"$tmpdir/tty" </dev/null
cat -v "$tmpdir/tty"
grep -q $'\033\\[2K' "$tmpdir/tty"              # clear line
grep -q $'\033\\[2A' "$tmpdir/tty"              # up over header and bar
grep -Eq 'leg 1 resync full +\[[#.]+\] +[0-9]+\.[0-9]%' "$tmpdir/tty"
grep -q 'volume degraded  generation [0-9]*  1/2 legs uptodate' "$tmpdir/tty"

# --- --until-idle returns when the resync is done.
"$NBDREP" set "$ctl" resync-rate 0
timeout 120 "$NBDREP" watch "$ctl" --until-idle --interval=0.2 \
  >"$tmpdir/until"
cat "$tmpdir/until"
test "$(tail -n 1 "$tmpdir/until")" = idle
test "$(leg_state "$ctl" 1)" = uptodate

# --- A running verify is an item too.
"$NBDREP" verify "$ctl" --rate=1M
"$NBDREP" watch "$ctl" --count=1 >"$tmpdir/verify"
cat "$tmpdir/verify"
grep -Eqx '^verify check [0-9]+\.[0-9]% [0-9]+/[0-9]+ bytes .*/s eta ([0-9]+s|\?) mismatched 0 repaired 0$' \
  "$tmpdir/verify"
"$NBDREP" verify "$ctl" --stop
test "$(nbdrep_status_get "$ctl" 's["volume"]["verify"]["state"]')" = stopped
