#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdkit -r makes the export read-only to its clients, not to its legs
# (nbdkit-replicate-plugin(1), METADATA): a leg that missed writes is
# still resynced, so that both legs serve the same data.
#
# Two file legs; data written; replica 1 killed; more written (leg 1
# misses it); a clean stop.  Then replica 1 back and the controller
# started with -r: the client is told the export is read-only and its
# writes fail, the volume turns healthy (leg 1 resynced), and both legs
# hold what was written before.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))

start_replica 0 16M
start_replica 1 16M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$MiB"
kill_replica 1
write_random "$c_uri" "$expected" $(( 4 * MiB )) "$MiB"
wait_leg_state 30 "$ctl" 1 failed
stop_controller c

restart_replica 1
start_controller c -r "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
"$NBDINFO" "$c_uri" | grep -q 'is_read_only: true'
if "$NBDSH" -u "$c_uri" -c 'h.pwrite(b"x" * 512, 0)'; then
  echo "$0: a client wrote to a read-only export"
  exit 1
fi
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
