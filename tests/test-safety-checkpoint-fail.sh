#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync checkpoint must not clear bits that a failure of its target
# has just set (resync.c, clear_copied).
#
# Two file legs, leg 1 behind the faultinject filter; the controller
# with -D replicate.checkpoint_pause=4000, which holds every checkpoint
# for 4 s between its flush of the target and the clearing of the runs
# it copied:
#   1. leg 1 killed; W1 (4 MiB at 0) on leg 0 only; leg 1 restarted:
#      its resync copies W1 and reaches its checkpoint, which pauses;
#   2. in the pause, W2 to the first chunk, which the resync has copied
#      already, fails on leg 1 (refused with EIO by the filter): leg 1
#      is failed, and its bitmap marks the chunk it missed;
#   3. the pause ends: the checkpoint must leave that chunk marked;
#   4. leg 1 comes back and resyncs again: both legs hold W2.
# Before the fix (the clearing did not look at the target's state) the
# chunk was cleared, the second resync skipped it, and leg 1 kept W1
# there while called uptodate.

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
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

start_replica 0
start_replica 1 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c -D replicate.checkpoint_pause=4000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$MiB"

# 1.
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" 0 "$(( 4 * MiB ))"       # W1
restart_replica 1
wait_until 60 grep -q 'resync checkpoint: pausing' "$tmpdir/c.log"

# 2.  (The pause is 4 s; this takes well under a second.)
fault_arm "$rules" "id=miss op=write range=0-$len phase=refuse error=EIO"
write_random "$c_uri" "$expected" 0 "$len"                 # W2
fault_wait "$faults" miss fire 5
fault_clear "$rules"
wait_leg_state 10 "$ctl" 1 failed

# 3, 4.
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
