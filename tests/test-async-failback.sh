#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A failback after a failover must not throw away the writes the
# promoted asynchronous leg took (DESIGN.md sections 6 and 14; claim 5).
#   1. Legs 0 and 1 synchronous, leg 2 asynchronous: write A, flush;
#      the leg catches up.  Clean stop.
#   2. The synchronous site is lost (legs 0 and 1 stopped, their images
#      kept): prefer=2 force=true promotes leg 2, which takes write B
#      (acknowledged, flushed).  Clean stop.
#   3. The synchronous site comes back with its old data, and the
#      controller is started with the original command line (leg 2
#      asynchronous again).  Legs 0 and 1 hold a generation older than
#      leg 2's history knows, or a sibling of one of its generations:
#      the start must either refuse (a split brain, naming the legs) or
#      keep B.  Serving the old data and resyncing leg 2 from it
#      silently loses B, an acknowledged write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 1.
write_random "$c_uri" "$expected" 0 "$M"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
stop_controller c

# 2.
stop_replica 0
stop_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" prefer=2 force=true wait=2
grep 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
write_random "$c_uri" "$expected" "$M" "$M"
compare_legs "$expected" "$c_uri" "$r2_uri"
stop_controller c

# 3.
restart_replica 0
restart_replica 1
if start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
     control="$ctl" wait=5; then
  wait_volume_state 30 "$ctl" healthy
  "$NBDSH" -u "$c_uri" -c 'h.flush()'
  wait_until 60 status_check "$ctl" \
    'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
  # B must have survived.
  compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
else
  # A refusal must say why.
  grep -Ei 'split brain|newer|promoted' "$tmpdir/c.log"
fi
