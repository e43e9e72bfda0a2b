#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# With metadata=none a leg that fails and comes back is rebuilt fully
# (nbdkit-replicate-plugin(1), metadata=none: "a leg that fails and
# comes back is rebuilt fully too"; there is no activity log, so
# nothing records what was in flight when it failed, nor what happened
# to its disk while it was away).
#
# Two file legs, metadata=none, leg 1 behind the faultinject filter.
#   1. A written and flushed (0-8 MiB).
#   2. W (1 MiB at 4 MiB) is held on leg 1 and leg 1's replica killed
#      during the hold: W is acknowledged (leg 0 took it).
#   3. While leg 1 is away: B (1 MiB at 8 MiB) is written; leg 1's file
#      is scribbled on at 12 MiB, a range the client never writes.
#   4. Leg 1's replica restarted: a full resync (log, status).
#   5. The oracle: A, W, B and zeroes at 12 MiB, on both legs.
# An incremental resync (of what was written while leg 1 was away)
# would leave it without W and with the scribble.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
test -f "$FAULTINJECT" || _skip "the faultinject filter ($FAULTINJECT)"

ctl=$tmpdir/c.ctl
log=$tmpdir/c.log
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))
W=$(( 4 * M ))

start_replica 0 16M
start_replica 1 16M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" metadata=none \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# 1.
write_random "$c_uri" "$expected" 0 $(( 8 * M ))

# 2.
fault_arm "$rules" "id=w op=write range=$W-$(( W + M )) phase=hold secs=30 count=1"
write_random "$c_uri" "$expected" "$W" "$M" >"$tmpdir/w.out" 2>&1 &
wpid=$!
fault_wait "$faults" w fire 30
kill_replica 1
if ! wait $wpid; then
  cat "$tmpdir/w.out"
  exit 1
fi
wait_leg_state 30 "$ctl" 1 failed

# 3.
write_random "$c_uri" "$expected" $(( 8 * M )) "$M"
dd if=/dev/urandom of="$tmpdir/r1.img" bs="$M" seek=12 count=1 \
  conv=notrunc status=none

# 4.
fault_clear "$rules"
restart_replica 1
wait_volume_state 60 "$ctl" healthy
grep 'leg 1 (.*) is back: full resync' "$log"
! grep 'leg 1 (.*) is back: incremental' "$log"
status_check "$ctl" 'leg(1)["last_resync"]["kind"] == "full"'

# 5.
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
