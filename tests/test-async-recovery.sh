#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg across a full buffer, a controller crash and a
# failover (DESIGN.md section 14), with the oracle after each step.
#   1. async-full=pull-ahead with a 1M buffer: a burst of writes while
#      the leg's server is paused overflows it; the leg falls behind
#      (pull_aheads > 0), and once resumed catches up by itself and
#      replicates again, holding exactly what the synchronous legs hold.
#   2. The controller is killed (SIGKILL) with writes queued for the
#      slow leg; after the restart the leg resyncs incrementally (its
#      bitmap and the activity log, not the whole volume) and ends equal
#      to the others.
#   3. async-full=block: the same burst waits instead (no pull-ahead).
#   4. Every synchronous leg gone: the start is refused and names the
#      asynchronous leg; prefer=2 force=true promotes it, and the volume
#      then reads what the leg held (every write before the last flush).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter delay
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
# One worker thread (-t 1): nbdkit 1.32 aborts when a client hangs up
# while two of its threads send replies (see test-async-stop-behind.sh),
# as when the controller is killed with writes held here.
start_replica 2 32M -- -t 1 --filter=pause --filter=delay \
  pause-control="$pause" delay-write=20ms delay-zero=20ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M timeout=60 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# burst URI: 600 random 4K writes at QD 16, then a flush.
burst ()
{
  "$NBDSH" -u "$1" -c "
import os, random
rng = random.Random(7)
size = h.get_size()
bufs = []
for i in range(600):
    buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(4096)))
    bufs.append(buf)
    while h.aio_in_flight() >= 16:
        h.poll(-1)
    h.aio_pwrite(buf, rng.randrange(size // 4096) * 4096)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.flush()
"
}

# 1.  Pull-ahead (the leg's server paused, so that the buffer surely
# fills), then catching up by itself.
pause_replica "$pause"
burst "$c_uri"
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] > 0 and leg(2)["async"]["state"] == "behind"'
resume_replica "$pause"
wait_until 120 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$r2_uri"

# 2.  A crash with writes queued (the leg's server paused, so they are
# certainly not on it): an incremental resync after it copies at least
# their activity-log extents, far less than the volume.
pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os
for i in range(40):
    h.pwrite(os.urandom(65536), i * 262144)
"
status_check "$ctl" 'leg(2)["async"]["lag_bytes"] >= 40 * 65536'
kill_controller c
resume_replica "$pause"
restart_controller c
wait_volume_state 30 "$ctl" healthy
wait_until 120 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" \
  'leg(2)["last_resync"]["kind"] == "incremental" and 40 * 65536 <= leg(2)["last_resync"]["bytes"] < 16 * 1024 * 1024'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c

# 3.  async-full=block: writers wait, the leg never falls behind.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M async-full=block control="$ctl"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
burst "$c_uri"
status_check "$ctl" \
  'leg(2)["async"]["pull_aheads"] == 0 and leg(2)["async"]["state"] == "replicating"'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$r2_uri"
"$NBDCOPY" --no-extents "$c_uri" "$expected"
stop_controller c

# 4.  Failover: the synchronous legs are gone.
stop_replica 0
stop_replica 1
rm -f "$tmpdir/r0.img" "$tmpdir/r1.img"
start_replica 0 --memory 32M
start_replica 1 --memory 32M
if start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
     control="$ctl" wait=2; then
  echo "$0: a start with only the asynchronous leg holding the volume was accepted"
  exit 1
fi
grep -q 'only asynchronous leg(s) 2 can be reached' "$tmpdir/c.log"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" prefer=2 force=true
grep -q 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
