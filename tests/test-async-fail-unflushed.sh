#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg that stops receiving writes while its sender
# holds sent writes unflushed must still become idle, so that it can
# catch up.
#
# The interleaving: the leg's server answers at once, so a write made
# without a client flush is sent, answered and then held unflushed
# until its epoch ends (the next client flush, or the activity log's
# cooler, every 2 s), the sender waiting for more.  Now the leg stops
# receiving writes: `nbdrep fail` here; falling behind when the
# activity log fills up (async_shed) does the same.  No more epoch
# marker is queued for a leg that receives no writes, so unless the
# sender flushes what it holds on its own, it never becomes idle
# (async_may_catch_up) and the leg's resync, which waits for that, never
# starts: the leg stays failed for good.
#
# The fail comes 50 ms after the write's answer, before the sender
# flushes on its own (it does after 200 ms).  A tick of the cooler
# between the write and the fail ends the epoch first (the status then
# shows no lag at the fail) and the window is missed: the test tries
# again, and fails if it never hit the window.
# Then the oracle: every leg, the asynchronous one included once it is
# replicating with nothing left to send, equals the volume.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

start_replica 0 64M
start_replica 1 64M
start_replica 2 64M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# The asynchronous leg's lag in bytes.
lag_bytes ()
{
  "$NBDREP" status --json "$ctl" |
    python3 -c 'import json, sys
print(json.load(sys.stdin)["legs"][2]["async"]["lag_bytes"])'
}

# One write, no flush; the fail once it has been answered.
write_then_fail ()
{
  "$NBDSH" -u "$c_uri" -c "
import os, time
buf = os.urandom(4096)
h.pwrite(buf, $1)
with open('$expected', 'r+b') as f:
    f.seek($1)
    f.write(buf)
time.sleep(0.05)
"
  lag=$(lag_bytes)
  "$NBDREP" fail "$ctl" 2
}

hit=
for attempt in 1 2 3 4 5 6; do
  write_then_fail $(( attempt * 4 * M + 4096 ))
  [ "$lag" -gt 0 ] && hit=1
  "$NBDREP" resync "$ctl" 2 || :
  wait_until 20 status_check "$ctl" \
    'leg(2)["async"]["state"] == "replicating"'
  [ -z "$hit" ] || break
done
test -n "$hit"

"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 30 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
