#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A media error on the resync source when it is the last uptodate leg
# (the filter shape, leg 0 the file plugin under the faultinject
# filter): one MiB of leg 0 refuses reads with EIO while replica leg 1,
# back from a kill, needs it resynced.  A client read of that MiB gets
# EIO and fails nobody (as from a single disk); the resync must not fail
# leg 0 either: the volume stays degraded and writable (the target is
# failed and tried again, each time twice as late), where failing the
# source made it flap between failed and degraded, failing most client
# writes.  Once the error stops (and nbdrep resync says so) the volume is
# healthy and every leg holds what the client wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires test -f "$FAULTINJECT"

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
rules=$tmpdir/l0.rules
M=$(( 1024 * 1024 ))

truncate -s 64M "$tmpdir/local.img"
start_replica 1
start_controller c --filter="$FILTER" --filter="$FAULTINJECT" \
  file "$tmpdir/local.img" rules="$rules" log="$tmpdir/l0.faults" \
  replica="$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 8 * M ))
kill_replica 1
write_random "$c_uri" "$expected" 0 $(( 8 * M ))
wait_leg_state 10 "$ctl" 1 failed

# One unreadable MiB on leg 0 (a media error), the last uptodate leg.
fault_arm "$rules" \
  "id=bad op=read range=$(( 4 * M ))-$(( 5 * M )) phase=refuse error=EIO count=0"
# A client read of it: EIO, and leg 0 stays (as a single disk).
expect_error "$c_uri" EIO "h.pread(4096, $(( 4 * M )))"
status_check "$ctl" "leg(0)['state'] == 'uptodate'"

# Leg 1 back: its resync meets the error, again and again.
restart_replica 1
states=
fails=0
loop_start=$(date +%s)
for i in $(seq 1 30); do
  states+=" $(volume_state "$ctl")"
  "$NBDSH" -u "$c_uri" -c "h.pwrite(b'x' * 4096, $(( 32 * M )))" \
    2>/dev/null || fails=$(( fails + 1 ))
  sleep 0.3
done
echo "volume states: $states; failed client writes: $fails"
test "$fails" -eq 0
[[ $states != *failed* ]]
# Each retry of leg 1 waits twice as long as the last (2, 4, 8 ... s):
# in T seconds, about log2(T) attempts (3 more allowed), where a retry
# every second made about T, each with a generation bump.
elapsed=$(( $(date +%s) - loop_start ))
allowed=$(python3 -c "import math; print(int(math.log2(max($elapsed, 1))) + 3)")
tries=$(grep -c 'leg 1: syncing -> failed (read of the resync source leg 0' \
          "$tmpdir/c.log")
echo "resyncs that met the error in $elapsed s: $tries (at most $allowed)"
test "$tries" -ge 2
test "$tries" -le "$allowed"
status_check "$ctl" \
  "leg(0)['state'] == 'uptodate' and leg(0)['last_error'] is None"

# The error gone, the operator says so (no waiting out the backoff):
# healthy, and every leg holds what was written.
fault_clear "$rules"
"$NBDREP" resync "$ctl" 1
wait_volume_state 30 "$ctl" healthy
python3 -c "
with open('$expected', 'r+b') as f:
    f.seek($(( 32 * M ))); f.write(b'x' * 4096)
"
compare_legs "$expected" "$r1_uri"
cmp -n "$(stat -c %s "$expected")" "$expected" "$tmpdir/local.img"
