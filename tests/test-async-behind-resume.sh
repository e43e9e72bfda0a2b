#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A catch-up that starts while a thread is making the asynchronous leg
# fall behind must not leave the leg syncing while it drops: a leg that
# is syncing and dropping takes no write (every writer marks the bitmap
# instead, while the leg is syncing, which no resync then copies), yet
# says it replicates (async.c, the marking protocol).
#
# With -D replicate.async_behind_pause=8000 the writer that pulls the
# leg ahead waits 8 s after taking it out of the receiving legs (the leg
# is stale), before it drops the queue and marks its own range.  The
# leg's server is paused for the burst that fills the 1M buffer and
# resumed once that writer waits, so the queue it has not dropped yet
# is sent, answered and flushed within the window, the leg is idle and
# nothing is being marked: a catch-up may start and make the leg
# syncing.  Once the writer is done, a new write and a flush; when the
# leg reports replicating with no lag, every leg must hold every write.
# Before the fix the catch-up ran within the window, the writer then
# made the leg drop while it was syncing, and the leg reported
# replicating while it took no more writes: it lacked the burst's end
# and the new write for good.

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
  async-buffer=1M -D replicate.async_behind_pause=8000 control="$ctl"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
size=$("$NBDINFO" --size "$c_uri")

# The burst: the write that finds the buffer full pulls the leg ahead
# and waits in the window (no status is asked meanwhile: the window
# may hold the volume's lock).
pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os
for i in range(48):
    h.pwrite(os.urandom(65536), i * 65536)
" &
burst=$!
wait_until 30 grep -q 'pausing 8000 ms after taking the leg out' "$tmpdir/c.log"
resume_replica "$pause"
wait "$burst"

# A write after the window, which the leg must get too.
"$NBDSH" -u "$c_uri" -c "
import os
h.pwrite(os.urandom(262144), 8 * 1024 * 1024)
h.flush()
"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$r2_uri"
