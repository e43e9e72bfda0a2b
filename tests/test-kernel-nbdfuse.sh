#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ext4 on this machine's kernel over the controller, without nbd.ko: three
# file replicas, the controller (plugin shape, timeout=5), nbdfuse
# exposing its export as a file, a loop device (direct I/O) over that file,
# mkfs.ext4 and mount.  The shared file workload (kernel/workload.sh:
# a few thousand real files copied, renamed and deleted, fsync'd files, a
# git repository with many commits and gc) runs on it; it stops halfway
# through the copy while leg 1 is killed with SIGKILL, runs on while the
# leg is down, stops again halfway through the git commits while the leg
# is restarted, and finishes while the leg resyncs.  Then: the leg is back
# uptodate (its resync kind and size printed), no ext4 error was counted,
# every file reads back as written after a remount, git fsck passes,
# e2fsck -n finds nothing, and after a clean stop of the controller the
# three legs' data areas are byte-identical.  A short fio run on the loop
# device gives IOPS.  Cleans up the mount, the loop device and nbdfuse
# whatever happens.

source ./functions.sh
set -euo pipefail
set -x

requires_root
requires_nbdinfo
requires python3 -c 'import json'
requires nbdfuse --version
requires fusermount3 --version
requires losetup --version
requires mkfs.ext4 -V
requires e2fsck -V
requires git --version
requires setsid --version
requires test -c /dev/fuse
requires losetup -f

workload=$abs_top_srcdir/tests/kernel/workload.sh
ctl=$tmpdir/c.ctl
mnt=$tmpdir/mnt
fuse=$tmpdir/fuse
state=$tmpdir/state
loop=
nbdfuse_pid=
workload_pid=

# _child_alive PID: is PID a running child of this shell?
_child_alive ()
{
  local stat state ppid
  [ -n "$1" ] || return 1
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  read -r state ppid _ <<<"${stat##*) }"
  [ "$state" != Z ] && [ "$ppid" = "$$" ]
}

# _mounted DIR: is something mounted on DIR?  (Read from /proc/mounts:
# mountpoint(1) cannot stat a FUSE mount whose server died.)
_mounted ()
{
  grep -qs " $1 " /proc/mounts
}

# Cleanup hook: stop the workload (its whole process group), unmount,
# detach the loop device, unmount nbdfuse and reap it; every step bounded
# in time.
_kernel_cleanup ()
{
  if _child_alive "$workload_pid"; then
    kill -KILL -- "-$workload_pid"
    wait "$workload_pid"
  fi
  if _mounted "$mnt"; then
    timeout -k 5 60 umount "$mnt" || umount -l "$mnt"
  fi
  if [ -n "$loop" ]; then
    losetup -d "$loop"
  fi
  if _mounted "$fuse"; then
    timeout -k 5 60 fusermount3 -u "$fuse" || fusermount3 -uz "$fuse"
  fi
  if _child_alive "$nbdfuse_pid"; then
    _wait_gone "$nbdfuse_pid" 10 || kill -KILL "$nbdfuse_pid"
    wait "$nbdfuse_pid"
  fi
}
cleanup_fn _kernel_cleanup

# wait_step STEP: wait until the workload reaches STEP; fail at once if
# it died, and after 300 s.
wait_step ()
{
  local i
  _xtrace_off
  for (( i = 0; i < 3000; i++ )); do
    if grep -qx "$1" "$state/progress" 2>/dev/null; then
      _xtrace_restore
      return 0
    fi
    _child_alive "$workload_pid" || break
    sleep 0.1
  done
  _xtrace_restore
  echo "$0: the workload did not reach step $1" >&2
  cat "$tmpdir/workload.out" >&2
  return 1
}

# leg_field I EXPR: print EXPR of the leg with index I from the status,
# e.g. leg_field 1 "['last_resync']['kind']".
leg_field ()
{
  nbdrep_status_get "$ctl" "next(l for l in s['legs'] if l['index'] == $1)$2"
}

# al_cold: is the controller's activity log empty?
al_cold ()
{
  [ "$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["hot"]')" -eq 0 ]
}

start=$SECONDS
"$workload" corpus "$tmpdir/corpus"

# Three 256 MiB file legs and the controller.
for i in 0 1 2; do start_replica "$i" --file 256M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")

