#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A stuck asynchronous leg must not hold up the recording of a
# synchronous leg's failure, and so the client writes waiting for it
# (DESIGN.md section 14: the volume's acknowledgements never depend on
# the asynchronous leg; section 5 invariant 1: a write waits until the
# failure of a leg it was sent to is recorded).
#   1. Two file legs and an asynchronous one behind the faultinject
#      filter, timeout=30.  The leg's server holds its next superblock
#      write (FUA) for 15 s: the one that records its recovery point
#      after an epoch is flushed (async-sender.c, write_recovery_point).
#   2. A write and a flush start an epoch's flush and that superblock
#      write; it is held.
#   3. Leg 1's server is killed; a client write must be acknowledged
#      within 3 s (leg 1's failure recorded on leg 0 alone), not after
#      the asynchronous leg's superblock write comes back.
#   4. The oracle once the held write has landed.

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
  timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
sleep 1.5                               # past the last recovery point

# 1, 2.
fault_arm "$rules" "id=sb op=write fua=yes phase=hold secs=15 count=1"
write_random "$c_uri" "$expected" 0 65536
fault_wait "$faults" sb fire 10

# 3.
kill_replica 1
"$NBDSH" -u "$c_uri" -c "
import os, time
buf = os.urandom(65536)
t = time.monotonic()
h.pwrite(buf, $M)
dt = time.monotonic() - t
print('write with leg 1 gone: %.3f s' % dt)
with open('$expected', 'r+b') as f:
    f.seek($M)
    f.write(buf)
if dt > 3:
    raise SystemExit('the write waited %.1f s for the asynchronous leg' % dt)
"

# 4.
fault_wait "$faults" sb done 30
fault_clear "$rules"
compare_legs "$expected" "$c_uri" "$r0_uri"
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r2_uri"
