#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A failover to one of two asynchronous legs: the other asynchronous
# leg must end equal to the promoted one (DESIGN.md section 14; claims
# 2 and 5).  The two may hold different writes: one fell behind, the
# other did not, so the other holds writes the promoted leg lacks.
#   1. Legs 0 and 1 synchronous, legs 2 and 3 asynchronous; 1M written,
#      both caught up.
#   2. Leg 2's server paused; 4M more written and flushed: leg 2 pulls
#      ahead, leg 3 takes every write.
#   3. The controller is killed, leg 2's server resumed, the synchronous
#      site lost (legs 0 and 1 stopped).
#   4. prefer=2 force=true promotes leg 2.  Once leg 3 replicates with
#      lag_bytes 0 after a flush, it must hold what the volume (leg 2)
#      holds.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
# -t 1: see test-async-stop-behind.sh (nbdkit 1.32 aborts when a client
# hangs up while two threads send replies, as when the pause ends after
# the controller was killed).
start_replica 2 32M -- -t 1 --filter=pause pause-control="$pause"
start_replica 3 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async="$r3_uri" async-buffer=1M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(3)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# 1.
write_random "$c_uri" "$expected" 0 "$M"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["lag_bytes"] == 0 and leg(3)["async"]["lag_bytes"] == 0'

# 2.
pause_replica "$pause"
for i in 4 5 6 7; do
  write_random "$c_uri" "$expected" $(( i * M )) "$M"
done
status_check "$ctl" 'leg(2)["async"]["state"] == "behind"'
wait_until 60 status_check "$ctl" 'leg(3)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r3_uri"

# 3.
kill_controller c
resume_replica "$pause"
stop_replica 0
stop_replica 1

# 4.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async="$r3_uri" control="$ctl" prefer=2 force=true wait=2
grep 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
wait_until 60 status_check "$ctl" \
  'leg(3)["async"]["state"] == "replicating" and leg(3)["last_resync"] is not None'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(3)["async"]["lag_bytes"] == 0'
"$NBDCOPY" --no-extents "$c_uri" "$tmpdir/volume.img"
truncate -s "$size" "$tmpdir/volume.img"
compare_legs "$tmpdir/volume.img" "$r2_uri" "$r3_uri"