# nbdfuse (4 connections: the controller advertises multi-conn) -> loop.
mkdir "$fuse" "$mnt"
nbdfuse -C 4 -P "$tmpdir/nbdfuse.pid" "$fuse/disk" "$c_uri" \
  </dev/null >"$tmpdir/nbdfuse.log" 2>&1 &
nbdfuse_pid=$!
wait_until 30 test -s "$tmpdir/nbdfuse.pid"
test "$(stat -c %s "$fuse/disk")" -eq "$size"
loop=$(losetup -f --show --direct-io=on "$fuse/disk")
losetup --list --noheadings -O DIO "$loop"
mkfs.ext4 -q -F "$loop"
mount "$loop" "$mnt"
# mkfs discards the whole device: let the activity log cool, so that the
# resync measures what the workload did, not the mkfs (a leg that fails
# gets back every extent that is hot at that moment).
sync -f "$mnt"
wait_until 60 al_cold

# The workload, holding at the two points where leg 1 is killed and
# restarted; in a process group of its own, so that the cleanup can stop
# its children (cp, git) too.
WORKLOAD_HOLD="copy-half git-half" \
  setsid "$workload" run "$tmpdir/corpus" "$mnt" "$state" \
  </dev/null >"$tmpdir/workload.out" 2>&1 &
workload_pid=$!

wait_step copy-half
kill_replica 1
touch "$state/go-copy-half"
wait_leg_state 60 "$ctl" 1 failed
wait_step git-half
test "$(leg_state "$ctl" 1)" = failed
restart_replica 1
touch "$state/go-git-half"

rc=0
wait "$workload_pid" || rc=$?
workload_pid=
cat "$tmpdir/workload.out"
test "$rc" -eq 0

wait_leg_state 120 "$ctl" 1 uptodate
wait_volume_state 30 "$ctl" healthy
kind=$(leg_field 1 "['last_resync']['kind']")
bytes=$(leg_field 1 "['last_resync']['bytes']")
seconds=$(leg_field 1 "['last_resync']['seconds']")
zeroed=$(leg_field 1 "['last_resync'].get('zeroed')")
test "$kind" = incremental
test "$bytes" -gt 0
# A resync covers each out-of-sync chunk once: never more than the volume.
if [ $(( bytes + zeroed )) -gt "$size" ]; then
  echo "$0: leg 1's resync copied $bytes bytes and zeroed $zeroed:" \
       "more than the $size-byte volume" >&2
  exit 1
fi

# No error reached ext4; everything reads back after a remount; fsck.
test "$(cat "/sys/fs/ext4/${loop#/dev/}/errors_count")" -eq 0
umount "$mnt"
e2fsck -fn "$loop"
mount -o ro "$loop" "$mnt"
"$workload" verify "$mnt" "$state"
umount "$mnt"

# Numbers for the loop device over nbdfuse and the controller.
fio_line=
if command -v fio >/dev/null; then
  fio --name=randrw --filename="$loop" --ioengine=libaio --direct=1 \
      --rw=randrw --bs=4k --iodepth=16 --size=128M --runtime=5 \
      --time_based --output-format=json >"$tmpdir/fio.json"
  fio_line=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print("fio_randrw_4k_read_iops=%d fio_randrw_4k_write_iops=%d"
      % (j["read"]["iops"], j["write"]["iops"]))
' "$tmpdir/fio.json")
fi

# Clean stop, then the legs' data areas must be byte-identical.
losetup -d "$loop"
loop=
fusermount3 -u "$fuse"
_wait_gone "$nbdfuse_pid" 30
wait "$nbdfuse_pid"
nbdfuse_pid=
# (A leg that timed out under load must be back and resynced first.)
wait_volume_state 120 "$ctl" healthy
errors=$(nbdrep_status_get "$ctl" '",".join(str(l["errors"]) for l in s["legs"])')
stop_controller c
for i in 1 2; do cmp -n "$size" "$tmpdir/r0.img" "$tmpdir/r$i.img"; done

echo "KERNEL-TEST nbdfuse-loop: $(sed -n 's/^WORKLOAD //p' "$tmpdir/workload.out")"
echo "KERNEL-TEST nbdfuse-loop: resync leg=1 kind=$kind bytes=$bytes" \
     "zeroed=$zeroed seconds=$seconds volume_bytes=$size legs_identical=yes" \
     "leg_errors=$errors $fio_line" \
     "test_seconds=$(( SECONDS - start ))"
