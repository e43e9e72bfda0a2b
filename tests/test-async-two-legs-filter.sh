#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Two asynchronous legs in the filter shape (--filter=replicate over
# a file plugin as leg 0, replica= a synchronous leg 1, async= legs 2
# and 3), each failing its own way, then a controller crash (DESIGN.md
# section 14; claims 2, 3 and 4):
#   - leg 2's server is paused during a burst: it pulls ahead and
#     catches up;
#   - leg 3's server is killed during the burst (or just after it, on
#     a fast host) and started again: it is failed and catches up;
#   - with leg 2's server paused again and writes queued for it, the
#     controller is killed (SIGKILL); after the restart both legs
#     resync incrementally and end equal to the synchronous legs, which
#     hold every acknowledged write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r0.pause
expected=$tmpdir/expected
local_img=$tmpdir/local.img
truncate -s 32M "$local_img"

# Replica 1 is leg 1 (synchronous), replica 0 leg 2, replica 2 leg 3.
start_replica 1 32M
# -t 1: see test-async-stop-behind.sh (nbdkit 1.32 aborts when a client
# hangs up while two threads send replies, as when the pause ends after
# the controller was killed).
start_replica 0 32M -- -t 1 --filter=pause pause-control="$pause"
start_replica 2 32M
start_controller c --filter="$FILTER" file "$local_img" replica="$r1_uri" \
  async="$r0_uri" async="$r2_uri" async-buffer=1M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(3)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# burst SEED N: N overlapping 16K writes, a flush every 8, mirrored into
# $expected once acknowledged.
burst ()
{
  write_random_blocks "$c_uri" "$expected" "$1" "$2" 16384 1024 8
}

# Leg 2 paused and leg 3 killed during a burst.
pause_replica "$pause"
burst 1 600 &
writer=$!
sleep 0.5
kill_replica 2
wait "$writer"
# The burst may be over before the kill (600 writes can take less than
# 0.5 s): the monitor then finds the dead connection at its next tick
# (monitor.c, check_connections), not a write.
wait_until 10 grep -q 'leg 3: [a-z]* -> failed' "$tmpdir/c.log"
restart_replica 2
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] >= 1'
resume_replica "$pause"
burst 2 100
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(3)["async"]["state"] == "replicating"'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["lag_bytes"] == 0 and leg(3)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$local_img" "$r1_uri" "$r0_uri" "$r2_uri"

# The crash, with writes queued for leg 2.
pause_replica "$pause"
burst 3 30
status_check "$ctl" 'leg(2)["async"]["lag_bytes"] > 0'
kill_controller c
resume_replica "$pause"
restart_controller c
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$local_img" "$r1_uri"
wait_until 60 status_check "$ctl" \
  'all(leg(i)["async"]["state"] == "replicating" and leg(i)["last_resync"] is not None for i in (2, 3))'
status_check "$ctl" \
  'all(leg(i)["last_resync"]["kind"] == "incremental" for i in (2, 3))'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["lag_bytes"] == 0 and leg(3)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$local_img" "$r1_uri" "$r0_uri" "$r2_uri"
