#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A replica killed while the volume is idle (no request to find out) is
# noticed by itself: the poller sees its connections end and the
# monitor fails the leg within a second or two ("connection to the
# server lost"), so status tells the truth and a backup would not pick
# it.  Restarted, it comes back (nothing was written meanwhile: an
# incremental resync of nothing) and the volume is healthy again; the
# oracle: both legs equal what the client wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
start_replica 0
start_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 1048576 65536
# The activity log cools (else the failure hands the hot extent back).
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

kill_replica 1
start=$(now_us)
wait_leg_state 10 "$ctl" 1 failed
echo "leg 1 failed $(( $(now_us) - start )) us after its server was killed"
status_check "$ctl" "s['volume']['state'] == 'degraded' and
  leg(0)['state'] == 'uptodate'"
# (last_error moves on to the reconnection attempts: the log keeps it.)
grep "error: leg 1 (.*r1.sock) failed: connection to the server lost" \
  "$tmpdir/c.log"

restart_replica 1
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'incremental' and
  leg(1)['last_resync']['bytes'] + leg(1)['last_resync']['zeroed'] == 0"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri"
