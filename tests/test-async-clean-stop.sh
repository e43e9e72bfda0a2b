#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A clean stop (SIGTERM) with the asynchronous leg behind (DESIGN.md
# section 14; claim 6): it waits up to timeout= for the queue to be
# flushed, and what it cannot flush stays hot in the activity log, so
# that the next start resyncs it (incrementally) and the leg ends equal.
#   1. A slow leg (50 ms per write) with a queue of 200 writes: the stop
#      flushes all of it (timeout=20); the next start has nothing to copy.
#   2. The leg's server paused with 4M queued: the stop gives up after
#      timeout=2 (bounded), the next start resyncs at least what was
#      queued, and far less than the volume.

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
# One worker thread (-t 1) on the paused replica: nbdkit before 1.33.10
# aborts ("raw_send_socket: Assertion `sock >= 0' failed") when a client
# hangs up while two of its threads are sending replies, which is what
# happens in part 2 when the stopped controller has gone and the pause
# ends with several writes held (it did under ASan in a CI-like run).
# Part 1's 200 writes then take 10 s to land, within timeout=20.
start_replica 2 32M -- -t 1 --filter=pause --filter=delay \
  pause-control="$pause" delay-write=50ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-full=block timeout=20 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# writes SEED N: N overlapping 16K writes, with a flush every 10, and
# the same into $expected.
writes ()
{
  write_random_blocks "$c_uri" "$expected" "$1" "$2" 16384 512 10 nofinal
}

# 1.
writes 1 200
status_check "$ctl" 'leg(2)["async"]["lag_bytes"] > 0'
stop_controller c
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-full=block timeout=2 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" 'leg(2)["last_resync"]["bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# 2.
pause_replica "$pause"
writes 2 256
status_check "$ctl" 'leg(2)["async"]["lag_bytes"] >= 3 * 1024 * 1024'
t0=$(now_us)
stop_controller c
t1=$(now_us)
test $(( (t1 - t0) / 1000000 )) -lt 8
resume_replica "$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" wait=30
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" \
  'leg(2)["last_resync"]["kind"] == "incremental" and 0 < leg(2)["last_resync"]["bytes"] < 24 * 1024 * 1024'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
