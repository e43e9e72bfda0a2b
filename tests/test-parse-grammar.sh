#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Sizes, booleans and whole numbers are read as nbdkit reads them
# (issue 18: two grammars in one project).  Every row of the size and
# boolean tables of tests/unit-params.c is given to nbdkit itself (a
# size as the memory plugin's size=, a boolean as the cow filter's
# cow-on-cache=), and to our readers of the same kind:
#   - a size as the plugin's verify-rate= on the command line (refused
#     iff nbdkit refuses it) and through `nbdrep set CTL verify-rate`
#     (nbdrep's own grammar, then the controller's): accepted iff nbdkit
#     accepts it, with the value nbdkit reads;
#   - a boolean as the plugin's force= (refused iff nbdkit refuses it).
# (In a sanitizer build, where a controller takes a second to start,
# only every third size goes through the command line.)
# Every row of the whole-number table of tests/unit-grammar.c goes to
# nbdkit (the limit filter's limit=, read by nbdkit_parse_unsigned:
# accepted, or refused with the row's message; the value through the
# random plugin's seed=), to the plugin's connections= (1 to 64:
# nbdkit_parse_uint64_t, then our range) and to nbdrep's leg index
# (`nbdrep fail CTL STR`: a usage error iff refused; else the
# controller's answer names leg VALUE).  The controller itself runs
# with connections=0x3, read as 3.  The backup store's connections=
# (common/utils/grammar.c in both) must read alike in the backup
# plugin and in `nbdrep backups`.
# The tables must also say what nbdkit does (accepted or not), so a row
# cannot drift from nbdkit unnoticed.  Before sizes went through
# nbdkit's grammar, 64MiB was accepted and 1s refused; before whole
# numbers did, connections=0x10 and connections=+4 were refused and
# nbdrep read the leg index 010 as 10.

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
start_controller c "$PLUGIN" "$r0_uri" control="$ctl" connections=0x3
wait_volume_state 30 "$ctl" healthy
conns=$(nbdrep_status_get "$ctl" "s['legs'][0]['connections']")
[ "$conns" = 3 ] || {
  echo "$0: connections=0x3 gave $conns connections" >&2
  exit 1
}

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

# number_rows: the rows of unit-grammar.c's number_cases, one per line
# as "STR<US>ACCEPTED<US>VALUE<US>MESSAGE" (escapes decoded, the
# message's pieces joined; empty if NULL).
number_rows ()
{
  python3 - "$abs_top_srcdir/tests/unit-grammar.c" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
body = src[src.index("number_cases[] = {"):]
body = body[:body.index("};")]
lit = r'"(?:[^"\\]|\\.)*"'
text = lambda s: "".join(l[1:-1] for l in re.findall(lit, s)) \
    .encode().decode("unicode_escape")
row = r'\{ (%s), (true|false), (\d+),\s*(NULL|(?:%s\s*)+)\s*\}' % (lit, lit)
for m in re.finditer(row, body):
    ok = {"true": "1", "false": "0"}[m.group(2)]
    print("\x1f".join([text(m.group(1)), ok, m.group(3), text(m.group(4))]))
PY
}

# random_sum SEED: a checksum of what the random plugin serves with
# seed=SEED (read by nbdkit_parse_uint32_t, unsigned's width here).
random_sum ()
{
  "$NBDKIT" -U - random 4096 "seed=$1" --run 'nbdcopy "$uri" - | cksum'
}

