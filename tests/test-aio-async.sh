#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The engine's asynchronous entry point (aio.c, the ublk frontend's)
# with an asynchronous leg: its writes and zeroes start without waiting
# and feed the leg's queue, as the synchronous path does.  aio-driver
# keeps 32 requests in flight (reads, writes, FUA writes, zeroes,
# writes aimed at writes in flight) against two file replicas and an
# asynchronous one, every read checked against what was written.  Its
# counts must show most requests started without waiting (before, every
# write and zero of a volume with an asynchronous leg was refused and
# went through the synchronous path).  The leg must replicate
# throughout; after the driver's clean stop (which drains the queue),
# the oracle: every leg, the asynchronous one included, equals what
# the driver wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdinfo
requires python3 -c 'import json, socket'

DRIVER="$abs_top_builddir/tests/aio-driver"
# One FUA write in 64, not the driver's one in 8: a FUA write ends the
# asynchronous leg's batch (the leg makes it durable before anything
# queued after it is sent), so at one in 8 the leg, one batch of about
# 8 writes per round trip and fdatasync, cannot keep up with 32
# requests in flight on the synchronous legs and pulls ahead; this
# test is about the entry point feeding the queue, and
# test-async-fua-order.sh about FUA's order.
export AIO_DRIVER_FUA_EVERY=64
ctl=$tmpdir/c.ctl
progress=$tmpdir/progress
stopfile=$tmpdir/stop
expected=$tmpdir/expected.img

start_replica 0 80M
start_replica 1 80M
start_replica 2 80M

# progress_at_least N: the driver has completed N requests.
progress_at_least ()
{
  [ -s "$progress" ] && [ "$(cat "$progress")" -ge "$1" ]
}

# stop_driver: on a failure, end the driver.
stop_driver ()
{
  if [ -n "$driver_pid" ]; then
    kill -KILL "$driver_pid" 2>/dev/null
    wait "$driver_pid" 2>/dev/null
  fi
}

"$DRIVER" "$progress" "$stopfile" "$expected" \
  replica="$r0_uri" replica="$r1_uri" async="$r2_uri" \
  control="$ctl" > "$tmpdir/driver.out" &
driver_pid=$!
cleanup_fn stop_driver

wait_until 60 progress_at_least 1000
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
wait_until 60 progress_at_least 4000
status_check "$ctl" "s['volume']['state'] == 'healthy' and
  leg(2)['async']['state'] == 'replicating' and
  leg(2)['async']['pull_aheads'] == 0 and leg(2)['writes'] > 1000"

touch "$stopfile"
rc=0
wait "$driver_pid" || rc=$?
driver_pid=
cat "$tmpdir/driver.out"
test "$rc" -eq 0

# started N refused N finished N: most requests started at once.
counts=$(tail -n 1 "$tmpdir/driver.out")
[[ $counts =~ started\ ([0-9]+)\ refused\ ([0-9]+)\ finished\ ([0-9]+)$ ]]
started=${BASH_REMATCH[1]} refused=${BASH_REMATCH[2]}
test "$started" -gt $(( 4 * refused ))

compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"
