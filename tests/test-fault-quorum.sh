#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# quorum=2 over three legs: with one leg killed writes still succeed
# (degraded); with a second one killed writes fail with EIO and change
# nothing, reads go on and return the last data written, and the
# volume is readonly; once both legs are back they resync, writes work
# again and every leg equals what the client wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0
start_replica 1
start_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" quorum=2 timeout=2
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "s['volume']['quorum'] == 2"
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 4194304

# --- One leg down: writes succeed.
kill_replica 2
write_random "$c_uri" "$expected" 1048576 262144
write_random "$c_uri" "$expected" 20971520 1048576
status_check "$ctl" "leg(2)['state'] == 'failed' and
  s['volume']['state'] == 'degraded' and s['volume']['uptodate'] == 2"

# --- Two legs down.  The first write may be the one that finds leg 1
# gone: it rewrites bytes every leg holds, so that whether it reached
# leg 0 does not matter; it fails either way (fewer than 2 legs took it).
kill_replica 1
expect_error "$c_uri" EIO "
with open('$expected', 'rb') as f:
    f.seek(1048576)
    h.pwrite(f.read(65536), 1048576)
"
status_check "$ctl" "leg(1)['state'] == 'failed' and
  leg(0)['state'] == 'uptodate' and
  s['volume']['state'] == 'readonly' and s['volume']['uptodate'] == 1"
# New data is refused, with and without FUA, and so are zero and trim.
expect_error "$c_uri" EIO "h.pwrite(b'Z' * 65536, 2097152)"
expect_error "$c_uri" EIO \
  "h.pwrite(b'Z' * 65536, 2097152, nbd.CMD_FLAG_FUA)"
expect_error "$c_uri" EIO "h.zero(65536, 0)"
expect_error "$c_uri" EIO "h.trim(65536, 0)"
status_check "$ctl" "s['volume']['state'] == 'readonly'"
# Reads are served and return the last data written.
rm -f "$tmpdir/read.img"
"$NBDCOPY" --no-extents "$c_uri" "$tmpdir/read.img"
cmp "$expected" "$tmpdir/read.img"
compare_legs "$expected" "$r0_uri"

# --- Both legs back: they resync and writes work again.
restart_replica 1
restart_replica 2
wait_leg_state 60 "$ctl" 1 uptodate
wait_leg_state 60 "$ctl" 2 uptodate
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'incremental' and
  leg(2)['last_resync']['kind'] == 'incremental'"
write_random "$c_uri" "$expected" 2097152 65536
write_random "$c_uri" "$expected" 33554432 4194304
compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"
