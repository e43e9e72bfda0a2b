#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep status while the monitor reconnects a leg.  The leg's size in
# the status (its server's, read at each connection) was read from the
# leg's capabilities, which leg_open clears and fills while the monitor
# connects the leg, under no lock the control thread takes: a data race
# that ThreadSanitizer reported in test-resync-rate.sh once.  Here the
# status is asked for in a loop while leg 1's server is killed and
# started again three times, each reconnection held for 1 s once the
# capabilities are read (-D replicate.leg_open_pause=1000); under TSan
# (this test is in the TSan selection) a race makes the controller
# exit 66 and the test fail.
# In every build: the status says the leg's size once it is back.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh

ctl=$tmpdir/c.ctl

start_replica 0 32M
start_replica 1 32M
start_controller c -D replicate.leg_open_pause=1000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy

# Ask for the status as fast as it answers until $tmpdir/stop exists
# (its exit status says whether the volume is healthy: not looked at).
(
  set +x
  while [ ! -e "$tmpdir/stop" ]; do
    "$NBDREP" status --json "$ctl" >/dev/null || :
  done
) &
asker=$!

for round in 1 2 3; do
  kill_replica 1
  wait_leg_state 30 "$ctl" 1 failed
  restart_replica 1
  wait_volume_state 60 "$ctl" healthy
done
touch "$tmpdir/stop"
wait "$asker"
status_check "$ctl" 'leg(1)["size"] >= 32 * 1024 * 1024'
