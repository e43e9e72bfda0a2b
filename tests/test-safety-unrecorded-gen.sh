#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg that applied the superblock write of a generation bump and then
# reported an error holds a generation the controller could not record
# anywhere; when it returns it must be taken back, not refused as a
# split brain with the volume stuck failed (metaio_bump and
# restore_recorded in metaio.c; found by the fault campaign, seed 4).
#
# Two file legs, leg 1 behind the faultinject filter.  Leg 0 is killed;
# the bump recording that goes to leg 1 alone, which applies it and
# answers EIO (the only leg left: it is failed, the volume has no
# uptodate leg, the superblock goes back to the last recorded one).
# Leg 1 must come back uptodate by itself (it is the last leg standing,
# a member, its generation one this controller wrote), leg 0 must then
# resync from it, and the legs must equal what was acknowledged.

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
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=3
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))

fault_arm "$rules" "id=sb op=write range=-8K- phase=apply-error count=1"
kill_replica 0
fault_wait "$faults" sb done 10
wait_leg_state 30 "$ctl" 1 uptodate
status_check "$ctl" "s['volume']['state'] == 'degraded'"
write_random "$c_uri" "$tmpdir/expected" $(( 16 * MiB )) $(( 1 * MiB ))

restart_replica 0
wait_volume_state 60 "$ctl" healthy
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
