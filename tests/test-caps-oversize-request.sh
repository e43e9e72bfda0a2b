#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A client request larger than the maximum block size the controller
# advertised, over legs of which only some enforce their maximum.
# nbdkit 1.32 does not refuse such a request from its client, and
# libnbd 1.14 clients (nbdsh, nbdcopy's 256 KiB reads) send it.
#
# Leg 0's server enforces a maximum of 64 KiB
# (nbdkit-blocksize-policy-filter(1), blocksize-error-policy=error),
# leg 1 is stock nbdkit (no maximum); the controller advertises 64 KiB.
# A 256 KiB write, then a 256 KiB read served by leg 0 (read=first),
# each in one request: both succeed, both legs stay uptodate with no
# error, and both hold what was written.  Before the fix the write went
# to the legs whole: leg 0 refused it (EINVAL), leg 1 took it, and leg
# 0 was failed; the read got EINVAL from leg 0.
#
# 2. init=zero over the same legs, leg 0's server without write-zeroes
#    (nbdkit-nozero-filter(1)) and leg 1 holding old data: leg 0 gets
#    writes of zeroes within its maximum, the volume starts healthy and
#    reads as zeroes.  Before the fix init=zero sent it writes of 64 MiB
#    of zeroes, which it refused, and the controller did not start.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter blocksize-policy
requires_filter nozero
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
strict=(--filter=blocksize-policy blocksize-error-policy=error
        blocksize-maximum=64K)

# --- 1. Requests over the maximum.
start_replica 0 -- "${strict[@]}"
start_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2 \
  read=first
wait_volume_state 30 "$ctl" healthy
test "$(nbdinfo --json "$c_uri" | jq '.exports[0].block_size_maximum')" = 65536
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 1048576 262144
status_check "$ctl" "s['volume']['state'] == 'healthy' and
  leg(0)['errors'] == 0 and leg(1)['errors'] == 0"
"$NBDSH" -u "$c_uri" -c "
with open('$expected', 'rb') as f:
    f.seek(1048576 - 65536)
    want = f.read(393216)
assert h.pread(393216, 1048576 - 65536) == want, 'read mismatch'
"
status_check "$ctl" "s['volume']['state'] == 'healthy' and
  leg(0)['errors'] == 0 and leg(1)['errors'] == 0 and
  leg(0)['reads'] > 0"
stop_controller c
compare_leg_files "$expected" 0 1
stop_replica 0
stop_replica 1

# --- 2. init=zero over a leg without write-zeroes.
ctl=$tmpdir/d.ctl
rm -f "$tmpdir"/r[01].img
truncate -s 64M "$tmpdir/r1.img"
printf 'old data' | dd of="$tmpdir/r1.img" conv=notrunc status=none
start_replica 0 -- --filter=nozero "${strict[@]}"
start_replica 1
start_controller d "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2 \
  init=zero
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(0)['errors'] == 0 and leg(1)['errors'] == 0"
new_expected "$expected" "$d_uri"
stop_controller d
compare_leg_files "$expected" 0 1
stop_replica 0
stop_replica 1
