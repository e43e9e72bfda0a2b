#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Crash recovery and init=zero flush every copy target before the empty
# activity log is written (DESIGN.md section 13): NBD's FUA makes
# durable only the request that carries it, so an empty log written
# with FUA over unflushed copies says "nothing to recover" while the
# copies can still be lost.
#
# Two 32 MiB file legs; leg 1 is served through the faultinject filter
# and then nbdkit's cache filter with cache=writeback, which keeps
# written blocks in its own temporary cache file and writes them to the
# file only on flush (a FUA write: that request only); kill -9 of the
# replica throws the cache away, like a disk losing its volatile write
# cache.  The controller runs with init=zero and timeout=30.
#
# 1. init=zero: both legs hold random data in their first 16 MiB and
#    no metadata.  The controller zeroes the data area of both legs and
#    writes the empty activity log, and is healthy; then kill -9 the
#    controller (no final flush) and leg 1's replica, restart both.
#    Oracle: the controller and both legs read zeroes everywhere.
# 2. Crash recovery: X is written to R (1 MiB at 4 MiB, in one 4 MiB
#    activity-log extent) and flushed (acknowledged).  Leg 1's data
#    writes are then held (range 0-<volume size>: the activity log, in
#    the metadata area, is not) and Y is written to R: it reaches leg 0
#    and is held on leg 1; the controller is killed (-9) and so is leg
#    1's replica (the held write dies with it).  Checked then: leg 0
#    holds Y in R, leg 1 X, and R's extent is hot in the activity log
#    of both legs.  The restarted controller logs a crash recovery of
#    that one extent (copied from leg 0 to leg 1, into leg 1's cache)
#    and is healthy; at once (nothing written, so nothing flushes) kill
#    -9 the controller and leg 1's replica, restart both.
#    Oracle: the legs and the controller read the same data area; it is
#    the acknowledged data with R holding Y (the write in flight, which
#    recovery made the volume's) or X.
# Before the fix the zeroes (1) and the copies (2) were still in leg
# 1's cache when the empty log was written: after the second kill leg 1
# held its old data while both legs were uptodate with an empty log.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter cache
requires python3 -c 'import json'

MiB=1048576
ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected

# kill_and_restart: kill -9 the controller (so nothing flushes), then
# leg 1's replica (its cache is lost), clear the rules, restart both.
kill_and_restart ()
{
  kill_controller c || return 1
  kill_replica 1 || return 1
  fault_clear "$rules" || return 1
  restart_replica 1 || return 1
  restart_controller c || return 1
  wait_volume_state 30 "$ctl" healthy
}

# --- 1. init=zero over legs that hold data.
for i in 0 1; do
  head -c $(( 16 * MiB )) /dev/urandom >"$tmpdir/r$i.img"
  truncate -s 32M "$tmpdir/r$i.img"
done
start_replica 0 32M
start_replica 1 32M -- --filter="$FAULTINJECT" --filter=cache \
  cache=writeback rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  init=zero timeout=30
wait_volume_state 30 "$ctl" healthy
grep 'init=zero: zeroing' "$tmpdir/c.log"
size=$("$NBDINFO" --size "$c_uri")
new_expected "$expected" "$c_uri"
kill_and_restart
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"

# --- 2. Crash recovery.
R=$(( 4 * MiB ))
len=$MiB
write_random "$c_uri" "$expected" "$R" "$len"              # X
fault_arm "$rules" \
  "id=hold op=write,zero,trim range=0-$size phase=hold secs=30 count=0"
# Y, never acknowledged: saved first, then written (the client sees an
# error when the controller dies).
"$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom($len)
with open('$tmpdir/Y', 'wb') as f:
    f.write(buf)
h.pwrite(buf, $R)
" >"$tmpdir/writer.out" 2>&1 &
writer=$!
fault_wait "$faults" hold fire 10

# region_is URI FILE: does URI hold FILE's bytes in R?
region_is ()
{
  "$NBDSH" -u "$1" -c "
import sys
want = open('$2', 'rb').read()
sys.exit(0 if h.pread($len, $R) == want else 1)
"
}
wait_until 10 region_is "$r0_uri" "$tmpdir/Y"
kill_controller c
kill_replica 1
wait "$writer" || true
cat "$tmpdir/writer.out"
fault_clear "$rules"
restart_replica 1

# Before recovery: leg 0 holds Y, leg 1 still X, and R's extent is hot
# in the activity log of both legs.
region_is "$r0_uri" "$tmpdir/Y"
dd if="$expected" of="$tmpdir/X" bs=$MiB skip=$(( R / MiB )) count=1
region_is "$r1_uri" "$tmpdir/X"
for i in 0 1; do
  uri_var=r${i}_uri
  "$NBDREP" inspect --json "${!uri_var}" >"$tmpdir/inspect$i.json"
  python3 - "$tmpdir/inspect$i.json" "$R" "$len" <<'EOF'
import json, sys
ins = json.load(open(sys.argv[1]))
r, n = int(sys.argv[2]), int(sys.argv[3])
ranges = [(x["offset"], x["offset"] + x["length"])
          for x in ins["activity_log"]["ranges"]]
print("activity log of %s: %r" % (ins["uri"], ranges))
assert any(a <= r and r + n <= b for a, b in ranges), \
    "R is not hot in the activity log of %s: %r" % (ins["uri"], ranges)
EOF
done

lines_before=$(wc -l <"$tmpdir/c.log")
restart_controller c
wait_volume_state 30 "$ctl" healthy
tail -n +"$(( lines_before + 1 ))" "$tmpdir/c.log" >"$tmpdir/c-recovery.log"
grep -E 'crash recovery: 1 activity-log extent\(s\), [0-9]+ bytes made equal on 2 leg\(s\)' \
  "$tmpdir/c-recovery.log"
region_is "$r1_uri" "$tmpdir/Y"      # the copy reached leg 1 (its cache)
kill_and_restart

# The oracle: the legs are equal, and hold the acknowledged data with Y
# or X in R.
compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$c_uri"
if region_is "$c_uri" "$tmpdir/Y"; then
  dd if="$tmpdir/Y" of="$expected" bs=$MiB seek=$(( R / MiB )) conv=notrunc
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
