#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Pull-aheads racing flushes, catch-ups and a failing server (DESIGN.md
# section 14; claim 3: no write is lost on the asynchronous leg, a
# resync checkpoint never clears a bit set for a dropped write).
# A client writes at queue depth 8 with flushes for 20 s while the
# asynchronous leg's server (2 ms per write, a 1M buffer, catch-ups at
# resync-rate=4M) is paused and resumed every few tenths of a second,
# so that the leg pulls ahead, starts catching up and is paused again
# in the middle, over and over; once in the middle its server is
# killed and started again.  At the end, after a flush, the leg must
# replicate with lag_bytes 0 and equal the synchronous legs, which
# hold every acknowledged write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause
requires_filter delay

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter=pause --filter=delay pause-control="$pause" \
  delay-write=2ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M resync-rate=4M timeout=3 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
# Restarted once, so that the leg joins incrementally: its catch-ups
# then copy its bitmap only (see test-async-pullahead-incremental.sh).
stop_controller c
restart_controller c
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# The writer: rounds of 8 writes in flight (each slot in its own 3M
# region, so none overlap while in flight), mirrored once all 8 are
# acknowledged, a flush after every third round.
"$NBDSH" -u "$c_uri" -c "
import os, random, time
rng = random.Random(11)
end = time.monotonic() + 20
rounds = 0
with open('$expected', 'r+b') as f:
    while time.monotonic() < end:
        batch = []
        for slot in range(8):
            n = rng.choice([1, 4, 16])
            off = slot * 3 * 1048576 + rng.randrange(768 - n) * 4096
            buf = os.urandom(n * 4096)
            h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(buf)), off)
            batch.append((off, buf))
        while h.aio_in_flight() > 0:
            h.poll(-1)
        for off, buf in batch:
            f.seek(off)
            f.write(buf)
        rounds += 1
        if rounds % 3 == 0:
            h.flush()
    h.flush()
print('%d rounds' % rounds)
" &
writer=$!

for i in $(seq 1 12); do
  sleep "0.$(( RANDOM % 5 + 2 ))"
  pause_replica "$pause"
  sleep "0.$(( RANDOM % 5 + 2 ))"
  resume_replica "$pause"
  if [ "$i" -eq 6 ]; then
    kill_replica 2
    restart_replica 2
  fi
done
wait "$writer"

status_check "$ctl" 'leg(2)["async"]["pull_aheads"] >= 2'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r2_uri"
