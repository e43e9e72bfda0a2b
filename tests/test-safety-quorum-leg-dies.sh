#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# quorum=2 over three legs, legs dying DURING a write
# (nbdkit-replicate-plugin(1), ERRORS: "A write ... succeeds if it
# succeeded on at least quorum legs that were up to date when it
# started.  The legs where it failed are failed ... Otherwise the client
# gets ... EIO"; FAILURES AND RESYNC: the failed leg's bitmap covers what
# it missed, an incremental resync brings it back).
#
# Three file legs, legs 1 and 2 behind the faultinject filter.
#   1. W (1 MiB at 4 MiB) is held on leg 2 (it reached legs 0 and 1);
#      during the hold leg 2's replica is killed: W must be acknowledged
#      (2 legs took it), leg 2 is failed.  Leg 2 comes back: an
#      incremental resync, after which it holds W (its bitmap got W's
#      range, which was in the activity log when it failed: W was never
#      marked in any bitmap, leg 2 being uptodate when W started).
#   2. Y (1 MiB at 8 MiB) is held on legs 1 and 2 (it reached leg 0
#      only); both replicas are killed during the hold: Y must fail
#      with EIO, and the volume is readonly.  Both legs come back:
#      incremental resyncs; the volume is healthy.
#   3. The oracle: every acknowledged write on every leg, and all legs
#      equal; at Y's range the volume holds Y or what was there before.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
test -f "$FAULTINJECT" || _skip "the faultinject filter ($FAULTINJECT)"

ctl=$tmpdir/c.ctl
log=$tmpdir/c.log
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))
W=$(( 4 * M ))
Y=$(( 8 * M ))

start_replica 0 16M
for n in 1 2; do
  start_replica $n 16M -- --filter="$FAULTINJECT" \
    rules="$tmpdir/r$n.rules" log="$tmpdir/r$n.faults"
done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" quorum=2 \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 12 * M ))

# 1.
fault_arm "$tmpdir/r2.rules" \
  "id=w op=write range=$W-$(( W + M )) phase=hold secs=30 count=1"
write_random "$c_uri" "$expected" "$W" "$M" >"$tmpdir/w.out" 2>&1 &
wpid=$!
fault_wait "$tmpdir/r2.faults" w fire 30
kill_replica 2
if ! wait $wpid; then
  cat "$tmpdir/w.out"
  echo "$0: W, taken by 2 legs of quorum 2, was not acknowledged"
  exit 1
fi
status_check "$ctl" \
  'leg(2)["state"] != "uptodate" and s["volume"]["state"] == "degraded"'
fault_clear "$tmpdir/r2.rules"
restart_replica 2
wait_volume_state 60 "$ctl" healthy
grep 'leg 2 (.*) is back: incremental resync' "$log"
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "incremental"'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# 2.
cp "$expected" "$tmpdir/before"
for n in 1 2; do
  fault_arm "$tmpdir/r$n.rules" \
    "id=y op=write range=$Y-$(( Y + M )) phase=hold secs=30 count=1"
done
"$NBDSH" -u "$c_uri" -c "
import errno, os
buf = os.urandom($M)
open('$tmpdir/y', 'wb').write(buf)
try:
    h.pwrite(buf, $Y)
except nbd.Error as e:
    name = e.errno if isinstance(e.errno, str) else errno.errorcode.get(e.errno)
    assert name == 'EIO', e
    print('Y failed: %s' % e)
else:
    raise AssertionError('Y, taken by 1 leg of quorum 2, was acknowledged')
" >"$tmpdir/y.out" 2>&1 &
ypid=$!
fault_wait "$tmpdir/r1.faults" y fire 30
fault_wait "$tmpdir/r2.faults" y fire 30
kill_replica 1
kill_replica 2
if ! wait $ypid; then
  cat "$tmpdir/y.out"
  exit 1
fi
cat "$tmpdir/y.out"
wait_volume_state 30 "$ctl" readonly
for n in 1 2; do
  fault_clear "$tmpdir/r$n.rules"
  restart_replica $n
done
wait_volume_state 60 "$ctl" healthy
grep 'leg 1 (.*) is back: incremental resync' "$log"
status_check "$ctl" '
  leg(1)["last_resync"]["kind"] == "incremental" and
  leg(2)["last_resync"]["kind"] == "incremental"'

# 3.  Y's range: Y or what was there before, the same on every leg.
"$NBDSH" -u "$c_uri" -c "
got = h.pread($M, $Y)
y = open('$tmpdir/y', 'rb').read()
with open('$expected', 'r+b') as f:
    f.seek($Y)
    old = f.read($M)
    assert got in (y, old), 'Y range holds neither Y nor the old data'
    print('the volume holds %s at Y' % ('Y' if got == y else 'the old data'))
    f.seek($Y)
    f.write(got)
"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
