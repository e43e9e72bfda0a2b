#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg that stops answering (nbdkit's pause filter in front of a stock
# replica) is failed after timeout= seconds.  Part 1, three legs,
# timeout=2: with leg 1 paused a write completes without error in about
# 2 s and leg 1 is failed for the timeout (and says so); another leg
# killed and restarted meanwhile comes back although leg 1 still hangs;
# resumed, leg 1 comes back and resyncs.  Part 2: the last uptodate leg
# gets twice as long: with one of two legs killed and the other paused,
# a write fails with EIO only after about 4 s and the volume is failed;
# resumed, that leg holds the current generation and returns uptodate,
# later writes succeed and the killed leg resyncs.  After each part the
# oracle: every leg equals what the client wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause
requires python3 -c 'import json, socket'

# timed_write URI EXPECTED OFFSET LENGTH: like write_random, and print
# how long the write and flush took (microseconds, from the client).
timed_write ()
{
  "$NBDSH" -u "$1" -c "
import os, time
buf = os.urandom($4)
t = time.monotonic()
h.pwrite(buf, $3)
h.flush()
print(int((time.monotonic() - t) * 1000000))
with open('$2', 'r+b') as f:
    f.seek($3)
    f.write(buf)
"
}

# The paused replicas run one worker thread (-t 1): nbdkit before
# 1.33.10 aborts ("raw_send_socket: Assertion `sock >= 0' failed",
# fixed upstream by commit 9d82aa4f) when a client hangs up while two of
# its threads are sending replies, which is what happens here when the
# controller cuts off the timed-out leg and the pause ends.
paused_replica_args=(-t 1 --filter=pause)

# --- Part 1: three legs, leg 1 paused.
ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
pause1=$tmpdir/pause1.sock
start_replica 0
start_replica 1 -- "${paused_replica_args[@]}" pause-control="$pause1"
start_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 4194304

pause_replica "$pause1"
# To an extent never written: the activity log is written first.
us=$(timed_write "$c_uri" "$expected" 20971520 131072)
echo "write with leg 1 paused took $us us"
# It waited for the timeout (2 s); not necessarily all of it from its own
# start: a request to leg 1 issued just before it (the activity log's
# cooler flushes every 2 s) may time out first and fail the leg (seen:
# 1.86 s and 1.998 s under load).
test "$us" -ge 1500000
test "$us" -lt 6000000
status_check "$ctl" "leg(1)['state'] == 'failed' and
  'timed out' in leg(1)['last_error'] and
  s['volume']['state'] == 'degraded' and s['volume']['uptodate'] == 2"
# While leg 1 is away the others go on without waiting for it.
us=$(timed_write "$c_uri" "$expected" 16777216 1048576)
test "$us" -lt 2000000
# A leg that hangs does not hold the others back: leg 2 killed (a write
# finds it gone) and restarted comes back while leg 1 is still paused.
kill_replica 2
write_random "$c_uri" "$expected" 25165824 65536
status_check "$ctl" "leg(2)['state'] == 'failed' and
  s['volume']['uptodate'] == 1"
restart_replica 2
wait_leg_state 30 "$ctl" 2 uptodate
status_check "$ctl" "leg(1)['state'] == 'failed' and
  leg(2)['last_resync']['kind'] == 'incremental'"
resume_replica "$pause1"
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'incremental'"
compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- Part 2: two legs, leg 0 killed, leg 1 (the last uptodate one)
# paused.
ctl2=$tmpdir/c2.ctl
expected2=$tmpdir/expected2
pause4=$tmpdir/pause4.sock
start_replica 3
start_replica 4 -- "${paused_replica_args[@]}" pause-control="$pause4"
start_controller c2 "$PLUGIN" "$r3_uri" "$r4_uri" control="$ctl2" timeout=2
wait_volume_state 30 "$ctl2" healthy
new_expected "$expected2" "$c2_uri"
write_random "$c2_uri" "$expected2" 0 4194304
kill_replica 3
# A write finds leg 0 gone (if the controller has not noticed already).
write_random "$c2_uri" "$expected2" 4194304 65536
wait_leg_state 10 "$ctl2" 0 failed
status_check "$ctl2" "leg(1)['state'] == 'uptodate'"

pause_replica "$pause4"
# The write that fails rewrites bytes the leg already holds, so the
# oracle does not depend on whether the paused server applies it later.
start=$(now_us)
expect_error "$c2_uri" EIO "
with open('$expected2', 'rb') as f:
    f.seek(1048576)
    h.pwrite(f.read(131072), 1048576)
"
us=$(( $(now_us) - start ))
echo "write to the paused last leg failed after $us us"
test "$us" -gt 3000000
test "$us" -lt 10000000
status_check "$ctl2" "s['volume']['state'] == 'failed' and
  leg(1)['state'] == 'failed'"

resume_replica "$pause4"
wait_leg_state 30 "$ctl2" 1 uptodate
status_check "$ctl2" "s['volume']['state'] == 'degraded' and
  leg(1)['last_resync'] is None"
write_random "$c2_uri" "$expected2" 1048576 131072
write_random "$c2_uri" "$expected2" 8388608 1048576
compare_legs "$expected2" "$r4_uri"
restart_replica 3
wait_leg_state 30 "$ctl2" 0 uptodate
wait_volume_state 30 "$ctl2" healthy
compare_legs "$expected2" "$r3_uri" "$r4_uri"
