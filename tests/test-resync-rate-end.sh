#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A rate-limited resync ends when its last run is copied: the copiers
# that find no run left give back the slot they reserved (resync-copy.c,
# lane_thread).  Kept, each of the 16 copiers waited out a slot (1 MiB
# at resync-rate) in turn at the end of every pass: at resync-rate=1M a
# resync of 2 MiB took about 17 s, not 2.
#
# Two file legs, resync-rate=1M; leg 1 misses 2 MiB; back, its resync
# must be done within 10 s (generous: 2 s of copying at the cap), then
# the oracle.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))

start_replica 0 64M
start_replica 1 64M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5 \
  resync-rate=1M
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"

kill_replica 1
write_random "$c_uri" "$tmpdir/expected" 0 $(( 2 * MiB ))
wait_leg_state 10 "$ctl" 1 failed
restart_replica 1
"$NBDREP" resync "$ctl" 1
wait_until 10 grep -q 'leg 1: .*syncing' "$tmpdir/c.log"
start=$(date +%s)
wait_volume_state 10 "$ctl" healthy
echo "resync took about $(( $(date +%s) - start )) s"
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
