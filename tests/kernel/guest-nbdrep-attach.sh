#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# vm: timeout=1500
# vm: mem=2G
#
# /dev/nbd0 attached by `nbdrep attach` (DESIGN.md section 17) survives
# controller restarts, in the VM of vm-run.sh (Debian 12's kernel, which
# has nbd.ko).  Three file replicas, the controller (plugin shape,
# timeout=10), the supervisor with four connections, ext4 on /dev/nbd0;
# the shared file workload (a tenth of the corpus, four commits) and a
# loop of fio write-and-verify passes (crc32c, O_DIRECT, queue depth 8)
# run on it while
#   1. halfway through the copy, the controller is killed (SIGKILL) and
#      a new one started 3 s later;
#   2. after the deletions, the controller is stopped (SIGTERM: it
#      closes its client connections unanswered first) and a new one
#      started at once;
#   3. halfway through the commits, the supervisor is killed (SIGKILL)
#      and started again (it must take the connected device over), and
#      then the controller is killed and a new one started 3 s later.
# Each time the supervisor must reconnect the device.  Asserted: no I/O
# or ext4 error in the kernel log, every fio pass verified clean, the
# workload's files as written, git fsck, e2fsck -fn clean, and after a
# clean stop the legs identical.  Then:
#   4. nbdrep detach ends the supervisor (status 0);
#   5. a server that is not a controller is refused at attach (status 1);
#   6. attached again with --dead-timeout 10, the controller is stopped
#      and a controller of another volume takes its socket: refused by
#      the supervisor, a read waits, and fails with EIO only after the
#      dead-connection timeout, with the supervisor saying so; when the
#      right controller is back, the device works again.

source /test/guest-lib.sh

ATTACH_LOG=/tmp/attach.log
DEAD_TIMEOUT=120
declare -a reconnect_seconds=()

# start_supervisor [OPTIONS]: nbdrep attach of /dev/nbd0 to the
# controller's socket, logging to $ATTACH_LOG.
start_supervisor ()
{
  "$NBDREP" attach /tmp/c.sock /dev/nbd0 "$@" </dev/null >>"$ATTACH_LOG" 2>&1 &
  supervisor=$!
}

# log_count PATTERN: how many supervisor log lines match PATTERN.
log_count ()
{
  grep -c -- "$1" "$ATTACH_LOG" || true
}

# log_more PATTERN N: more than N lines match PATTERN.
log_more ()
{
  [ "$(log_count "$1")" -gt "$2" ]
}

# wait_reconnected N: wait until the supervisor has logged more than N
# reconnections; record how long the device waited.
wait_reconnected ()
{
  wait_until 180 log_more 'reconnected to volume' "$1" ||
    fail "the supervisor did not reconnect /dev/nbd0: $(tail -n 5 "$ATTACH_LOG")"
  reconnect_seconds+=("$(grep 'reconnected to volume' "$ATTACH_LOG" | tail -n 1 | sed 's/.* after \([0-9.]*\) s$/\1/')")
}

# kill_controller: SIGKILL the controller and reap it.
kill_controller ()
{
  local pid=${server_pid[c]}
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  unset "server_pid[c]"
}

# hold STEP: wait until the workload has reached STEP (it waits there).
hold ()
{
  wait_step "$1"
  note "workload at $1"
}

# fio_loop: fio write-and-verify passes on /mnt/t/fio.dat until
# /tmp/fio.stop exists; a failed pass is recorded in /tmp/fio.failed.
fio_loop ()
{
  local n=0
  while [ ! -e /tmp/fio.stop ]; do
    n=$(( n + 1 ))
    if ! fio --name=verify --filename=/mnt/t/fio.dat --size=16M \
         --rw=randwrite --bs=16k --ioengine=libaio --iodepth=8 --direct=1 \
         --verify=crc32c --do_verify=1 --verify_fatal=1 \
         --output=/tmp/fio.$n.out; then
      echo "$n" >/tmp/fio.failed
      return
    fi
  done
  echo "$n" >/tmp/fio.passes
}

# check_no_io_error: no I/O or ext4 error in the kernel log (lost
# connections, their retries and reconnections are expected here).
check_no_io_error ()
{
  local errors
  errors=$(dmesg | grep -E 'I/O error|EXT4-fs (error|warning)|Buffer I/O|blk_update_request|Other side returned error' || true)
  [ -z "$errors" ] || fail "the kernel logged errors: $errors"
}

