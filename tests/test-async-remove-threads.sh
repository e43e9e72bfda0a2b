#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# What nbdrep remove leaves of an asynchronous leg: nothing that runs or
# holds memory.  The leg runs two threads of its own, its sender and the
# thread of its own poller (poller.c, "A leg's own poller"), and a ring
# of async-buffer bytes (async.c).  A failed add (an unreachable URI, a
# leg too small) leaves none of them.  A removal, here while a client
# writes, makes the sender give up what it holds (its activity-log holds
# go back: the log cools down to nothing once writes stop), stops both
# threads and lets the ring go (async_retire), so that cycles of add and
# remove leave the controller's threads and memory as they were.  The
# oracle: every acknowledged write reads back, the synchronous legs are
# byte-identical.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires test -d /proc/self/task

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
stopfile=$tmpdir/stop-writing
ring_mib=64                     # async-buffer, the default

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_replica 3 8M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
cpid=$(cat "$tmpdir/c.pid")
new_expected "$expected" "$c_uri"

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

# rss_mib: the controller's resident memory in MiB.
rss_mib ()
{
  echo $(( $(awk '/^VmRSS:/ { print $2 }' "/proc/$cpid/status") / 1024 ))
}

# rss_dropped MIB: the controller's resident memory is half a ring or
# more below MIB.  Not under a sanitizer, whose own memory (shadow of
# the ring, kept or not as it likes) blurs the figure.
rss_dropped ()
{
  [ "$SANITIZER" != no ] || [ "$(rss_mib)" -le $(( $1 - ring_mib / 2 )) ]
}

# start_writer SEED: a client writing random 4K blocks (a flush every
# 64) until $stopfile exists, mirrored into $expected, in the
# background ($writer: its PID).
start_writer ()
{
  rm -f "$stopfile"
  "$NBDSH" -u "$c_uri" -c "
import os, random
rng = random.Random($1)
with open('$expected', 'r+b') as f:
    i = 0
    while not os.path.exists('$stopfile'):
        off = rng.randrange(4096) * 4096
        buf = os.urandom(4096)
        h.pwrite(buf, off)
        f.seek(off)
        f.write(buf)
        i += 1
        if i % 64 == 0:
            h.flush()
    h.flush()
" &
  writer=$!
}

base=$(threads)
for i in 1 2; do
  ! "$NBDREP" add --async "$ctl" "nbd+unix:///?socket=$tmpdir/none.sock"
  ! "$NBDREP" add --async "$ctl" "$r3_uri"     # too small: refused
done
threads_at_most "$base"

for i in 2 3 4; do
  "$NBDREP" add --async "$ctl" "$r2_uri"
  wait_until 60 status_check "$ctl" \
    "leg($i)[\"async\"][\"state\"] == \"replicating\""
  test "$(threads)" -ge $(( base + 2 ))
  with_ring=$(rss_mib)
  start_writer "$i"
  sleep 1
  "$NBDREP" remove "$ctl" "$i"
  sleep 0.5
  touch "$stopfile"
  wait "$writer"
  wait_until 10 threads_at_most "$base"
  wait_until 10 rss_dropped "$with_ring"
done
wait_until 30 status_check "$ctl" 's["volume"]["activity_log"]["hot"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
