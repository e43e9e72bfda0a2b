#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The writer that pulls an asynchronous leg ahead finishing late must
# not leave the leg behind for good (found by bench/async: the leg
# stale, nothing dropping, writes sent but never flushed, so it never
# caught up again).
#
# With -D replicate.async_mark_pause=3000 the writer that pulls the leg
# ahead waits 3 s after marking, before it is done.  The leg's server is
# paused for the burst that fills the 1M buffer and resumed at once, so
# the writes it was sent are answered and flushed and the leg is idle
# within that window, while another client keeps writing.  A catch-up
# must not start before the pulling writer is done (async_resume waits
# for it); before the fix it started, the late writer made the leg
# stale again under a running catch-up, and the leg stayed behind.  In
# the end the leg must replicate again and equal the others.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M -D replicate.async_mark_pause=3000 control="$ctl"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
size=$("$NBDINFO" --size "$c_uri")

# A client writing one block every 20 ms for 10 s.
"$NBDSH" -u "$c_uri" -c "
import os, time
end = time.monotonic() + 10
i = 0
while time.monotonic() < end:
    h.pwrite(os.urandom(4096), (i % 256) * 4096 + 16 * 1024 * 1024)
    i += 1
    time.sleep(0.02)
h.flush()
" &
trickle=$!

pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os
for i in range(48):
    h.pwrite(os.urandom(65536), i * 65536)
" &
burst=$!
wait_until 30 status_check "$ctl" 'leg(2)["async"]["pull_aheads"] > 0'
resume_replica "$pause"
wait "$burst"
wait "$trickle"
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$r2_uri"
grep -q 'pausing 3000 ms before the pull-ahead is done' "$tmpdir/c.log"
