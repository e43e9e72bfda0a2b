#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A stuck asynchronous leg in the middle of its catch-up must not hold
# client writes up (DESIGN.md section 14, async-full=pull-ahead: the
# client never waits for the leg; claim 4).
#   1. The leg's server is killed, 8M is written, and it is started
#      again: the leg catches up incrementally at resync-rate=1M.
#   2. During the catch-up the server holds one write to [16M, 24M) for
#      15 s (timeout=30, so the leg is not failed meanwhile) and the
#      client writes 40 x 64K there, one at a time: more than the 1M
#      buffer.  Each write must be acknowledged within 3 s.
#   3. The oracle once the leg replicates again.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M async-full=pull-ahead resync-rate=1M timeout=30 \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 1.
kill_replica 2
for i in $(seq 0 7); do
  write_random "$c_uri" "$expected" $(( i * M )) "$M"
done
restart_replica 2
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "catching-up"'

# 2.
fault_arm "$rules" \
  "id=stuck op=write range=$(( 16 * M ))-$(( 24 * M )) phase=hold secs=15 count=1"
"$NBDSH" -u "$c_uri" -c "
import os, time
slow = []
with open('$expected', 'r+b') as f:
    for i in range(40):
        off = 16 * $M + i * 65536
        buf = os.urandom(65536)
        t = time.monotonic()
        h.pwrite(buf, off)
        dt = time.monotonic() - t
        if dt > 1:
            print('write %d: %.3f s' % (i, dt), flush=True)
        if dt > 3:
            slow.append((i, round(dt, 3)))
        f.seek(off)
        f.write(buf)
    h.flush()
if slow:
    raise SystemExit('writes held up by the asynchronous leg catching up: %r'
                     % slow)
"

# 3.
fault_wait "$faults" stuck done 30
fault_clear "$rules"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r2_uri"
