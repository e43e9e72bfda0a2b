#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A clean stop (SIGTERM) while the asynchronous leg is behind after a
# pull-ahead (DESIGN.md section 14; claims 3 and 6): the writes it
# dropped are only in its slot's bitmap (their activity-log references
# are gone), so the stop must leave them there for the next start.
#   1. The leg's server paused; a burst overflows the 1M buffer: the
#      leg pulls ahead (behind) with a batch stuck in the paused server.
#   2. SIGTERM (timeout=2); the server resumed (the batch lands).
#   3. The next start resyncs the leg incrementally (from its bitmap:
#      a full copy would hide a lost bit), and it then equals the
#      synchronous legs, every acknowledged write included.
#   4. Steps 1 to 3 again with SIGKILL instead of SIGTERM.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
# One worker thread (-t 1) on the paused replica: nbdkit before 1.33.10
# aborts ("raw_send_socket: Assertion `sock >= 0' failed") when a client
# hangs up while two of its threads are sending replies, which is what
# happens here when the stopped controller has gone and the pause ends
# with several of the leg's writes held (see test-fault-pause.sh).
start_replica 2 32M -- -t 1 --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M timeout=2 control="$ctl" wait=30
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# burst SEED: 200 writes of 16K and flushes, mirrored once acknowledged.
burst ()
{
  write_random_blocks "$c_uri" "$expected" "$1" 200 16384 1024 16
}

# 1.
pause_replica "$pause"
burst 5
status_check "$ctl" \
  'leg(2)["async"]["pull_aheads"] == 1 and leg(2)["async"]["state"] == "behind"'

# 2.  The writes the leg missed must survive past the cooler too.
sleep 3
stop_controller c
resume_replica "$pause"

# 3.
restart_controller c
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "incremental"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# 4.  The same with a crash (SIGKILL) instead of the clean stop.
pause_replica "$pause"
burst 6
status_check "$ctl" \
  'leg(2)["async"]["pull_aheads"] == 1 and leg(2)["async"]["state"] == "behind"'
sleep 3
kill_controller c
resume_replica "$pause"
restart_controller c
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "incremental"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
