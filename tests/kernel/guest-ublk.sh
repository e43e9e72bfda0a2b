#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# vm: kernel=trixie
# vm: timeout=2400
# vm: mem=2G
#
# The controller's own ublk frontend (ublk=ID, DESIGN.md section 11), in
# the VM of vm-run.sh booted with Debian 13's kernel (6.12, which has
# ublk_drv.ko; skipped with status 77 when the kernel has none).
#
# 1. Flush, FUA and discard reach the legs: a small volume
#    (metadata=none, so no activity log flushes on its own) over two
#    replicas under nbdkit's log filter, /dev/ublkb1.  A direct write
#    without sync sends the replicas no flush; an fsync of the device
#    sends each one; an O_DSYNC write arrives as a FUA write; a discard
#    leaves zeroes on the device and on both replicas' images.
# 2. ext4 on /dev/ublkb0 (three file replicas, the plugin shape): the
#    shared scenario of guest-lib.sh (the file and git workload, leg 1
#    killed and restarted under it, an incremental resync, no error in
#    the kernel log or ext4, every file as written after a remount, git
#    fsck, e2fsck -n); a clean stop deletes the device and leaves the
#    legs byte-identical.
# 3. The controller killed with SIGKILL while the workload's fsync phase
#    has requests in flight, and started again with the same ublk=0: the
#    device and the mounted filesystem stay, I/O waits and resumes after
#    the new controller's election and activity-log recovery; then a
#    planned restart (SIGTERM with ublk-keep=true, start again) at the
#    workload's git phase.  The workload's own checks (every file it
#    wrote), no I/O error in the kernel log, ext4's errors_count 0,
#    e2fsck clean.
# 4. fio (4 KiB random reads, then writes, libaio, O_DIRECT, queue depth
#    16, 15 s) on /dev/ublkb0 and on /dev/nbd0 (nbd-client -C 4 on the
#    same controller), in the order ublk, nbd, nbd, ublk (the host's
#    load drifts): the mean IOPS and their ratio (the goal is ublk >= 1.5x nbd-client; under
#    emulation the ratio is what counts).  Printed, not asserted; what is
#    asserted is that requests were started by the queue threads without
#    a worker (nbdrep status: direct).
# What was measured goes to KERNEL-TEST lines.

source /test/guest-lib.sh

modprobe ublk_drv ||
  { echo "SKIP: kernel $(uname -r) has no ublk_drv (ublk needs Linux >= 6.0 with CONFIG_BLK_DEV_UBLK)"; exit 77; }

# ublk_drv gives a device at most one queue per CPU.
queues=$(( $(nproc) < 4 ? $(nproc) : 4 ))

# ublk_is STATE: is the frontend of the controller on $CTL in STATE?
ublk_is ()
{
  [ "$(status_get .volume.ublk.state)" = "$1" ]
}

# flushes LOG: print how many flushes a replica's log filter logged.
flushes ()
{
  grep -c ' Flush id=' "$1" || true
}

# fua_writes LOG: print how many FUA writes a replica's log filter logged.
fua_writes ()
{
  grep -c ' Write id=.* fua=1' "$1" || true
}

