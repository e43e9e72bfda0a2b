#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg that status calls consistent is a crash state of
# the volume, also when it has fallen behind (DESIGN.md section 14;
# claims 1 and 3).  test-async-consistency.sh's run with
# async-full=pull-ahead and a 1M buffer: every freeze of the leg's
# server (pause filter) lets the buffer fill, so the leg pulls ahead,
# catches up and replicates again, over and over.  At each freeze the
# status is read while the server is still paused (every other time
# only after the buffer has filled behind the freeze, so that the leg
# is behind); if it says the leg is consistent ("consistent": true:
# replicating, or behind after a pull-ahead), the frozen copy must be a
# crash state of the logged writes (async-model.py check).  At least two such copies and one
# pull-ahead are required; at the end the leg holds every write.

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
# One worker thread (-t 1): nbdkit before 1.33.10 aborts in
# raw_send_socket when a client hangs up while two of its threads send
# replies (see test-async-stop-behind.sh).
start_replica 2 32M -- -t 1 --filter=pause --filter=delay pause-control="$pause" \
  delay-write=5ms delay-zero=5ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M async-full=pull-ahead resync-min-rate=256M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
# Restarted once, so that the leg joins incrementally: its catch-ups
# then copy its bitmap only (see test-async-pullahead-incremental.sh).
stop_controller c
restart_controller c
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
size=$("$NBDINFO" --size "$c_uri")

python3 "$model" write "$c_uri" "$log" 20 &
writer=$!
images=()
for n in 1 2 3 4 5 6 7 8; do
  sleep "$(( RANDOM % 2 + 1 )).$(( RANDOM % 10 ))"
  pause_replica "$pause"
  # Every other time, once the buffer has filled behind the freeze:
  # the leg has then pulled ahead (behind), its data unchanged.
  [ $(( n % 2 )) -eq 1 ] || sleep 0.5
  consistent=$(nbdrep_status_get "$ctl" \
    'next(str(l["async"]["consistent"]) + " " + l["async"]["state"] for l in s["legs"] if l["index"] == 2)')
  head -c "$size" "$tmpdir/r2.img" > "$tmpdir/frozen$n.img"
  [ $(( n % 2 )) -eq 0 ] || sleep 0.5
  resume_replica "$pause"
  if [ "${consistent% *}" = True ]; then
    images+=("$tmpdir/frozen$n.img")
  fi
done
wait "$writer"
echo "${#images[@]} consistent copies"
test "${#images[@]}" -ge 2
python3 "$model" check "$log" "${images[@]}"
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] >= 1'

"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
head -c "$size" "$tmpdir/r2.img" > "$tmpdir/final.img"
python3 "$model" final "$log" "$tmpdir/final.img"
compare_legs_equal "$size" "$r0_uri" "$r1_uri"
head -c "$size" "$tmpdir/r0.img" | cmp - "$tmpdir/final.img"
