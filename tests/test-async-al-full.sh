#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A stuck asynchronous leg must not hold the volume's writes up through
# the activity log (DESIGN.md section 14: "the volume's
# acknowledgements never depend on it").
#
# The activity log keeps an extent hot until the asynchronous leg has
# flushed its writes there.  With a small log (al-extents=4) and the
# asynchronous leg's server holding a write for 20 s (faultinject hold;
# timeout=30, so the leg is not failed meanwhile), writes to more
# extents than the log holds are made one at a time through the
# controller.  The asynchronous buffer (64M) is far from full, so
# neither pull-ahead nor block applies.  Every write must be
# acknowledged within 3 s (the synchronous legs answer at once); the
# asynchronous leg may fall behind (its bitmap then covers what it
# missed) but must not stall the client.  Then the oracle: every write
# reads back, the synchronous legs are equal, and once the leg reports
# replicating with lag_bytes 0 after a flush it equals them.

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

start_replica 0 64M
start_replica 1 64M
start_replica 2 64M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  al-extents=4 timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# The first write the leg's server sees is held for 20 s.
fault_arm "$rules" "id=stuck op=write range=0-$(( 48 * M )) phase=hold secs=20 count=1"

# Ten writes of 64K, one in each of ten 4M extents (the log holds 4),
# each timed alone.
"$NBDSH" -u "$c_uri" -c "
import os, time
slow = []
for i in range(10):
    off = i * 4 * $M + 65536
    buf = os.urandom(65536)
    t = time.monotonic()
    h.pwrite(buf, off)
    dt = time.monotonic() - t
    print('write %d at %d: %.3f s' % (i, off, dt), flush=True)
    if dt > 3:
        slow.append((i, dt))
    with open('$expected', 'r+b') as f:
        f.seek(off)
        f.write(buf)
h.flush()
if slow:
    raise SystemExit('writes held up by the stuck asynchronous leg: %r' % slow)
"

# The oracle, once the held write has landed.
fault_wait "$faults" stuck done 40
fault_clear "$rules"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r2_uri"