# wait_device DEV BYTES: wait for block device DEV of BYTES bytes.
wait_device ()
{
  local sysfs=/sys/block/${1#/dev/}/size
  wait_until 60 test -b "$1" || fail "no $1"
  wait_until 60 test "$(cat "$sysfs" 2>/dev/null || echo 0)" -gt 0 ||
    fail "$1 has no size"
  [ "$(( $(cat "$sysfs") * 512 ))" -eq "$2" ] ||
    fail "$1 is $(( $(cat "$sysfs") * 512 )) bytes, not $2"
}

# kill_controller: SIGKILL the controller and reap it.
kill_controller ()
{
  local pid=${server_pid[c]}
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  unset "server_pid[c]"
}

# restart_controller: start the controller again with its arguments and
# wait until its ublk frontend is live.
restart_controller ()
{
  eval "start_controller ${server_args[c]}"
  wait_until 120 ublk_is live ||
    fail "ublk is $(status_get .volume.ublk.state), not live"
}

# elapsed T0: print the seconds since $EPOCHREALTIME was T0, to 0.1 s.
elapsed ()
{
  awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

# fio_iops DEV RW: IOPS of 4 KiB random RW (randread or randwrite) on DEV
# (12 s measured after a 3 s ramp).
fio_iops ()
{
  local dir=read
  [ "$2" = randread ] || dir=write
  fio --name="$2" --filename="$1" --ioengine=libaio --direct=1 --rw="$2" \
      --bs=4k --iodepth=16 --size=128M --ramp_time=3 --runtime=12 \
      --time_based --output-format=json | jq -r ".jobs[0].$dir.iops | floor"
}

# fio_abba RW: RW on /dev/ublkb0 and /dev/nbd0 in the order ublk, nbd,
# nbd, ublk; print the mean IOPS of each.  The host's speed drifts
# (other load on it, the emulation's own warming): in this order a drift
# linear over the round affects both devices alike.  One round (the
# README's figures were measured over two): a second costs CI two
# minutes of emulation.
fio_abba ()
{
  local ublk=0 nbd=0

  ublk=$(( ublk + $(fio_iops /dev/ublkb0 "$1") ))
  nbd=$(( nbd + $(fio_iops /dev/nbd0 "$1") ))
  nbd=$(( nbd + $(fio_iops /dev/nbd0 "$1") ))
  ublk=$(( ublk + $(fio_iops /dev/ublkb0 "$1") ))
  echo "$(( ublk / 2 )) $(( nbd / 2 ))"
}

start=$SECONDS

# ---- 1. flush, FUA and discard at the replicas --------------------------
note "flush, FUA and discard on a small volume (metadata=none)"
for i in 0 1; do
  truncate -s 64M "/tmp/f$i.img"
  start_server "f$i" --filter=log file "/tmp/f$i.img" logfile="/tmp/f$i-requests.log"
done
start_server fc "$PLUGIN" 'nbd+unix:///?socket=/tmp/f0.sock' \
  'nbd+unix:///?socket=/tmp/f1.sock' control=/tmp/fc.ctl metadata=none \
  timeout=10 ublk=1
CTL=/tmp/fc.ctl wait_until 60 volume_is healthy || fail "small volume not healthy"
CTL=/tmp/fc.ctl wait_until 60 ublk_is live || fail "/dev/ublkb1 is not live"
fsize=$(nbdinfo --size 'nbd+unix:///?socket=/tmp/fc.sock')
wait_device /dev/ublkb1 "$fsize"
q=/sys/block/ublkb1/queue
note "ublkb1: cache=$(cat $q/write_cache) fua=$(cat $q/fua)" \
     "discard_max=$(cat $q/discard_max_bytes) zeroes_max=$(cat $q/write_zeroes_max_bytes)" \
     "logical=$(cat $q/logical_block_size) physical=$(cat $q/physical_block_size)"
[ "$(cat $q/write_cache)" = "write back" ] || fail "ublkb1 does not declare a volatile cache"
[ "$(cat $q/fua)" = 1 ] || fail "ublkb1 does not declare FUA"
[ "$(cat $q/discard_max_bytes)" -gt 0 ] || fail "ublkb1 does not discard"
[ "$(cat $q/write_zeroes_max_bytes)" -gt 0 ] || fail "ublkb1 does not write zeroes"

head -c 1M /dev/urandom >/tmp/pattern
sync
f0=$(flushes /tmp/f0-requests.log) f1=$(flushes /tmp/f1-requests.log)
u0=$(fua_writes /tmp/f0-requests.log)
dd if=/tmp/pattern of=/dev/ublkb1 bs=64k seek=64 oflag=direct status=none
sleep 2
[ "$(flushes /tmp/f0-requests.log)" -eq "$f0" ] && [ "$(flushes /tmp/f1-requests.log)" -eq "$f1" ] ||
  fail "a write without sync made the replicas flush"
[ "$(fua_writes /tmp/f0-requests.log)" -eq "$u0" ] || fail "a write without sync was FUA"
dd if=/tmp/pattern of=/dev/ublkb1 bs=64k seek=64 count=1 oflag=direct conv=fsync status=none
g0=$(flushes /tmp/f0-requests.log) g1=$(flushes /tmp/f1-requests.log)
[ "$g0" -gt "$f0" ] && [ "$g1" -gt "$f1" ] ||
  fail "an fsync of /dev/ublkb1 reached no replica as a flush ($f0 -> $g0, $f1 -> $g1)"
dd if=/tmp/pattern of=/dev/ublkb1 bs=4k count=1 seek=256 oflag=direct,dsync status=none
v0=$(fua_writes /tmp/f0-requests.log)
[ "$v0" -gt "$u0" ] || fail "an O_DSYNC write reached replica 0 without FUA"
note "flushes at replica 0: $f0 before the fsync, $g0 after; FUA writes $u0 -> $v0"

for i in 0 1; do
  cmp -s -n 1048576 -i 0:4194304 /tmp/pattern "/tmp/f$i.img" ||
    fail "replica $i does not hold the pattern before the discard"
done
blkdiscard -o 4194304 -l 1048576 /dev/ublkb1
dd if=/dev/ublkb1 of=/tmp/back bs=64k skip=64 count=16 iflag=direct status=none
cmp -s -n 1048576 /tmp/back /dev/zero || fail "/dev/ublkb1 does not read zeroes after the discard"
for i in 0 1; do
  cmp -s -n 1048576 -i 4194304:0 "/tmp/f$i.img" /dev/zero ||
    fail "replica $i holds data where /dev/ublkb1 was discarded"
done
grep -q ' Zero id=.* trim=1' /tmp/f0-requests.log ||
  fail "the discard did not reach replica 0 as a zero that may trim"
CTL=/tmp/fc.ctl status >/tmp/fc-status.json
stop_server fc
wait_until 30 test ! -e /dev/ublkb1 || fail "/dev/ublkb1 is still there after a clean stop"
stop_server f0
stop_server f1
flush_line="flush_before_fsync=$f0 flush_after_fsync=$g0 fua_writes_before=$u0 fua_writes_after=$v0 discard_zeroes_on_legs=2"

# ---- 2. ext4, a leg killed and rebuilt underneath ------------------------
for i in 0 1 2; do start_replica "$i" 256M; done
args=("$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)"
      control="$CTL" timeout=10 ublk=0 ublk-queues="$queues")
start_controller "${args[@]}"
wait_until 60 ublk_is live || fail "ublk is $(status_get .volume.ublk.state)"
size=$(nbdinfo --size 'nbd+unix:///?socket=/tmp/c.sock')
wait_device /dev/ublkb0 "$size"
note "controller up: $size bytes; ublkb0: $(ls /sys/block/ublkb0/mq | wc -l) queues," \
     "cache=$(cat /sys/block/ublkb0/queue/write_cache)"
mkfs.ext4 -q -F /dev/ublkb0
mkdir -p /mnt/t
mount /dev/ublkb0 /mnt/t
# A thousand files and 6 commits, not 3000 and 24 (as guest-nbd-client:
# the leg kill and its resync fall in the copy and git phases all the
# same).
use_corpus_subset 1000
WORKLOAD_COMMITS=6 workload_with_leg_kill /mnt/t 1
kernel_log=$(check_kernel_log)
check_filesystem /dev/ublkb0 /mnt/t
workload_line=$(sed -n 's/^WORKLOAD //p' /tmp/workload.out)
stop_controller
wait_until 30 test ! -e /dev/ublkb0 || fail "/dev/ublkb0 is still there after a clean stop"
compare_legs "$size" 3
resync_line="resync leg=1 kind=$resync_kind bytes=$resync_bytes zeroed=$resync_zeroed seconds=$resync_seconds volume_bytes=$size legs_identical=yes leg_errors=$(leg_errors) $kernel_log"

# ---- 3. the controller killed, then restarted, under the workload ---------
note "the controller will be killed (SIGKILL) in the fsync phase and restarted at git-half"
start_controller "${args[@]}" ublk-keep=true
wait_until 60 ublk_is live || fail "ublk is $(status_get .volume.ublk.state)"
[ "$(status_get .volume.ublk.recovered)" = false ] || fail "a deleted device was recovered"
wait_device /dev/ublkb0 "$size"
mkfs.ext4 -q -F /dev/ublkb0
mount /dev/ublkb0 /mnt/t
STATE=/tmp/workload-kill
# Four commits, not 24: the git phase is most of the workload's time
# under emulation, and the kill and the restart need only its first half.
WORKLOAD_COMMITS=4 WORKLOAD_HOLD=git-half "$WORKLOAD" run "$CORPUS" /mnt/t "$STATE" </dev/null >/tmp/workload.out 2>&1 &
workload_pid=$!
wait_step deleted
inflight=0
for (( i = 0; i < 200; i++ )); do
  inflight=$(status_get .volume.ublk.inflight)
  [ "$inflight" -eq 0 ] || break
done
t0=$EPOCHREALTIME
kill_controller
note "controller killed with $inflight request(s) in flight"
restart_controller
kill_seconds=$(elapsed "$t0")
[ "$(status_get .volume.ublk.recovered)" = true ] || fail "the device was not recovered"
note "device recovered ${kill_seconds}s after the kill"
wait_step git-half
t0=$EPOCHREALTIME
stop_server c
[ -b /dev/ublkb0 ] || fail "ublk-keep=true: /dev/ublkb0 went away at the clean stop"
restart_controller
restart_seconds=$(elapsed "$t0")
note "device recovered ${restart_seconds}s after the clean stop"
touch "$STATE/go-git-half"
rc=0
wait "$workload_pid" || rc=$?
cat /tmp/workload.out
[ "$rc" -eq 0 ] || fail "the workload failed with status $rc"
kill_log=$(check_kernel_log)
check_filesystem /dev/ublkb0 /mnt/t
kill_line="controller_kill inflight_at_kill=$inflight recovery_seconds=$kill_seconds keep_restart_seconds=$restart_seconds errors_count=0 $(sed -n 's/^WORKLOAD //p' /tmp/workload.out) $kill_log"

# ---- 4. fio: ublk against nbd-client -C 4, same controller ----------------
# The last controller was started with ublk-keep=true: start one without
# it (taking the device back), so that the final clean stop deletes it.
stop_server c
args_keep=$(printf '%q ' "${args[@]}")
server_args[c]=$args_keep
restart_controller
# -t 300 as in guest-nbd-client.sh: not the kernel's 30 s, after which a
# slow request is sent again on another connection.
nbd-client -unix /tmp/c.sock /dev/nbd0 -C 4 -b 4096 -N default -t 300
note "fio: 4 KiB random reads, then writes, on /dev/ublkb0 and /dev/nbd0 (ABBA)"
reads=$(fio_abba randread)
writes=$(fio_abba randwrite)
read -r ublk_read nbd_read <<<"$reads"
read -r ublk_write nbd_write <<<"$writes"
ublk_requests=$(status_get .volume.ublk.requests)
ublk_direct=$(status_get .volume.ublk.direct)
[ "$ublk_direct" -gt 0 ] ||
  fail "no ublk request was started without a worker ($ublk_requests requests)"
check_kernel_log >/dev/null
nbd-client -d /dev/nbd0
read_ratio=$(awk -v a="$ublk_read" -v b="$nbd_read" 'BEGIN { printf "%.2f", b ? a / b : 0 }')
write_ratio=$(awk -v a="$ublk_write" -v b="$nbd_write" 'BEGIN { printf "%.2f", b ? a / b : 0 }')
goal=$(awk -v r="$read_ratio" -v w="$write_ratio" 'BEGIN { print (r >= 1.5 && w >= 1.5) ? "met" : "missed" }')
note "fio randread: ublk $ublk_read, nbd-client $nbd_read IOPS (x$read_ratio);" \
     "randwrite: ublk $ublk_write, nbd-client $nbd_write IOPS (x$write_ratio)"
stop_controller
wait_until 30 test ! -e /dev/ublkb0 || fail "/dev/ublkb0 is still there after a clean stop"
compare_legs "$size" 3
stop_all

echo "KERNEL-TEST ublk: $workload_line"
echo "KERNEL-TEST ublk: $resync_line"
echo "KERNEL-TEST ublk: $kill_line"
echo "KERNEL-TEST ublk: $flush_line"
echo "KERNEL-TEST ublk: fio_randread_4k_iops ublk=$ublk_read nbd_client=$nbd_read ratio=$read_ratio" \
     "fio_randwrite_4k_iops ublk=$ublk_write nbd_client=$nbd_write ratio=$write_ratio" \
     "goal_1.5x=$goal queues=$queues ublk_requests=$ublk_requests" \
     "direct=$ublk_direct guest_seconds=$(( SECONDS - start ))"