start=$SECONDS
for i in 0 1 2; do start_replica "$i" 256M; done
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10
size=$(status_get .volume.size)
uuid=$(status_get .volume.uuid)
[ "$(nbdinfo --json 'nbd+unix:///?socket=/tmp/c.sock' | jq -r '.exports[0].description')" = "nbdkit-replicate volume $uuid" ] ||
  fail "the controller does not describe its export with its volume"

start_supervisor --connections 4 --dead-timeout "$DEAD_TIMEOUT"
wait_until 60 log_more 'attached to volume' 0 ||
  fail "nbdrep attach did not attach /dev/nbd0: $(cat "$ATTACH_LOG")"
[ "$(( $(cat /sys/block/nbd0/size) * 512 ))" -eq "$size" ] ||
  fail "/dev/nbd0 is not $size bytes"
[ "$(cat /sys/block/nbd0/queue/logical_block_size)" -eq 4096 ] ||
  fail "/dev/nbd0 does not have 4096-byte blocks"
[ "$(cat /sys/block/nbd0/backend)" = "nbdrep:$uuid" ] ||
  fail "/dev/nbd0's backend is $(cat /sys/block/nbd0/backend)"
kernel_connections ()
{
  [ "$(status_get '.volume.kernel | map("\(.device) \(.connections)") | join(",")')" = "/dev/nbd0 $1" ]
}
wait_until 30 kernel_connections 4 ||
  fail "the controller's status shows $(status_get '.volume.kernel | tostring'), not /dev/nbd0 with 4 connections"
note "nbd0 attached: $(cat /sys/block/nbd0/queue/write_cache), $(grep 'attached to' "$ATTACH_LOG")"

mkfs.ext4 -q -F /dev/nbd0
mkdir -p /mnt/t
mount /dev/nbd0 /mnt/t
WORKLOAD_SOURCES=/corpus "$WORKLOAD" corpus /tmp/corpus 300 >/dev/null
fio_loop </dev/null >/dev/null 2>&1 &
fio_pid=$!
WORKLOAD_COMMITS=4 WORKLOAD_HOLD="copy-half deleted git-half git-done" \
  "$WORKLOAD" run /tmp/corpus /mnt/t "$STATE" </dev/null >/tmp/workload.out 2>&1 &
workload_pid=$!

hold copy-half
note "1. killing the controller (SIGKILL); a new one in 3 s"
before=$(log_count 'reconnected to volume')
kill_controller
touch "$STATE/go-copy-half"
sleep 3
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10
wait_reconnected "$before"
wait_until 30 kernel_connections 4 ||
  fail "the new controller's status shows $(status_get '.volume.kernel | tostring'), not /dev/nbd0 with 4 connections"
note "reconnected after ${reconnect_seconds[-1]} s"

hold deleted
note "2. stopping the controller (SIGTERM); a new one at once"
before=$(log_count 'reconnected to volume')
stop_server c
touch "$STATE/go-deleted"
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10
wait_reconnected "$before"
note "reconnected after ${reconnect_seconds[-1]} s"

hold git-half
note "3. killing the supervisor (SIGKILL) and starting it again"
before=$(log_count 'reconnected to volume')
kill -KILL "$supervisor"
wait "$supervisor" 2>/dev/null || true
start_supervisor --connections 4 --dead-timeout "$DEAD_TIMEOUT"
wait_until 60 log_more 'already connected to volume' 0 ||
  fail "the new supervisor did not take /dev/nbd0 over: $(tail -n 5 "$ATTACH_LOG")"
# Taking over is one reconnection (the kernel takes no socket: none died).
wait_until 60 log_more 'reconnected to volume' "$before" ||
  fail "the new supervisor did not check the device's connections: $(tail -n 5 "$ATTACH_LOG")"
touch "$STATE/go-git-half"
sleep 2
note "   killing the controller (SIGKILL); a new one in 3 s"
before=$(log_count 'reconnected to volume')
kill_controller
sleep 3
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10
wait_reconnected "$before"
note "the new supervisor reconnected after ${reconnect_seconds[-1]} s"

