#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Legs that return errors (nbdkit's error filter in front of stock
# replicas): a write that fails on one of three legs with EIO, then in a
# second round with ENOSPC, is acknowledged without error, fails that
# leg (last_error names the write and the error), and once the errors
# stop the leg comes back by an incremental resync.  The last uptodate
# leg is not failed for a read error: the client gets EIO.  An EINVAL
# returned alike by every leg goes to the client and fails no leg.  A
# write every leg fails with EIO at once gets EIO, and once the errors
# stop the volume serves again.  After each part the oracle: every leg
# equals what the client wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter error
requires python3 -c 'import json'

# --- Three legs; r1 fails writes with EIO while $tmpdir/err1 exists,
# r2 with ENOSPC while $tmpdir/err2 exists.
ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0
start_replica 1 -- --filter=error error=EIO error-pwrite-rate=100% \
  error-file="$tmpdir/err1"
start_replica 2 -- --filter=error error=ENOSPC error-pwrite-rate=100% \
  error-file="$tmpdir/err2"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 4194304
compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"

# fail_one_leg INDEX ERRFILE STRERROR OFFSET: make leg INDEX fail writes,
# write through the controller (no error), check that the leg failed for
# that write, write more while it is away, let it come back and check
# that it resynced incrementally and that all legs hold the data.  The
# write goes to an extent never written, so the leg's first failing
# write is the activity log's ("activity log write failed: STRERROR"); a
# write to a hot extent fails it as "write failed: STRERROR".  Either is
# accepted.
fail_one_leg ()
{
  local i=$1 errfile=$2 strerror=$3 off=$4
  local errors_before
  errors_before=$(nbdrep_status_get "$ctl" \
    "next(l['errors'] for l in s['legs'] if l['index'] == $i)")
  touch "$errfile"
  write_random "$c_uri" "$expected" "$off" 262144
  status_check "$ctl" "leg($i)['state'] == 'failed' and
    leg($i)['last_error'] in ('write failed: $strerror',
                              'activity log write failed: $strerror') and
    leg($i)['errors'] > $errors_before and
    s['volume']['state'] == 'degraded' and s['volume']['uptodate'] == 2"
  # More writes while the leg is away: they must reach it by resync.
  write_random "$c_uri" "$expected" $(( off + 8388608 )) 1048576
  rm "$errfile"
  wait_leg_state 30 "$ctl" "$i" uptodate
  wait_volume_state 30 "$ctl" healthy
  status_check "$ctl" "leg($i)['last_resync']['kind'] == 'incremental' and
    0 < leg($i)['last_resync']['bytes'] < s['volume']['size'] and
    leg($i)['last_error'] is None"
  compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"
}

# --- Round 1: EIO on leg 1.  Round 2: ENOSPC on leg 2.
fail_one_leg 1 "$tmpdir/err1" 'Input/output error' 20971520
fail_one_leg 2 "$tmpdir/err2" 'No space left on device' 41943040

# --- The last uptodate leg is not failed for a read error: the client
# gets EIO, as from a single disk, and the leg serves again once the
# error stops.
ctl3=$tmpdir/c3.ctl
expected3=$tmpdir/expected3
start_replica 5 --memory 16M
start_replica 6 --memory 16M -- --filter=error error=EIO \
  error-pread-rate=100% error-file="$tmpdir/eread"
start_controller c3 "$PLUGIN" "$r5_uri" "$r6_uri" control="$ctl3" timeout=2
wait_volume_state 30 "$ctl3" healthy
new_expected "$expected3" "$c3_uri"
write_random "$c3_uri" "$expected3" 0 2097152
kill_replica 5
# A write finds leg 0 gone (if the controller has not noticed already).
write_random "$c3_uri" "$expected3" 1048576 65536
wait_leg_state 10 "$ctl3" 0 failed
touch "$tmpdir/eread"
expect_error "$c3_uri" EIO 'h.pread(65536, 0)'
status_check "$ctl3" "leg(1)['state'] == 'uptodate' and
  leg(1)['last_error'] is None and s['volume']['state'] == 'degraded'"
rm "$tmpdir/eread"
nbdsh -u "$c3_uri" -c "
with open('$expected3', 'rb') as f:
    assert h.pread(2097152, 0) == f.read(2097152)
"
restart_replica 5
wait_volume_state 30 "$ctl3" healthy
compare_legs "$expected3" "$r5_uri" "$r6_uri"

# --- An EINVAL that every leg returns alike is the request's fault: the
# client gets it and no leg fails (DESIGN.md section 4), whether the
# write goes to a hot activity-log extent (only the data write reaches
# the legs) or to a cold one (the log is written first).
ctl2=$tmpdir/c2.ctl
expected2=$tmpdir/expected2
for i in 3 4; do
  start_replica $i --memory 16M -- --filter=error error=EINVAL \
    error-pwrite-rate=100% error-file="$tmpdir/einval"
done
start_controller c2 "$PLUGIN" "$r3_uri" "$r4_uri" control="$ctl2" timeout=2
wait_volume_state 30 "$ctl2" healthy
new_expected "$expected2" "$c2_uri"
# The first write makes extent 0 hot; the second follows at once, long
# before the log's next cooling pass (every 2 s); the third goes to an
# extent never written.
nbdsh -u "$c2_uri" -c "
import errno, os
buf = os.urandom(1048576)
h.pwrite(buf, 0)
with open('$expected2', 'r+b') as f:
    f.write(buf)
open('$tmpdir/einval', 'w').close()
try:
    h.pwrite(b'U' * 65536, 65536)
except nbd.Error as e:
    assert e.errno in ('EINVAL', errno.EINVAL), e
else:
    raise AssertionError('a write refused by every leg succeeded')
"
status_check "$ctl2" "s['volume']['state'] == 'healthy' and
  all(l['state'] == 'uptodate' and l['last_error'] is None
      for l in s['legs'])"
expect_error "$c2_uri" EINVAL "h.pwrite(b'U' * 65536, 8388608)"
status_check "$ctl2" "s['volume']['state'] == 'healthy' and
  all(l['state'] == 'uptodate' and l['last_error'] is None
      for l in s['legs'])"
rm "$tmpdir/einval"
write_random "$c2_uri" "$expected2" 4194304 65536
status_check "$ctl2" "s['volume']['state'] == 'healthy'"
compare_legs "$expected2" "$r3_uri" "$r4_uri"

# --- Every leg fails a write with EIO at once (a shared-storage hiccup):
# the client gets EIO; the refused write reached no leg, so once the
# errors stop the legs, which still hold the same data, serve again.
ctl4=$tmpdir/c4.ctl
expected4=$tmpdir/expected4
for i in 7 8; do
  start_replica $i --memory 16M -- --filter=error error=EIO \
    error-pwrite-rate=100% error-file="$tmpdir/eall"
done
start_controller c4 "$PLUGIN" "$r7_uri" "$r8_uri" control="$ctl4" timeout=2
wait_volume_state 30 "$ctl4" healthy
new_expected "$expected4" "$c4_uri"
write_random "$c4_uri" "$expected4" 0 1048576
touch "$tmpdir/eall"
expect_error "$c4_uri" EIO "h.pwrite(b'U' * 65536, 8388608)"
rm "$tmpdir/eall"
wait_volume_state 30 "$ctl4" healthy
nbdsh -u "$c4_uri" -c "
with open('$expected4', 'rb') as f:
    assert h.pread(1048576, 0) == f.read(1048576)
"
write_random "$c4_uri" "$expected4" 4194304 65536
compare_legs "$expected4" "$r7_uri" "$r8_uri"
