#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Verify with --repair reads and repairs each run under the run's lock,
# so a repair never overwrites a client write
# (nbdkit-replicate-plugin(1), "nbdrep verify ... under the same lock";
# verify.c, verify_run).
#
# Three file legs, leg 1 behind the faultinject filter; A (1 MiB at X =
# 8 MiB, one verify run) written to all.  Behind the controller's back
# leg 2's file gets 4 KiB of junk at C = X + 768 KiB.  A rule holds (4 s)
# leg 1's first read of X, and `nbdrep verify --repair` runs: its read
# of the run at X is held on leg 1 (legs 0 and 2 have answered).  During
# the hold a client write W (512 KiB at X, not touching C) is made: it
# must be acknowledged only after the held read came back (its "done"
# line is in the filter's log), having waited for the run's lock.  At
# the end the verify reports exactly C's block on leg 2, repaired, and
# every leg and the controller hold W at X and A's bytes at C.
# Without the lock W lands on every leg during the hold; leg 1's read
# then returns W where legs 0 and 2 returned A, the majority (A) is the
# reference and the repair writes A back over W on every leg.

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
KiB=1024
MiB=$(( 1024 * KiB ))
X=$(( 8 * MiB ))
C=$(( X + 768 * KiB ))
wlen=$(( 512 * KiB ))

start_replica 0 16M
start_replica 1 16M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_replica 2 16M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" verify-rate=0
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$(( 12 * MiB ))"           # A at X

# Leg 2 differs at C, behind the controller's back.
head -c $(( 4 * KiB )) /dev/urandom >"$tmpdir/junk"
dd if="$tmpdir/junk" of="$tmpdir/r2.img" bs=4096 seek="$C" \
  oflag=seek_bytes conv=notrunc status=none
cmp -s -n 4096 -i "$C:$C" "$expected" "$tmpdir/r2.img" && exit 1

fault_arm "$rules" \
  "id=vread op=read range=$X-$(( X + MiB )) phase=hold secs=4 count=1"
vrc=0
"$NBDREP" verify "$ctl" --repair --wait >"$tmpdir/verify" 2>&1 &
verifier=$!
fault_wait "$faults" vread fire 30

# W, while leg 1's read of the run is held (4 s; this starts at once).
write_behind_hold "$c_uri" "$expected" "$X" "$wlen" "$faults" vread \
  "the verify read of its run"
wait "$verifier" || vrc=$?
cat "$tmpdir/verify" "$faults"
fault_clear "$rules"
test "$vrc" -eq 0
status_check "$ctl" "s['volume']['verify']['state'] == 'done' and
  [(m['offset'], m['length'], m['legs'])
   for m in s['volume']['verify']['mismatches']] == [($C, 4096, [2])] and
  s['volume']['verify']['repaired_bytes'] == 4096 and
  s['volume']['state'] == 'healthy'"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