n=0
while IFS=$'\x1f' read -r str ok value msg; do
  n=$(( n + 1 ))
  if out=$("$NBDKIT" -U - --filter=limit memory 1M "limit=$str" --run true \
             2>&1); then nbdkit_ok=1; else nbdkit_ok=0; fi
  [ "$ok" = "$nbdkit_ok" ] ||
    fail "number table row '$str' says accepted=$ok, nbdkit $nbdkit_ok: $out"
  if [ "$nbdkit_ok" = 1 ]; then
    [ "$(random_sum "$str")" = "$(random_sum "$value")" ] ||
      fail "number table row '$str' says $value, nbdkit's seed= differs"
  else
    [[ $out == *"error: $msg" ]] ||
      fail "number table row '$str': nbdkit says '$out', the row '$msg'"
  fi
  want=0
  if [ "$nbdkit_ok" = 1 ] && [ "$value" -ge 1 ] && [ "$value" -le 64 ]; then
    want=1
  fi
  if [ "$SANITIZER" = no ] || [ $(( n % 3 )) -eq 0 ]; then
    if plugin_refuses connections "$str"; then got=0; else got=1; fi
    [ "$got" = "$want" ] ||
      fail "connections='$str': plugin accepted=$got, expected $want"
  fi
  want=0
  if [ "$nbdkit_ok" = 1 ] && [ "$value" -le 2147483647 ]; then want=1; fi
  rc=0
  "$NBDREP" fail "$ctl" "$str" >/dev/null 2>"$tmpdir/err" || rc=$?
  if [ "$rc" = 2 ]; then got=0; else got=1; fi
  [ "$got" = "$want" ] ||
    fail "nbdrep fail CTL '$str': accepted=$got, expected $want"
  if [ "$got" = 1 ] && ! grep -qF "leg $value " "$tmpdir/err"; then
    fail "nbdrep fail CTL '$str' is not about leg $value: $(cat "$tmpdir/err")"
  fi
done < <(number_rows)
echo "$n whole numbers compared"
[ "$n" -ge 40 ]

# A bad whole number is refused by name, with its range.
plugin_refuses connections 0x &&
  grep -qF 'connections=0x: must be a whole number between 1 and 64' \
    "$tmpdir/plugin.log" ||
  fail "connections=0x: $(cat "$tmpdir/plugin.log")"
rc=0
"$NBDREP" fail "$ctl" 08 2>"$tmpdir/err" || rc=$?
[ "$rc" = 2 ] && grep -qF "INDEX '08' is not a leg index" "$tmpdir/err" ||
  fail "nbdrep fail CTL 08: $rc $(cat "$tmpdir/err")"

# store_accepted LOG STR: did the store take connections=STR (and then
# fail to connect to its closed port)?  Anything else fails the test.
store_accepted ()
{
  if grep -qF "connections=$2: not a number from 1 to 64" "$1"; then
    return 1
  fi
  grep -q "Failed to connect to 127.0.0.1 port 1" "$1" || {
    echo "$0: unexpected output for connections=$2: $(cat "$1")" >&2
    exit 1
  }
}

# The backup store's connections= in the backup plugin and in nbdrep:
# accepted (the store, at a closed port, fails next) or refused by name.
if [ -f "$abs_top_builddir/plugins/backup/.libs/nbdkit-backup-plugin.so" ]
then
  store=http://127.0.0.1:1/none
  preload=()
  if [ "$SANITIZER" != no ]; then
    preload=(env "LD_PRELOAD=$(_sanitizer_runtime)")
  fi
  for str in 0x10 010 " +8" 8 0x 08 8x -1 0x41 ""; do
    case $str in 0x|08|8x|-1|0x41|"") want=0 ;; *) want=1 ;; esac
    run_bounded "$tmpdir/err" 'error' 60 "${preload[@]}" "$NBDKIT" -f \
      -U "$tmpdir/b.sock" \
      "$abs_top_builddir/plugins/backup/.libs/nbdkit-backup-plugin.so" \
      "$store" name=b retries=0 "connections=$str" || :
    if store_accepted "$tmpdir/err" "$str"; then got=1; else got=0; fi
    [ "$got" = "$want" ] ||
      fail "backup plugin connections='$str': accepted=$got:" \
           "$(cat "$tmpdir/err")"
    "$NBDREP" backups "$store" retries=0 "connections=$str" \
      >"$tmpdir/err" 2>&1 || :
    if store_accepted "$tmpdir/err" "$str"; then got=1; else got=0; fi
    [ "$got" = "$want" ] ||
      fail "nbdrep backups connections='$str': accepted=$got:" \
           "$(cat "$tmpdir/err")"
  done
fi

[ "$failures" -eq 0 ]
