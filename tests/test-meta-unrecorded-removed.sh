#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Every leg fails while a failure is recorded, the last one after it
# took a generation nobody could confirm, and the operator removes that
# leg and adds it back (found by the fault campaign, make
# check-torture).  That leg may hold the newest data: it must not be
# taken as a split brain, nor rebuilt from the others; `nbdrep add`
# refuses it saying so and what to do, and a restart of the controller
# over every leg elects it and resyncs the others (monitor.c,
# judge_sb_locked).
#
# Three file legs A, B, C (0, 1, 2), each behind the faultinject
# filter:
#   1. C refuses its next metadata write, B its next superblock write,
#      and A applies its second superblock write and then exits.  A
#      write to a cold extent: the activity-log commit fails C; the bump
#      recording that (generation G+1) reaches A only, which fails B;
#      the bump recording that (G+2) lands on A, which dies before it
#      answers.  No leg is uptodate: the volume has failed.
#   2. A is removed, restarted and added back: refused, naming the
#      generation and the restart (before: "split brain").
#   3. The controller is restarted over A, B and C: A wins, B and C
#      resync from it, and every acknowledged write reads back.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))
T=$(( 40 * MiB ))

for i in 0 1 2; do
  start_replica "$i" -- --filter="$FAULTINJECT" rules="$tmpdir/r$i.rules" \
    log="$tmpdir/r$i.faults"
done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=3
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 4 * MiB ))

# 1.
fault_arm "$tmpdir/r2.rules" "id=md op=write range=-4M- phase=refuse count=1"
fault_arm "$tmpdir/r1.rules" "id=sb op=write range=-8K- phase=refuse count=1"
fault_arm "$tmpdir/r0.rules" \
  "id=exit op=write range=-8K- phase=apply-exit skip=1 count=1"
result=$("$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom($len)
try:
    h.pwrite(buf, $T)
except nbd.Error as e:
    print('error: %s' % e)
else:
    print('ok')
")
echo "the write to a cold extent: $result"
fault_wait "$tmpdir/r0.faults" exit fire 10
wait_volume_state 20 "$ctl" failed

# 2.
"$NBDREP" remove "$ctl" 0
reap_server r0 10
fault_clear "$tmpdir/r0.rules"
restart_replica 0
rc=0
out=$("$NBDREP" add "$ctl" "$r0_uri" 2>&1) || rc=$?
echo "$out"
test "$rc" -ne 0
[[ $out == *"which this controller wrote when every leg failed"* ]]
[[ $out == *"restart the controller over every leg"* ]]
volume_state "$ctl" | grep -qx failed

# 3.
stop_controller c
for i in 1 2; do fault_clear "$tmpdir/r$i.rules"; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=3
wait_volume_state 60 "$ctl" healthy
if [ "$result" != ok ]; then
  # Not acknowledged: old or new, but the same on every leg.
  "$NBDSH" -u "$r0_uri" -c "
with open('$expected', 'r+b') as f:
    f.seek($T)
    f.write(h.pread($len, $T))
"
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
