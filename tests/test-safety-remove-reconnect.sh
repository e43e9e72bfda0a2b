#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep remove of a leg that the monitor is bringing back: the leg must
# stay removed (monitor.c, still_failed), not be moved back to stale or
# uptodate (a removed leg resynced, its slot freed under it) once the
# monitor has judged it.
#
# Two file legs, leg 1 behind the faultinject filter.  Leg 1's server
# is restarted with its superblock reads held 3 s, so the monitor's
# reconnection sits in the middle of judging it; nbdrep remove takes it
# out meanwhile.  After the hold the controller must still run, leg 1
# must be removed, and the volume must take writes on leg 0.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
MiB=$(( 1024 * 1024 ))

start_replica 0
start_replica 1 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 4 * MiB ))

kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
fault_arm "$rules" "id=sbread op=read range=-8K- phase=hold secs=3 count=1"
restart_replica 1
fault_wait "$faults" sbread fire 30
"$NBDREP" remove "$ctl" 1
fault_wait "$faults" sbread done 10
sleep 2
kill -0 "$(server_pid c)"
status_check "$ctl" "leg(1)['state'] == 'removed' and
  leg(0)['state'] == 'uptodate' and leg(1)['resync'] is None"
write_random "$c_uri" "$tmpdir/expected" $(( 8 * MiB )) $(( 1 * MiB ))
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri"
