#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Legs whose servers enforce block size constraints
# (nbdkit-blocksize-policy-filter(1), blocksize-error-policy=error:
# EINVAL for a read, write or block status over the maximum, or
# unaligned to the minimum).
#
# 1. Two legs with a maximum of 64 KiB: the controller tells its
#    clients 64 KiB, and its own requests stay within it too.  4 MiB
#    written in 64 KiB writes, leg 1 killed, 4 MiB more, leg 1 back:
#    its resync (block status, reads, writes of whole runs before the
#    fix: EINVAL, failing the source and with it the volume) completes,
#    the volume is healthy, a verify finds nothing, and both legs hold
#    what was written.
# 2. A leg added later whose server is stricter than what the clients
#    were told (minimum 4096 above 1, maximum 64 KiB below 32 MiB) is
#    refused by nbdrep add (before the fix it joined, and the first
#    512-byte or 1 MiB write a client may send failed it for good).  The
#    clients' writes then succeed on the two legs, which stay uptodate.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter blocksize-policy
requires python3 -c 'import json'

strict=(--filter=blocksize-policy blocksize-error-policy=error)

# --- 1. Legs with a maximum of 64 KiB.
ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0 -- "${strict[@]}" blocksize-maximum=64K
start_replica 1 -- "${strict[@]}" blocksize-maximum=64K
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
test "$(nbdinfo --json "$c_uri" | jq '.exports[0].block_size_maximum')" = 65536
new_expected "$expected" "$c_uri"
write_random_blocks "$c_uri" "$expected" 1 64 65536 64
kill_replica 1
write_random_blocks "$c_uri" "$expected" 2 64 65536 128
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(0)['errors'] == 0 and
  leg(1)['last_resync']['bytes'] > 0"
"$NBDREP" verify "$ctl" --wait
status_check "$ctl" "s['volume']['state'] == 'healthy'"
stop_controller c
# The oracle's nbdcopy would read in requests over 64 KiB: the files.
compare_leg_files "$expected" 0 1
stop_replica 0
stop_replica 1

# --- 2. A stricter leg added later.
ctl=$tmpdir/d.ctl
rm -f "$tmpdir"/r[0-2].img
start_replica 0
start_replica 1
start_replica 2 -- "${strict[@]}" blocksize-minimum=4096 blocksize-maximum=64K
start_controller d "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
nbdinfo --json "$d_uri" | jq -e '.exports[0] |
  .block_size_minimum == 1 and .block_size_maximum == 33554432'
rc=0
"$NBDREP" add "$ctl" "$r2_uri" >"$tmpdir/add.out" 2>&1 || rc=$?
cat "$tmpdir/add.out"
test "$rc" -eq 1
grep -F 'minimum block size 4096' "$tmpdir/add.out"
status_check "$ctl" "len(s['legs']) == 2"
new_expected "$expected" "$d_uri"
write_random "$d_uri" "$expected" 512 512
write_random "$d_uri" "$expected" 1048576 1048576
status_check "$ctl" "s['volume']['state'] == 'healthy' and
  leg(0)['errors'] == 0 and leg(1)['errors'] == 0"
stop_controller d
compare_legs "$expected" "$r0_uri" "$r1_uri"
