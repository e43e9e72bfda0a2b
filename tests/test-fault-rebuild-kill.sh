#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg killed during its own full rebuild: 96 MiB of random data on a
# two-leg volume, the memory leg killed and restarted empty (a full
# rebuild, slowed by resync-rate=8M), killed again half-way through the
# rebuild and restarted empty once more.  The second rebuild must start
# from the beginning (the leg holds nothing of the first), client writes
# made during it (before and after the copy point) must reach the leg,
# and at the end both legs equal what the client wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

MiB=1048576
ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0 --file 128M
start_replica 1 --memory 128M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" \
  control="$ctl" timeout=5 resync-rate=8M
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "s['volume']['resync_rate'] == 8 * $MiB"
new_expected "$expected" "$c_uri"
head -c $(( 96 * MiB )) /dev/urandom >"$tmpdir/data"
"$NBDCOPY" "$tmpdir/data" "$c_uri"
dd if="$tmpdir/data" of="$expected" bs=$MiB conv=notrunc status=none

# kill_leg1: kill replica 1; a flush through the controller finds it
# gone (without error) and fails it.
kill_leg1 ()
{
  kill_replica 1
  "$NBDSH" -u "$c_uri" -c 'h.flush()' || return 1
  wait_leg_state 10 "$ctl" 1 failed
}

# mid_rebuild: is leg 1 in a full rebuild, at least 16 MiB done but not
# finished?
mid_rebuild ()
{
  status_check "$ctl" "leg(1)['state'] == 'syncing' and
    leg(1)['resync']['kind'] == 'full' and
    16 * $MiB <= leg(1)['resync']['done'] < leg(1)['resync']['total']"
}

# --- First rebuild, killed half-way.
kill_leg1
restart_replica 1
wait_leg_state 30 "$ctl" 1 syncing
wait_until 30 mid_rebuild
kill_leg1

# --- Second rebuild, from an empty leg again.
restart_replica 1
wait_until 30 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and leg(1)['resync']['total'] > 0"
status_check "$ctl" "leg(1)['resync']['kind'] == 'full' and
  leg(1)['resync']['done'] < 16 * $MiB"
# Client writes during the rebuild: near the start (likely copied
# already), in the middle of the data, past the data (zeroes) and
# across the end of the data.
write_random "$c_uri" "$expected" $(( 1 * MiB )) 65536
write_random "$c_uri" "$expected" $(( 48 * MiB + 4096 )) $(( 2 * MiB ))
write_random "$c_uri" "$expected" $(( 100 * MiB )) $MiB
write_random "$c_uri" "$expected" $(( 96 * MiB - 65536 )) 131072
status_check "$ctl" "leg(1)['state'] == 'syncing'"
"$NBDREP" set "$ctl" resync-rate 0
wait_leg_state 60 "$ctl" 1 uptodate
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'full'"
compare_legs "$expected" "$r0_uri" "$r1_uri"
