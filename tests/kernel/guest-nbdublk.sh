#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# vm: kernel=trixie
# vm: needs=NBDUBLK:/usr/bin/nbdublk
# vm: timeout=1800
# vm: mem=2G
#
# nbdublk over the controller (DESIGN.md section 11), in the VM of
# vm-run.sh booted with Debian 13's kernel (6.12, which has ublk_drv.ko;
# Debian 12's does not).  No Debian package ships nbdublk (it needs libnbd
# 1.16+ built with ublksrv): the host names one with NBDUBLK=/path and
# the test is skipped without it.  nbdublk declares a write-through
# device, so the kernel sends it no flush and no FUA: the controller runs
# under nbdkit's fua filter with fuamode=force, which makes every write
# durable before it is acknowledged.  It must also advertise multi-conn
# (for more than one queue) and a power-of-two maximum block size (or
# nbdublk refuses to start).  Three file replicas on tmpfs, the
# controller (plugin shape, control socket, quorum=2, timeout=10: an
# emulated CPU on a busy host stalls for seconds), `nbdublk -C N /dev/ublkb0 URI`
# (N = min(4, CPUs)), ext4, and the shared scenario of guest-lib.sh: the file workload with leg 1 killed and restarted under
# it, an incremental resync, no error in the kernel log or ext4, every
# file as written after a remount, git fsck, e2fsck -n; fio for numbers;
# then the error path (refused_write_check); nbdublk stopped (SIGTERM
# deletes the device), a clean stop of the controller and the legs' data
# areas byte-identical.

source /test/guest-lib.sh

modprobe ublk_drv || { echo "SKIP: kernel $(uname -r) has no ublk_drv"; exit 77; }

# ublk_drv gives a device at most one queue per CPU, and nbdublk (1.22)
# aborts unless it gets one queue per connection: -C may not exceed the
# CPUs.
queues=$(( $(nproc) < 4 ? $(nproc) : 4 ))

start=$SECONDS
for i in 0 1 2; do start_replica "$i" 256M; done
start_controller --filter=fua "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  fuamode=force control="$CTL" timeout=10 quorum=2
size=$(nbdinfo --size 'nbd+unix:///?socket=/tmp/c.sock')
nbdinfo 'nbd+unix:///?socket=/tmp/c.sock' | grep -E 'can_multi_conn|block_size_maximum|can_fua|can_flush'
note "controller up: $size bytes, $(status_get '.volume.legs') legs"

"$NBDUBLK" -C "$queues" /dev/ublkb0 'nbd+unix:///?socket=/tmp/c.sock' \
  </dev/null >/tmp/nbdublk.log 2>&1 &
ublk_pid=$!
wait_until 60 test -b /dev/ublkb0 || fail "no /dev/ublkb0: $(cat /tmp/nbdublk.log)"
wait_until 60 test "$(cat /sys/block/ublkb0/size)" -gt 0 ||
  fail "/dev/ublkb0 has no size: $(cat /tmp/nbdublk.log)"
[ "$(( $(cat /sys/block/ublkb0/size) * 512 ))" -eq "$size" ] ||
  fail "/dev/ublkb0 is not $size bytes"
cache=$(cat /sys/block/ublkb0/queue/write_cache)
note "ublkb0 attached: $(ls /sys/block/ublkb0/mq | wc -l) queues, cache=$cache"
[ "$cache" = "write through" ] ||
  fail "nbdublk declared a '$cache' cache: update the flush notes of this test and DESIGN.md"

mkfs.ext4 -q -F /dev/ublkb0
mkdir -p /mnt/t
mount /dev/ublkb0 /mnt/t
use_corpus_subset 1000                  # as guest-nbd-client
WORKLOAD_COMMITS=8 workload_with_leg_kill /mnt/t 1
kernel_log=$(check_kernel_log)
check_filesystem /dev/ublkb0 /mnt/t
note "file system checked; fio on /dev/ublkb0"
fio=$(fio_numbers /dev/ublkb0)
echo "$fio"
check_kernel_log >/dev/null
refused_write_check /dev/ublkb0
kill -TERM "$ublk_pid"
rc=0
wait "$ublk_pid" || rc=$?
[ "$rc" -eq 0 ] || fail "nbdublk exited with status $rc: $(cat /tmp/nbdublk.log)"
wait_until 30 test ! -e /dev/ublkb0 || fail "/dev/ublkb0 is still there after nbdublk exited"
stop_controller
compare_legs "$size" 3
stop_all

echo "KERNEL-TEST nbdublk: $(sed -n 's/^WORKLOAD //p' /tmp/workload.out)"
echo "KERNEL-TEST nbdublk: resync leg=1 kind=$resync_kind bytes=$resync_bytes" \
     "zeroed=$resync_zeroed seconds=$resync_seconds volume_bytes=$size legs_identical=yes leg_errors=$(leg_errors) $kernel_log"
echo "KERNEL-TEST nbdublk: $fio guest_seconds=$(( SECONDS - start ))"
