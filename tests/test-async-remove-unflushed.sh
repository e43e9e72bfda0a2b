#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep remove of an asynchronous leg whose sender holds sent writes
# not yet flushed, the leg pulled ahead meanwhile (async_retire).  The
# removal does not wait for a leg that is dropping already; the sender,
# back from what it was doing, finds itself stopped with those writes in
# hand.  Their activity-log extents must go back: the leg and its slot
# are gone, nothing will resync them.  Before the fix they stayed hot
# for the rest of the run (status: activity log N extents hot; a clean
# stop: "could not be emptied").
#   1. Legs 0 and 1, leg 2 asynchronous with a 1 MiB buffer; the sender
#      is held 10 s after its first batch is answered, unflushed
#      (-D replicate.sender_pause).
#   2. 400 writes of 4 KiB: the buffer fills, the leg pulls ahead.
#   3. nbdrep remove 2 within the hold.  Once the hold is over the
#      activity log cools to nothing; the oracle on legs 0 and 1; a
#      clean stop leaves nothing to resync.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M

# 1.
start_controller c -D replicate.sender_pause=10000 "$PLUGIN" "$r0_uri" \
  "$r1_uri" async="$r2_uri" async-buffer=1M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 2.
write_random_blocks "$c_uri" "$expected" 1 400 4096 4096
grep 'sender: pausing' "$log"
grep 'leg 2: syncing -> stale (asynchronous buffer full' "$log"

# 3.
grep -q 'sender: pause over' "$log" && {
  echo "$0: the writes outlasted the sender's hold"
  exit 1
}
"$NBDREP" remove "$ctl" 2            # returns once the sender stopped
grep 'sender: pause over' "$log"
wait_until 20 status_check "$ctl" 's["volume"]["activity_log"]["hot"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
stop_controller c
! grep 'could not be emptied' "$log"
