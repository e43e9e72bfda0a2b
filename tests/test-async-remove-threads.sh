#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Threads of the controller across nbdrep add --async and remove: an
# asynchronous leg runs two threads of its own, its sender and the
# thread of its own poller (poller.c, "A leg's own poller").  A failed
# add (an unreachable URI, a leg too small) leaves none; a removal
# stops the poller's thread, which has nothing left to drive.  The
# sender of a removed leg stays, idle, until the controller stops (one
# thread per removed asynchronous leg, at most 15), so each cycle of
# add and remove may leave one thread and no more.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires test -d /proc/self/task

ctl=$tmpdir/c.ctl

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_replica 3 8M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
cpid=$(cat "$tmpdir/c.pid")

# threads: how many the controller runs now.
threads ()
{
  ls "/proc/$cpid/task" | wc -l
}

# threads_at_most N: the controller runs N threads or fewer.
threads_at_most ()
{
  [ "$(threads)" -le "$1" ]
}

base=$(threads)
for i in 1 2; do
  ! "$NBDREP" add --async "$ctl" "nbd+unix:///?socket=$tmpdir/none.sock"
  ! "$NBDREP" add --async "$ctl" "$r3_uri"     # too small: refused
done
threads_at_most "$base"

cycles=0
for i in 2 3 4; do
  "$NBDREP" add --async "$ctl" "$r2_uri"
  wait_until 60 status_check "$ctl" \
    "leg($i)[\"async\"][\"state\"] == \"replicating\""
  test "$(threads)" -ge $(( base + cycles + 2 ))
  "$NBDREP" remove "$ctl" "$i"
  cycles=$(( cycles + 1 ))
  wait_until 10 threads_at_most $(( base + cycles ))
done
