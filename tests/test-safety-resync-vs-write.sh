#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync copy never overwrites a newer client write: each run is
# copied under its chunk lock, which makes client writes to it wait
# (nbdkit-replicate-plugin(1), "A resync runs in the background";
# resync-copy.c, copy_run).
#
# Two file legs, leg 1 behind the faultinject filter:
#   1. leg 1 killed; A (1 MiB at X = 8 MiB, one run of 16 chunks) is
#      written to leg 0 only; a rule holds (4 s) the first write or zero
#      to X on leg 1, and leg 1 is restarted: its incremental resync
#      copies X, and the copy's write of A to X is held;
#   2. during the hold a client write W (all of X) is made: it must be
#      acknowledged only after the held copy came back (the filter's
#      "done" line for it is in the log when W's acknowledgement
#      arrives), having waited for the run's lock;
#   3. the resync ends: both legs and the controller hold W.
# Without the lock W reaches both legs at once and is acknowledged
# during the hold; the held copy then lands on leg 1 after it, and leg
# 1 holds A where leg 0 holds W.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
test -f "$FAULTINJECT" || _skip "the faultinject filter ($FAULTINJECT)"

ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))
X=$(( 8 * MiB ))
len=$MiB

start_replica 0
start_replica 1 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$(( 16 * MiB ))"

# 1.
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" "$X" "$len"                 # A
fault_arm "$rules" \
  "id=copy op=write,zero range=$X-$(( X + len )) phase=hold secs=4 count=1"
restart_replica 1
fault_wait "$faults" copy fire 30
status_check "$ctl" "leg(1)['state'] == 'syncing'"

# 2.  W, while the copy's write is held (4 s; this starts at once).
write_behind_hold "$c_uri" "$expected" "$X" "$len" "$faults" copy \
  "the resync copy of its range"
cat "$faults"
fault_clear "$rules"

# 3.
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
