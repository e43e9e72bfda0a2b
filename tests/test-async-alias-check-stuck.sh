#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync's alias check (resync.c, same_storage) reads the superblock
# of every other leg, asynchronous ones too; those must be read without
# change_lock (async-sender.c: no I/O to an asynchronous leg under it,
# a slow or stuck one must not hold up the volume's membership
# changes).  Before the fix leg 1's claim read the stuck asynchronous
# leg 3 with change_lock held for timeout= (8 s): leg 2's failure
# meanwhile could not be recorded, and a client write waited ~7 s.
#   Legs 0-2 synchronous, leg 3 asynchronous behind the pause filter,
#   idle, then paused; nbdrep fail 1 (the monitor brings it back: an
#   incremental resync, its claim); leg 2's server killed; a client
#   write is answered within 3 s; the oracle.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
pause=$tmpdir/pause.sock
start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_replica 3 32M -- --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  async="$r3_uri" control="$ctl" timeout=8
wait_until 30 status_check "$ctl" \
  'leg(3)["async"]["state"] == "replicating" and s["volume"]["uptodate"] == 3'
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 65536
sleep 1.5                       # leg 3 idle: its recovery point written
pause_replica "$pause"
"$NBDREP" fail "$ctl" 1
wait_until 10 grep -q 'leg 1: failed -> stale' "$tmpdir/c.log"
sleep 0.5                       # leg 1's claim
kill_replica 2
t0=$(now_us)
write_random "$c_uri" "$expected" 65536 65536
ms=$(( ($(now_us) - t0) / 1000 ))
echo "the write after leg 2's failure took $ms ms"
resume_replica "$pause"
test "$ms" -lt 3000
wait_until 30 status_check "$ctl" 'leg(1)["state"] == "uptodate"'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
