#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# vm: timeout=1800
# vm: mem=2G
#
# The kernel's nbd driver over the controller (DESIGN.md section 11), in
# the VM of vm-run.sh (Debian's kernel, which has nbd.ko): three file
# replicas on tmpfs, the controller (plugin shape, control socket,
# quorum=2, timeout=10: an emulated CPU on a busy host stalls for seconds),
# `nbd-client -C 4 -b 4096 -t 300` over a Unix socket, ext4, and the
# shared scenario of guest-lib.sh: the file workload with leg 1 killed
# (SIGKILL) and restarted under it, an incremental resync, no error in the
# kernel log or ext4, every file as written after a remount, git fsck,
# e2fsck -n.  Then fio on /dev/nbd0 for numbers, a write the controller
# refuses (refused_write_check), disconnect, a clean stop
# of the controller and the legs' data areas byte-identical.

source /test/guest-lib.sh

start=$SECONDS
for i in 0 1 2; do start_replica "$i" 256M; done
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10 quorum=2
size=$(nbdinfo --size 'nbd+unix:///?socket=/tmp/c.sock')
note "controller up: $size bytes, $(status_get '.volume.legs') legs"

# -t 300: without a timeout the kernel's default of 30 s applies, and
# with several connections a request still unanswered then is sent
# again on another one ("Connection timed out, retrying", which
# check_kernel_log counts as an error): under emulation on a busy host
# mkfs's discard of the whole device took longer than that.
nbd-client -unix /tmp/c.sock /dev/nbd0 -C 4 -b 4096 -N default -t 300
[ "$(( $(cat /sys/block/nbd0/size) * 512 ))" -eq "$size" ] ||
  fail "/dev/nbd0 is not $size bytes"
[ "$(cat /sys/block/nbd0/queue/logical_block_size)" -eq 4096 ] ||
  fail "/dev/nbd0 does not have 4096-byte blocks"
note "nbd0 attached: $(ls /sys/block/nbd0/mq | wc -l) queues, flush=$(cat /sys/block/nbd0/queue/write_cache)"

mkfs.ext4 -q -F /dev/nbd0
mkdir -p /mnt/t
mount /dev/nbd0 /mnt/t
# A thousand files and 8 commits, not 3000 and 24: the whole workload
# took 757 s of the test's 930 under emulation (git 405 s, renames
# 159 s); the leg kill and its resync fall in the copy and git phases
# all the same.
use_corpus_subset 1000
WORKLOAD_COMMITS=8 workload_with_leg_kill /mnt/t 1
kernel_log=$(check_kernel_log)
check_filesystem /dev/nbd0 /mnt/t
note "file system checked; fio on /dev/nbd0"
fio=$(fio_numbers /dev/nbd0)
echo "$fio"
check_kernel_log >/dev/null
refused_write_check /dev/nbd0
nbd-client -d /dev/nbd0
stop_controller
compare_legs "$size" 3
stop_all

echo "KERNEL-TEST nbd-client: $(sed -n 's/^WORKLOAD //p' /tmp/workload.out)"
echo "KERNEL-TEST nbd-client: resync leg=1 kind=$resync_kind bytes=$resync_bytes" \
     "zeroed=$resync_zeroed seconds=$resync_seconds volume_bytes=$size legs_identical=yes leg_errors=$(leg_errors) $kernel_log"
echo "KERNEL-TEST nbd-client: $fio guest_seconds=$(( SECONDS - start ))"
