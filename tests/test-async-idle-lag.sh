#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An idle asynchronous leg that holds every write flushed has no lag:
# its lag_seconds (the age of the oldest write it may lack, the
# recovery point an operator watches) must be 0, not grow.
#
# The interleaving: a write W is sent to the leg and answered; its
# epoch has no marker yet, so the sender flushes it on its own after a
# short idle time.  The faultinject filter holds that flush 3 s, and
# meanwhile a client flush queues the epoch's marker, the only entry
# in the queue.  Once the flush is done the leg holds everything; the
# marker ends an epoch with nothing left to flush.  A status read 3 s
# later must say lag_seconds 0 (the marker is no write: its time is no
# write's age).  Two rounds, as the activity log's own flush may cut
# the epoch before the sender's idle flush in a round.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'

for round in 1 2; do
  fault_arm "$rules" "id=idle$round op=flush phase=hold secs=3 count=1"
  "$NBDSH" -u "$c_uri" -c "h.pwrite(b'\\x5$round' * 65536, $round * $M)"
  fault_wait "$faults" "idle$round" fire 10
  "$NBDSH" -u "$c_uri" -c 'h.flush()'
  fault_wait "$faults" "idle$round" done 10
  sleep 3
  lag=$(nbdrep_status_get "$ctl" \
    'next("%s %s %s" % (l["async"]["state"], l["async"]["lag_bytes"], l["async"]["lag_seconds"]) for l in s["legs"] if l["index"] == 2)')
  echo "round $round: state, lag bytes, lag seconds: $lag"
  status_check "$ctl" 'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
  if ! status_check "$ctl" 'leg(2)["async"]["lag_seconds"] < 1'; then
    echo "$0: round $round: the leg holds every write flushed, yet its lag_seconds is $lag"
    exit 1
  fi
  fault_clear "$rules"
done
