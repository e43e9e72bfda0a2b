#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A leg that dies with acknowledged but unflushed writes gets them back
# by resync: when a leg fails, every hot activity-log extent is ORed
# into its bitmap (DESIGN.md section 5, invariant 2).
#
# The setup that really loses unflushed writes: leg 2 is a file served
# through nbdkit's cache filter with cache=writeback, which keeps written
# blocks in its own (unlinked, temporary) cache file and writes them to
# the plugin only on flush, or at once for a FUA write.  kill -9 throws
# the cache away, exactly like a disk losing its volatile write cache on
# power loss, while the metadata the controller writes with FUA (the
# activity log, superblocks) is on the file.  (The memory plugin would
# lose everything on a restart and get a full resync; a plain file keeps
# every write in the page cache across kill -9.)
#
# Three legs; 16 MiB of data written and flushed; the log cools; then
# three 256 KiB writes in three 4 MiB extents, acknowledged, NOT
# flushed, and leg 2's replica killed by the same client a moment later
# (before any flush can reach it).  Leg 2's file must not hold them (the
# setup works).  A flush makes the controller notice the dead leg, with
# the three extents hot; leg 2 comes back and must get an incremental
# resync of exactly those three extents (12 MiB: nothing else was
# written, the log was cold before); then the oracle.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires_filter cache

ctl=$tmpdir/c.ctl
start_replica 0 --file 64M
start_replica 1 --file 64M
start_replica 2 --file 64M -- --filter=cache cache=writeback
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
MiB=$(( 1024 * 1024 ))

# 16 MiB of data, flushed.
truncate -s "$size" "$tmpdir/expected"
head -c 16M /dev/urandom |
  dd of="$tmpdir/expected" conv=notrunc iflag=fullblock bs=1M status=none
"$NBDSH" -u "$c_uri" -c "
h.pwrite(open('$tmpdir/expected', 'rb').read(16 * $MiB), 0)
h.flush()
"
al_is_cold ()
{
  [ "$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["hot"]')" -eq 0 ]
}
wait_until 30 al_is_cold

# Three unflushed writes in extents 0, 1 and 3, then SIGKILL to leg 2's
# replica from the same client (the harness reaps it below: its own
# kill(1) of the dead process fails, hence the condition).
offsets=($(( 1 * MiB + 4096 )) $(( 6 * MiB )) $(( 13 * MiB + 512 )))
head -c 768K /dev/urandom >"$tmpdir/new"
for k in 0 1 2; do
  dd if="$tmpdir/new" of="$tmpdir/expected" bs=256K skip="$k" count=1 \
     oflag=seek_bytes seek="${offsets[k]}" conv=notrunc status=none
done
"$NBDSH" -u "$c_uri" -c "
import os, signal
data = open('$tmpdir/new', 'rb').read()
for k, off in enumerate((${offsets[0]}, ${offsets[1]}, ${offsets[2]})):
    h.pwrite(data[k * 262144:(k + 1) * 262144], off)
os.kill($(server_pid r2), signal.SIGKILL)
"
if ! kill_replica 2; then
  echo "$0: replica 2 could not be reaped"
  exit 1
fi

# The setup lost them: leg 2's file still holds the old data there.
for k in 0 1 2; do
  if cmp -s -n 262144 -i "$(( k * 262144 )):${offsets[k]}" \
       "$tmpdir/new" "$tmpdir/r2.img"; then
    echo "$0: write $k reached r2.img although it was never flushed"
    exit 1
  fi
done

# The controller notices the dead leg (on this flush) with the three
# extents hot.
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_leg_state 10 "$ctl" 2 failed
restart_replica 2
wait_leg_state 30 "$ctl" 2 uptodate
wait_volume_state 10 "$ctl" healthy
test "$(nbdrep_status_get "$ctl" 's["legs"][2]["last_resync"]["kind"]')" = \
  incremental
test "$(nbdrep_status_get "$ctl" 's["legs"][2]["last_resync"]["bytes"]')" -eq \
  $(( 3 * 4 * MiB ))
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri" "$c_uri"
# And on leg 2's file itself, now that the resync flushed it.
cmp -n "$size" "$tmpdir/expected" "$tmpdir/r2.img"
