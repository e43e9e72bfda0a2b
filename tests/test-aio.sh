#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The engine's asynchronous entry point (aio.c, what the ublk frontend
# serves the kernel with), driven by aio-driver against three file
# replicas, timeout=2: 32 requests in flight at all times (reads, writes,
# FUA writes, zeroes, writes aimed at writes in flight), every read
# checked against what was written.  Under that load: leg 2 killed with
# kill -9 (its requests in flight end in errors: finished by the
# finisher thread, leg failed), restarted and resynced; then leg 1
# stopped with SIGSTOP (a hung server: its requests are timed out by
# engine_aio_expire after 2 s and the leg failed), continued and
# resynced.  The driver then checks the whole volume against what it
# wrote and saves it; the oracle: every leg equals it.  The driver's
# counts must show requests started without waiting, refused (the range
# of a write in flight) and finished by the finisher.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdinfo
requires python3 -c 'import json, socket'

DRIVER="$abs_top_builddir/tests/aio-driver"
ctl=$tmpdir/c.ctl
progress=$tmpdir/progress
stopfile=$tmpdir/stop
expected=$tmpdir/expected.img

start_replica 0 80M
# A replica that is stopped and continued runs one thread: see
# test-fault-pause.sh for nbdkit 1.32's abort otherwise.
start_replica 1 80M -- -t 1
start_replica 2 80M

# progress_at_least N: the driver has completed N requests.
progress_at_least ()
{
  [ -s "$progress" ] && [ "$(cat "$progress")" -ge "$1" ]
}

# more_progress N: wait until the driver has completed N more requests.
more_progress ()
{
  local now
  now=$(cat "$progress")
  wait_until 60 progress_at_least $(( now + $1 ))
}

# stop_driver: on a failure, end the driver (and continue leg 1, which a
# SIGTERM could not stop otherwise).
stop_driver ()
{
  kill -CONT "$(server_pid r1)" 2>/dev/null
  if [ -n "$driver_pid" ]; then
    kill -KILL "$driver_pid" 2>/dev/null
    wait "$driver_pid" 2>/dev/null
  fi
}

"$DRIVER" "$progress" "$stopfile" "$expected" \
  replica="$r0_uri" replica="$r1_uri" replica="$r2_uri" \
  control="$ctl" timeout=2 > "$tmpdir/driver.out" &
driver_pid=$!
cleanup_fn stop_driver

wait_until 60 progress_at_least 2000
status_check "$ctl" "s['volume']['state'] == 'healthy'"

# kill -9 of leg 2 under load; restarted, it resyncs under load.
kill_replica 2
wait_leg_state 10 "$ctl" 2 failed
more_progress 2000
restart_replica 2
wait_volume_state 60 "$ctl" healthy
more_progress 1000

# Leg 1 hangs: timed out after 2 s, failed; the others go on.
kill -STOP "$(server_pid r1)"
wait_leg_state 20 "$ctl" 1 failed
status_check "$ctl" "'timed out' in (leg(1)['last_error'] or '')"
more_progress 2000
kill -CONT "$(server_pid r1)"
wait_volume_state 60 "$ctl" healthy
more_progress 1000

touch "$stopfile"
rc=0
wait "$driver_pid" || rc=$?
driver_pid=
cat "$tmpdir/driver.out"
test "$rc" -eq 0

# started N refused N finished N: all three paths were taken.
counts=$(tail -n 1 "$tmpdir/driver.out")
[[ $counts =~ started\ ([0-9]+)\ refused\ ([0-9]+)\ finished\ ([0-9]+)$ ]]
started=${BASH_REMATCH[1]} refused=${BASH_REMATCH[2]}
finished=${BASH_REMATCH[3]}
test "$started" -gt 10000
test "$refused" -gt 0
test "$finished" -gt 0

compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"