# fio stops before the workload hashes the files (fio.dat is one).
hold git-done
touch /tmp/fio.stop
wait "$fio_pid"
touch "$STATE/go-git-done"
rc=0
wait "$workload_pid" || rc=$?
cat /tmp/workload.out
[ "$rc" -eq 0 ] || fail "the workload failed with status $rc"
[ ! -e /tmp/fio.failed ] ||
  fail "fio pass $(cat /tmp/fio.failed) failed: $(tail -n 30 "/tmp/fio.$(cat /tmp/fio.failed).out")"
fio_passes=$(cat /tmp/fio.passes)
check_no_io_error
retries=$(dmesg | grep -c 'Connection timed out, retrying' || true)
dead_waits=$(dmesg | grep -c 'Dead connection, failed to find a fallback' || true)
note "workload and $fio_passes fio passes done; kernel: $retries request retries, $dead_waits waits for a connection"
check_filesystem /dev/nbd0 /mnt/t
check_no_io_error

note "4. nbdrep detach"
"$NBDREP" detach /dev/nbd0
rc=0
wait_until 30 eval "! kill -0 $supervisor" || fail "the supervisor did not exit after detach"
wait "$supervisor" || rc=$?
[ "$rc" -eq 0 ] || fail "the supervisor exited with status $rc after detach"
grep -q 'the device was disconnected' "$ATTACH_LOG" || fail "the supervisor did not log the detach"
stop_controller
compare_legs "$size" 3

note "5. attach to a server that is not a controller"
start_server m memory 64M
rc=0
out=$("$NBDREP" attach /tmp/m.sock /dev/nbd1 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "attach to nbdkit memory exited with $rc: $out"
grep -q 'refused /tmp/m.sock: it is not an nbdkit-replicate controller' <<<"$out" ||
  fail "attach to nbdkit memory: $out"
stop_server m

note "6. a controller of another volume behind the socket"
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10
: >"$ATTACH_LOG"
start_supervisor --connections 2 --dead-timeout 10
wait_until 60 log_more 'attached to volume' 0 || fail "no second attach: $(cat "$ATTACH_LOG")"
stop_controller
for i in 3 4; do start_replica "$i" 64M; done
start_controller "$PLUGIN" "$(leg_uri 3)" "$(leg_uri 4)" control="$CTL"
other=$(status_get .volume.uuid)
t0=$SECONDS
rc=0
out=$(dd if=/dev/nbd0 of=/dev/null bs=4096 count=1 iflag=direct 2>&1) || rc=$?
waited=$(( SECONDS - t0 ))
[ "$rc" -ne 0 ] || fail "a read succeeded while a controller of another volume served the socket"
grep -q 'Input/output error' <<<"$out" || fail "the read did not fail with EIO: $out"
[ "$waited" -ge 8 ] || fail "the read failed after $waited s, before the dead-connection timeout (10 s)"
grep -q "refused /tmp/c.sock: it serves volume $other, but /dev/nbd0 belongs to volume $uuid" "$ATTACH_LOG" ||
  fail "the supervisor did not refuse the other volume: $(cat "$ATTACH_LOG")"
wait_until 30 grep -q "no controller has served volume $uuid for 10 s" "$ATTACH_LOG" ||
  fail "the supervisor did not report the timeout: $(cat "$ATTACH_LOG")"
note "refused, and the read failed with EIO after $waited s"
stop_server c
start_controller "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10
wait_until 60 log_more 'reconnected to volume' 0 || fail "no reconnection: $(tail -n 5 "$ATTACH_LOG")"
dd if=/dev/nbd0 of=/dev/null bs=4096 count=1 iflag=direct status=none ||
  fail "/dev/nbd0 does not work again after the right controller came back"
"$NBDREP" detach /dev/nbd0
wait "$supervisor" || fail "the supervisor failed after the second detach"
stop_all

echo "KERNEL-TEST nbdrep-attach: $(sed -n 's/^WORKLOAD //p' /tmp/workload.out)"
echo "KERNEL-TEST nbdrep-attach: reconnect_seconds=$(IFS=,; echo "${reconnect_seconds[*]}")" \
     "fio_passes=$fio_passes request_retries=$retries dead_waits=$dead_waits" \
     "legs_identical=yes wrong_volume_eio_after=${waited}s guest_seconds=$(( SECONDS - start ))"
