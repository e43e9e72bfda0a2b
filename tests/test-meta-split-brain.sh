#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Two controllers forced onto disjoint halves of a volume make a split
# brain; it is refused by name, force=true does not get past it, and
# prefer=INDEX resolves it by rebuilding the other leg fully from the
# preferred one (DESIGN.md section 6).
#
# A two-leg volume gets data and is stopped.  Controller "a" starts with
# leg 1's replica down (force=true, wait=1) and writes; stopped.
# Controller "b" starts with leg 0's replica down (force=true) and writes
# other data; stopped.  Both halves now hold generation 3 with different
# ids: a controller on both legs is refused with "split brain" naming
# legs 0 and 1 (also with force=true).  "b" is started once more alone,
# so leg 1 is a generation ahead: still refused (leg 0 "is not an
# ancestor" of leg 1).  With prefer=0 the volume starts from leg 0, the
# side with the LOWER counter: leg 1 is rebuilt fully and every leg
# holds leg 0's data (oracle); b's writes are gone.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
start_replica 0 --file 32M
start_replica 1 --file 32M

# write NAME BYTE OFFSET: write 1 MiB of BYTE at OFFSET through
# controller NAME, flushed.
write ()
{
  local uri_var=${1}_uri
  "$NBDSH" -u "${!uri_var}" -c "
h.pwrite(bytes([$2]) * (1024 * 1024), $3)
h.flush()
"
}
# expect FILE BYTE OFFSET: the same into an expected image.
expect ()
{
  head -c 1M /dev/zero | tr '\0' "\\$(printf %03o "$2")" |
    dd of="$1" bs=1M seek=$(( $3 / 1048576 )) conv=notrunc status=none
}
# start_alone NAME: controller NAME on both legs, forced (the other
# replica is down).
start_alone ()
{
  start_controller "$1" "$PLUGIN" "$r0_uri" "$r1_uri" force=true wait=1
}
# refused WHAT ARGS...: a controller on both legs with ARGS must not
# start, and its log must say WHAT (a grep -E pattern).
refused ()
{
  local what=$1 lines
  shift
  lines=$(wc -l <"$tmpdir/c.log" 2>/dev/null || echo 0)
  if start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
       wait=1 "$@"; then
    echo "$0: the controller started on a split brain ($*)"
    return 1
  fi
  tail -n +"$(( lines + 1 ))" "$tmpdir/c.log" | grep 'cannot start' |
    tee "$tmpdir/refusal"
  grep -Eq "$what" "$tmpdir/refusal"
}

# --- The volume, with some data on both legs.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
write c 0x11 0
write c 0x11 $(( 4 * 1048576 ))
stop_controller c
truncate -s "$size" "$tmpdir/expected"
expect "$tmpdir/expected" 0x11 0
expect "$tmpdir/expected" 0x11 $(( 4 * 1048576 ))

# --- Controller a: leg 0 only.
stop_replica 1
start_alone a
write a 0xaa 0
write a 0xaa $(( 12 * 1048576 ))
stop_controller a
expect "$tmpdir/expected" 0xaa 0
expect "$tmpdir/expected" 0xaa $(( 12 * 1048576 ))

# --- Controller b: leg 1 only.
stop_replica 0
restart_replica 1
start_alone b
write b 0xbb 0
write b 0xbb $(( 8 * 1048576 ))
stop_controller b
restart_replica 0

# --- Equal counters, different ids.
"$NBDREP" inspect --json "$r0_uri" >"$tmpdir/i0.json"
"$NBDREP" inspect --json "$r1_uri" >"$tmpdir/i1.json"
python3 - "$tmpdir/i0.json" "$tmpdir/i1.json" <<'EOF'
import json, sys
g0, g1 = (json.load(open(f))["superblock"]["generation"] for f in sys.argv[1:])
assert g0["counter"] == g1["counter"] and g0["id"] != g1["id"], (g0, g1)
EOF
refused 'split brain: leg 0 \(generation [0-9]+:[0-9a-f]+\) and leg 1 \(generation [0-9]+:[0-9a-f]+\) changed independently.*prefer=INDEX'
refused 'split brain: leg 0 .* and leg 1 .*' force=true

# --- Leg 1 a generation ahead: leg 0 is no ancestor of it.
stop_replica 0
start_alone b
stop_controller b
restart_replica 0
refused 'split brain: leg 0 \(generation [0-9]+:[0-9a-f]+\) is not an ancestor of leg 1'
refused 'split brain: leg 0 .* is not an ancestor of leg 1' force=true

# --- prefer=0: leg 0 wins, leg 1 is rebuilt fully from it.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" wait=1 \
  prefer=0
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
grep -q 'prefer=0 resolved a split brain: leg 0 wins' "$tmpdir/c.log"
test "$(nbdrep_status_get "$ctl" 's["legs"][1]["last_resync"]["kind"]')" = full
test "$(nbdrep_status_get "$ctl" 's["legs"][0]["last_resync"]')" = None
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$c_uri"
