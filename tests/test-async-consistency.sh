#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg is always crash-consistent (DESIGN.md section 14):
# two file legs and an asynchronous one whose server delays every write
# by 5 ms; random writes (often overlapping) and flushes through the
# controller for 20 s; at random moments the asynchronous leg's server
# is frozen (pause filter), its data area copied and the copy checked
# against the model of the volume (async-model.py: the state at some
# client flush plus some later writes of the next epoch, overlapping
# writes in order).  The leg's server logs every request (log filter):
# no write may reach it before the epochs before its own were answered
# and flushed.  Then a flush, and once the leg has caught up it holds
# every write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause
requires_filter delay

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
log=$tmpdir/writes.log
model="$abs_top_srcdir/tests/async-model.py"

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter=log --filter=pause --filter=delay \
  logfile="$tmpdir/r2-requests.log" pause-control="$pause" \
  delay-write=5ms delay-zero=5ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-full=block control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating"'
size=$("$NBDINFO" --size "$c_uri")

python3 "$model" write "$c_uri" "$log" 20 &
writer=$!
images=()
for n in 1 2 3 4 5; do
  sleep "$(( RANDOM % 3 + 1 )).$(( RANDOM % 10 ))"
  pause_replica "$pause"
  head -c "$size" "$tmpdir/r2.img" > "$tmpdir/frozen$n.img"
  resume_replica "$pause"
  images+=("$tmpdir/frozen$n.img")
done
wait "$writer"
python3 "$model" check "$log" "${images[@]}"
python3 "$model" order "$log" "$tmpdir/r2-requests.log" "$size"
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] == 0'

# Caught up: after a flush the leg holds every write.
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["lag_bytes"] == 0 and leg(2)["async"]["buffer_used"] == 0'
head -c "$size" "$tmpdir/r2.img" > "$tmpdir/final.img"
python3 "$model" final "$log" "$tmpdir/final.img"
compare_legs_equal "$size" "$r0_uri" "$r1_uri"
head -c "$size" "$tmpdir/r0.img" | cmp - "$tmpdir/final.img"
