#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Multi-conn: a flush on any client connection flushes every leg
# (nbdkit-replicate-plugin(1)): the leg connections are shared by all
# client connections, so a flush on connection B makes durable what
# connection A wrote and was acknowledged.
#
# Every leg is a file served through nbdkit's cache filter with
# cache=writeback, which keeps written blocks in its own (unlinked,
# temporary) cache file and writes them to the file only on flush (a
# FUA write: that request only); kill -9 of the replica throws the cache
# away, like a disk losing its volatile write cache (first checked on a
# spare replica alone: an unflushed write is lost).
#
# Three legs.  Client connection A writes (not flushed, acknowledged);
# client connection B, which wrote nothing, flushes; at once, every
# replica and the controller are killed (-9).  Then each leg's file
# holds A's writes (the flush reached every leg's stable storage), and
# with everything restarted (crash recovery) the controller and every
# leg read them back.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter cache

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))

# The setup loses unflushed writes: a spare replica alone (no
# controller, so nobody else flushes it), written and not flushed,
# killed.
start_replica 9 --file 16M -- --filter=cache cache=writeback
head -c 65536 /dev/urandom >"$tmpdir/probe"
"$NBDSH" -u "$r9_uri" -c "h.pwrite(open('$tmpdir/probe', 'rb').read(), 4096)"
kill_replica 9
if cmp -s -n 65536 -i 0:4096 "$tmpdir/probe" "$tmpdir/r9.img"; then
  echo "$0: an unflushed write reached r9.img: the cache filter does not lose it"
  exit 1
fi

for i in 0 1 2; do
  start_replica "$i" --file 64M -- --filter=cache cache=writeback
done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$tmpdir/expected" "$c_uri"

# Some data first, flushed, and the activity log cold.
write_random "$c_uri" "$tmpdir/expected" 0 $(( 4 * MiB ))
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

# A writes (three ranges, in two activity-log extents), B flushes, then
# kill -9 of every replica and of the controller, from the same client
# at once (no flush of the engine's own can come in between in
# practice; one would only hide a defect, never fail the test).
offsets=($(( 1 * MiB + 4096 )) $(( 6 * MiB )) $(( 13 * MiB + 512 )))
lens=(262144 $MiB 131072)
head -c $(( 262144 + MiB + 131072 )) /dev/urandom >"$tmpdir/new"
"$NBDSH" -u "$c_uri" -c "
import os, signal
assert h.can_multi_conn()
b = nbd.NBD()
b.connect_uri('$c_uri')
assert b.can_multi_conn()
data = open('$tmpdir/new', 'rb').read()
pos = 0
with open('$tmpdir/expected', 'r+b') as f:
    for off, n in ((${offsets[0]}, ${lens[0]}), (${offsets[1]}, ${lens[1]}),
                   (${offsets[2]}, ${lens[2]})):
        h.pwrite(data[pos:pos + n], off)
        f.seek(off)
        f.write(data[pos:pos + n])
        pos += n
b.flush()
for pid in ($(server_pid r0), $(server_pid r1), $(server_pid r2),
            $(server_pid c)):
    os.kill(pid, signal.SIGKILL)
"
# (The harness reaps them; its own kill(1) of the dead processes may
# fail, hence the conditions.)
for i in 0 1 2; do
  if ! kill_replica "$i"; then
    echo "$0: replica $i could not be reaped"
    exit 1
  fi
done
if ! kill_controller c; then
  echo "$0: the controller could not be reaped"
  exit 1
fi

# Every leg's file holds the writes: B's flush reached every leg.
for i in 0 1 2; do
  _compare_prefix "$size" "$tmpdir/expected" "$tmpdir/r$i.img" "r$i.img"
done

# Everything back (crash recovery): the controller and the legs read
# the writes.
for i in 0 1 2; do restart_replica "$i"; done
restart_controller c
wait_volume_state 30 "$ctl" healthy
server_run_log c | grep 'crash recovery:'
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c
