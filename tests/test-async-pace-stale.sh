#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg that fell behind during a stall of its server
# must catch up once the server is fast again, even though the volume
# keeps writing (issue 20: "then catches up with a resync once the leg
# keeps pace again").  Whether a leg keeps pace is judged by the rate
# it took writes at when it was the bottleneck (async.c:
# keeps_pace_locked); a leg behind sends nothing, so that rate, if
# measured across the stall, must not keep it behind for good.
#
#   1. The leg's server is paused (pause filter); W0 (64K) is sent to
#      it and held; 1.25M more writes overflow its 1M buffer: the leg
#      pulls ahead.  W0's batch, answered once the server resumes 3 s
#      later, measures a rate of about 20 KiB/s.
#   2. A client writes 64K every 0.1 s (about 600 KiB/s, far below what
#      the resumed server takes, far above that stale rate) for the
#      rest of the test.
#   3. The leg must be replicating again within 40 s, the client still
#      writing; then the client stops, and after a flush the leg holds
#      every acknowledged write, as the synchronous legs do.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
expected=$tmpdir/expected
stop=$tmpdir/stop-writer
K=1024

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 1.
pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os, time
def put(off):
    buf = os.urandom(64 * $K)
    h.pwrite(buf, off)
    with open('$expected', 'r+b') as f:
        f.seek(off)
        f.write(buf)
put(0)
time.sleep(0.3)
for i in range(1, 21):
    put(i * 64 * $K)
"
status_check "$ctl" 'leg(2)["async"]["state"] == "behind" and leg(2)["async"]["pull_aheads"] == 1'
sleep 3
resume_replica "$pause"

# 2.  Mirrored into the model only once acknowledged; stops when told.
"$NBDSH" -u "$c_uri" -c "
import os, time
n = 0
with open('$expected', 'r+b') as f:
    while not os.path.exists('$stop'):
        off = (2 * 1048576) + (n % 400) * 64 * $K
        buf = os.urandom(64 * $K)
        h.pwrite(buf, off)
        f.seek(off)
        f.write(buf)
        n += 1
        time.sleep(0.1)
print('%d writes' % n)
" &
writer=$!

# 3.
rc=0
wait_until 40 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating"' || rc=$?
nbdrep_status_get "$ctl" \
  'next("%s %s %s" % (l["async"]["state"], l["async"]["pull_aheads"], l["async"]["lag_seconds"]) for l in s["legs"] if l["index"] == 2)'
touch "$stop"
wait "$writer"
if [ "$rc" -ne 0 ]; then
  echo "$0: the leg stayed behind though its server took writes again"
  exit 1
fi
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
