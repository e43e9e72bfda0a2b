#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep add --async CTL URI adds an asynchronous leg online, and
# nbdrep remove takes it out again (issue 20: "nbdrep add --async URI
# and nbdrep remove work online"; DESIGN.md section 14).  The added leg
# must be asynchronous (an "async" object in status, not counted as a
# member), catch up, replicate, and equal the synchronous legs after a
# flush; removing it must leave the volume healthy and writable.

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
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"

"$NBDREP" add --async "$ctl" "$r2_uri"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"] is not None and leg(2)["async"]["state"] == "replicating"'
status_check "$ctl" 's["volume"]["state"] == "healthy"'
write_random "$c_uri" "$expected" "$M" "$M"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

"$NBDREP" remove "$ctl" 2
status_check "$ctl" 'leg(2)["state"] == "removed" and s["volume"]["state"] == "healthy"'
write_random "$c_uri" "$expected" $(( 2 * M )) "$M"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
