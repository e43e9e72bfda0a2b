#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg is never read, never compared or used by verify,
# never a resync source (DESIGN.md section 14; claim 4), and the
# operator's fail and resync work on it under writes.
#   1. Two file legs and an asynchronous one; 4M written and flushed,
#      the leg caught up.  Then its data is overwritten behind the
#      controller's back (garbage written straight to its server).
#   2. Reads through the controller (read=round-robin) never see the
#      garbage; nbdrep verify --repair-from=0 --wait finds nothing (it
#      counts two legs: without --repair-from it has no majority); leg 1,
#      failed and resynced by the operator, is copied from leg 0, not
#      from the asynchronous leg.
#   3. nbdrep resync 2 --full while a client writes: the leg is
#      rebuilt; nbdrep fail 2 and nbdrep resync 2 while a client
#      writes: it catches up incrementally.  No client request fails,
#      and the leg ends equal to the others.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter delay

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
# One worker thread (-t 1): nbdkit before 1.33.10 aborts in
# raw_send_socket when a client hangs up while two of its threads send
# replies (see test-async-stop-behind.sh).
start_replica 2 32M -- -t 1 --filter=delay delay-write=2ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  read=round-robin control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 1.
write_random "$c_uri" "$expected" 0 $(( 4 * M ))
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r2_uri"
"$NBDSH" -u "$r2_uri" -c "h.pwrite(b'\\xa5' * (4 * $M), 0); h.flush()"

# 2.
"$NBDSH" -u "$c_uri" -c "
with open('$expected', 'rb') as f:
    want = f.read(4 * $M)
for i in range(30):
    if h.pread(4 * $M, 0) != want:
        raise SystemExit('read %d returned the asynchronous leg\\'s data' % i)
"
"$NBDREP" verify "$ctl" --repair-from=0 --wait --rate=0
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
"$NBDREP" fail "$ctl" 1
"$NBDREP" resync "$ctl" 1 --full
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"

# client SEED: writes and flushes for 3 s, all of which must succeed,
# mirrored into $expected.
client ()
{
  "$NBDSH" -u "$c_uri" -c "
import os, random, time
rng = random.Random($1)
end = time.monotonic() + 3
with open('$expected', 'r+b') as f:
    while time.monotonic() < end:
        off = rng.randrange(1024) * 16384
        buf = os.urandom(16384)
        h.pwrite(buf, off)
        f.seek(off)
        f.write(buf)
        if rng.random() < 0.2:
            h.flush()
    h.flush()
"
}

# 3.
client 1 &
writer=$!
sleep 0.5
"$NBDREP" resync "$ctl" 2 --full
wait "$writer"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"]["kind"] == "full"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

client 2 &
writer=$!
sleep 0.5
"$NBDREP" fail "$ctl" 2
sleep 0.5
"$NBDREP" resync "$ctl" 2
wait "$writer"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"]["kind"] == "incremental"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
