#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# After a failover to an asynchronous leg (prefer=2 force=true), the
# synchronous legs that come back while the promoted volume runs are
# rebuilt from it (DESIGN.md section 14; the man page: "The other legs
# are rebuilt from it when they return", and the controller says so at
# the failover).  prefer= resolves the split brain for them as it would
# at start (election rule 5: "refused unless prefer= is given (the leg
# is then rebuilt fully)"; "The same rules judge a leg that comes back
# while the volume runs").
#   1. Legs 0 and 1 synchronous, leg 2 asynchronous: write A, flush; the
#      leg catches up.  Clean stop.
#   2. The synchronous site is lost (legs 0 and 1 stopped, their images
#      kept): prefer=2 force=true promotes leg 2, which takes write B.
#   3. Legs 0 and 1 come back while it runs: once the volume is healthy
#      every leg holds A and B.

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

# 3.
restart_replica 0
restart_replica 1
if ! wait_volume_state 60 "$ctl" healthy; then
  grep -E 'refused|not used' "$tmpdir/c.log" || :
  exit 1
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
