#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Sizes and booleans are read as nbdkit reads them (issue: two grammars
# in one project).  Every row of the size and boolean tables of
# tests/unit-params.c is given to nbdkit itself (a size as the memory
# plugin's size=, a boolean as the cow filter's cow-on-cache=), and to
# our readers of the same kind:
#   - a size as the plugin's verify-rate= on the command line (refused
#     iff nbdkit refuses it) and through `nbdrep set CTL verify-rate`
#     (nbdrep's own grammar, then the controller's): accepted iff nbdkit
#     accepts it, with the value nbdkit reads;
#   - a boolean as the plugin's force= (refused iff nbdkit refuses it).
# (In a sanitizer build, where a controller takes a second to start,
# only every third size goes through the command line.)
# The tables must also say what nbdkit does (accepted or not), so a row
# cannot drift from nbdkit unnoticed.  Before sizes went through
# nbdkit's grammar, 64MiB was accepted and 1s refused.

source ./functions.sh
set -euo pipefail
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdinfo
requires python3 -c 'import json'
requires_plugin memory
requires_filter cow

ctl=$tmpdir/c.ctl
none="nbd+unix:///?socket=$tmpdir/none.sock"
start_replica 0
start_controller c "$PLUGIN" "$r0_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy

# rows TABLE: print the strings of a table of unit-params.c, one per
# line as "STR<US>ACCEPTED" (US: the unit separator, 0x1f; ACCEPTED: 1
# or 0), escapes decoded.
rows ()
{
  python3 - "$abs_top_srcdir/tests/unit-params.c" "$1" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
body = src[src.index(sys.argv[2] + "[] = {"):]
body = body[:body.index("};")]
for m in re.finditer(r'\{ "((?:[^"\\]|\\.)*)", ([^,}]+)', body):
    s = m.group(1).encode().decode("unicode_escape")
    v = m.group(2).strip()
    ok = {"true": 1, "false": 0, "-1": 0}.get(v, 1)
    print("%s\x1f%d" % (s, ok))
PY
}

# nbdkit_size STR: print the size nbdkit reads from STR, or "refused".
nbdkit_size ()
{
  "$NBDKIT" -U - memory "size=$1" --run 'nbdinfo --size "$uri"' 2>/dev/null ||
    echo refused
}

# plugin_refuses KEY VALUE: does the plugin refuse KEY=VALUE?  (Started
# with a leg that does not exist and wait=0: a value it takes fails
# later, at start, with "cannot start the volume"; anything else, e.g.
# a plugin that does not load, fails the test.)
plugin_refuses ()
{
  local log=$tmpdir/plugin.log
  local -a preload=()
  if [ "$SANITIZER" != no ]; then
    preload=(env "LD_PRELOAD=$(_sanitizer_runtime)")
  fi
  run_bounded "$log" 'cannot start the volume|error: .*=' 30 \
    "${preload[@]}" "$NBDKIT" -f -U "$tmpdir/p.sock" "$PLUGIN" "$none" \
    wait=0 "$1=$2" || true
  if grep -qF "$1=" "$log"; then
    return 0
  fi
  grep -q 'cannot start the volume' "$log" || {
    echo "$0: unexpected output for $1=$2: $(cat "$log")" >&2
    exit 1
  }
  return 1
}

failures=0
# fail MESSAGE: count a disagreement.
fail ()
{
  echo "FAIL: $*" >&2
  failures=$(( failures + 1 ))
}

n=0
while IFS=$'\x1f' read -r str ok; do
  n=$(( n + 1 ))
  ref=$(nbdkit_size "$str")
  if [ "$ref" = refused ]; then nbdkit_ok=0; else nbdkit_ok=1; fi
  [ "$ok" = "$nbdkit_ok" ] ||
    fail "size table row '$str' says accepted=$ok, nbdkit says $ref"
  if [ "$SANITIZER" = no ] || [ $(( n % 3 )) -eq 0 ]; then
    if plugin_refuses verify-rate "$str"; then plugin_ok=0; else plugin_ok=1; fi
    [ "$plugin_ok" = "$nbdkit_ok" ] ||
      fail "verify-rate='$str': plugin accepted=$plugin_ok, nbdkit $ref"
  fi
  if "$NBDREP" set "$ctl" verify-rate "$str" >/dev/null 2>&1; then
    got=$(nbdrep_status_get "$ctl" "s['volume']['verify_rate']")
    [ "$ref" = "$got" ] ||
      fail "nbdrep set verify-rate '$str' gave $got, nbdkit $ref"
  else
    [ "$ref" = refused ] ||
      fail "nbdrep set verify-rate '$str' refused, nbdkit reads $ref"
  fi
done < <(rows size_cases)
echo "$n sizes compared"
[ "$n" -ge 40 ]

n=0
while IFS=$'\x1f' read -r str ok; do
  n=$(( n + 1 ))
  if "$NBDKIT" -U - --filter=cow memory 1M "cow-on-cache=$str" --run true \
       >/dev/null 2>&1; then nbdkit_ok=1; else nbdkit_ok=0; fi
  [ "$ok" = "$nbdkit_ok" ] ||
    fail "boolean table row '$str' says accepted=$ok, nbdkit $nbdkit_ok"
  if plugin_refuses force "$str"; then plugin_ok=0; else plugin_ok=1; fi
  [ "$plugin_ok" = "$nbdkit_ok" ] ||
    fail "force='$str': plugin accepted=$plugin_ok, nbdkit $nbdkit_ok"
done < <(rows bool_cases)
echo "$n booleans compared"
[ "$n" -ge 20 ]

[ "$failures" -eq 0 ]
