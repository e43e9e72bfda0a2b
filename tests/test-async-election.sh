#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg never holds a start up (DESIGN.md section 6 rule
# 7 and section 14; claim 5): it is never waited for, and its
# generation, however old, never refuses a start.
#   1. Leg 2 (asynchronous) is down while the volume goes through more
#      generations than a superblock's history keeps (leg 1 failed and
#      resynced twelve times by the operator); the controller is
#      stopped.
#   2. With leg 2's server still down, a start with wait=20 is healthy
#      within 10 s (leg 2 is not waited for).
#   3. Leg 2's server back: the start takes it, it catches up and
#      equals the synchronous legs.

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
  control="$ctl" wait=20
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'

# 1.
stop_replica 2
g0=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
for i in $(seq 1 12); do
  write_random "$c_uri" "$expected" $(( i * M )) 65536
  "$NBDREP" fail "$ctl" 1
  "$NBDREP" resync "$ctl" 1
  wait_volume_state 30 "$ctl" healthy
done
g1=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
test $(( g1 - g0 )) -gt 33
stop_controller c

# 2.
t0=$(now_us)
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" wait=20
wait_volume_state 30 "$ctl" healthy
t1=$(now_us)
test $(( (t1 - t0) / 1000000 )) -lt 10
write_random "$c_uri" "$expected" $(( 20 * M )) 65536
stop_controller c

# 3.
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" wait=20
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
