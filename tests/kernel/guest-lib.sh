# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash
#
# guest-lib.sh: what the guest tests (guest-*.sh) share.  They run inside
# the VM of vm-run.sh as root and source this file.  It gives them:
#
# - servers: stock nbdkit replicas serving /tmp/rN.img (tmpfs, so a
#   killed replica's data survives it) on /tmp/rN.sock, and the
#   controller (our plugin from /opt/nbdkit-replicate) on /tmp/c.sock
#   with its control socket /tmp/c.ctl.  Every server is a child of the
#   test; one that dies unless killed through kill_replica fails the test
#   when it is stopped, and so does one that exits with a non-zero status
#   or hangs for 60 s after SIGTERM.
# - the status, read with nbdrep status --json and jq;
# - the scenario every kernel path runs: the shared workload
#   (/test/workload.sh) on a file system, leg LEG killed with SIGKILL
#   halfway through the copy and restarted halfway through the git
#   commits, then resync, the file system checks (no ext4 or I/O error,
#   every file as written after a remount, git fsck, e2fsck -n) and the
#   byte comparison of the legs after a clean stop of the controller;
# - fio numbers for a block device.
# What was measured goes to lines starting with KERNEL-TEST, which
# check-kernel collects.
#
# Guests have busybox for the basics plus bash, GNU coreutils, findutils,
# diffutils and tar, nbdkit, nbd-client, e2fsprogs, fio, git and jq.

set -euo pipefail

PLUGIN=/opt/nbdkit-replicate/nbdkit-replicate-plugin.so
WORKLOAD=/test/workload.sh
CORPUS=/corpus
CTL=/tmp/c.ctl
STATE=/tmp/workload
NBDREP=nbdrep

declare -A server_pid=()      # server name -> pid while it runs
declare -A server_args=()     # server name -> its nbdkit arguments, quoted

# Print a progress line with the guest's uptime.
note ()
{
  echo "[$(cut -d' ' -f1 /proc/uptime)s] $*"
}

# Fail the test saying why.
fail ()
{
  echo "FAIL: $*" >&2
  exit 1
}

# Exit hook: on failure, show the end of every server's log and of the
# workload's output.
_guest_exit ()
{
  local rc=$? log
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    for log in /tmp/*.log /tmp/workload.out; do
      [ -f "$log" ] || continue
      echo "===== last 40 lines of $log ====="
      tail -n 40 "$log"
    done
  fi
  exit "$rc"
}
trap _guest_exit EXIT

# wait_until SECS CMD...: run CMD every 0.2 s until it succeeds; fail
# after SECS.
wait_until ()
{
  local deadline=$(( SECONDS + $1 ))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# start_server NAME ARGS...: run `nbdkit -f ARGS` on /tmp/NAME.sock,
# logging to /tmp/NAME.log, and wait until it serves.
start_server ()
{
  local name=$1 pid
  shift
  rm -f "/tmp/$name.sock" "/tmp/$name.pid"
  server_args[$name]=$(printf '%q ' "$@")
  nbdkit -f -U "/tmp/$name.sock" -P "/tmp/$name.pid" "$@" \
    </dev/null >>"/tmp/$name.log" 2>&1 &
  pid=$!
  server_pid[$name]=$pid
  until [ -s "/tmp/$name.pid" ]; do
    kill -0 "$pid" 2>/dev/null || fail "nbdkit $name did not start: $(cat "/tmp/$name.log")"
    sleep 0.05
  done
}

# stop_server NAME: SIGTERM server NAME and wait for it; fail if it had
# died, exits with a non-zero status or is still up after 60 s.
stop_server ()
{
  local name=$1 pid=${server_pid[$1]-} rc=0 i
  [ -n "$pid" ] || return 0
  unset "server_pid[$name]"
  kill -0 "$pid" 2>/dev/null || {
    wait "$pid" || rc=$?
    fail "$name (pid $pid) died during the test with status $rc"
  }
  kill -TERM "$pid"
  for (( i = 0; i < 600; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    fail "$name (pid $pid) did not exit within 60 s of SIGTERM"
  fi
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name (pid $pid) exited with status $rc after SIGTERM"
}

# start_replica I [SIZE]: replica I serving /tmp/rI.img (created sparse
# with SIZE, default 256M, if missing).
start_replica ()
{
  [ -e "/tmp/r$1.img" ] || truncate -s "${2:-256M}" "/tmp/r$1.img"
  start_server "r$1" file "/tmp/r$1.img"
}

# kill_replica I: SIGKILL replica I and reap it.
kill_replica ()
{
  local pid=${server_pid[r$1]}
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  unset "server_pid[r$1]"
}

# restart_replica I: start replica I again on the same image.
restart_replica ()
{
  eval "start_server r$1 ${server_args[r$1]}"
}

# leg_uri I: print replica I's URI.
leg_uri ()
{
  echo "nbd+unix:///?socket=/tmp/r$1.sock"
}

# start_controller ARGS...: the controller, nbdkit ARGS (filters, our
# plugin, the legs and parameters), on /tmp/c.sock; wait until healthy.
start_controller ()
{
  start_server c "$@"
  wait_until 30 test -S "$CTL" || fail "no control socket $CTL"
  wait_until 60 volume_is healthy || fail "the volume is $(volume_state), not healthy"
}

# status: print `nbdrep status --json` (exit status 3, degraded, is fine).
status ()
{
  local rc=0
  "$NBDREP" status --json "$CTL" || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]
}

# status_get JQ-FILTER: print the filter's result on the status.
status_get ()
{
  local json
  json=$(status) || return 1
  jq -r "$1" <<<"$json"
}

# leg_state I: print leg I's state word.
leg_state ()
{
  status_get ".legs[] | select(.index == $1) | .state"
}

# leg_report I: print leg I's state and, if it has one, its last error
# (why a leg is not back: what a failure message must say).
leg_report ()
{
  status_get ".legs[] | select(.index == $1) | \"\\(.state) \\(.last_error // \"\")\""
}

# volume_state: print the volume's state word.
volume_state ()
{
  status_get .volume.state
}

# leg_is I STATE: is leg I in STATE?
leg_is ()
{
  [ "$(leg_state "$1")" = "$2" ]
}

# volume_is STATE: is the volume in STATE?
volume_is ()
{
  [ "$(volume_state)" = "$1" ]
}

# al_is_cold: is the controller's activity log empty?
al_is_cold ()
{
  [ "$(status_get .volume.activity_log.hot)" -eq 0 ]
}

# controller_alive: fail unless the controller still runs.
controller_alive ()
{
  kill -0 "${server_pid[c]}" 2>/dev/null || fail "the controller died: $(tail -n 20 /tmp/c.log)"
}

# wait_step STEP: wait until the workload reaches STEP (fail if it died
# or after 900 s).
wait_step ()
{
  local deadline=$(( SECONDS + 900 ))
  until grep -qx "$1" "$STATE/progress" 2>/dev/null; do
    kill -0 "$workload_pid" 2>/dev/null || fail "the workload ended before step $1"
    [ "$SECONDS" -lt "$deadline" ] || fail "the workload did not reach step $1"
    controller_alive
    sleep 0.2
  done
}

# use_corpus_subset N: the workload's corpus becomes N files picked
# evenly from the image's /corpus (3000 files), in /tmp/corpus: under
# emulation every file costs the copy, rename and delete phases time,
# and a thousand exercise the same paths as three thousand.
use_corpus_subset ()
{
  WORKLOAD_SOURCES=/corpus "$WORKLOAD" corpus /tmp/corpus "$1" >/dev/null
  CORPUS=/tmp/corpus
}

# workload_with_leg_kill DIR LEG: the workload on DIR; leg LEG is killed
# halfway through the copy, must be seen failed, is restarted halfway
# through the git commits and must come back uptodate, after an
# incremental resync.  Prints the workload's numbers; sets resync_kind,
# resync_bytes, resync_zeroed (bytes written as zeroes) and
# resync_seconds.
workload_with_leg_kill ()
{
  local dir=$1 leg=$2 rc=0
  # mkfs discards the whole device: let the activity log cool, so that
  # the resync measures what the workload did (a leg that fails gets back
  # every extent that is hot at that moment).
  sync -f "$dir"
  wait_until 60 al_is_cold || fail "the activity log did not cool"
  note "workload on $dir; leg $leg will be killed halfway through the copy"
  WORKLOAD_HOLD="copy-half git-half" "$WORKLOAD" run "$CORPUS" "$dir" "$STATE" \
    </dev/null >/tmp/workload.out 2>&1 &
  workload_pid=$!
  wait_step copy-half
  note "killing replica $leg (kill -9)"
  kill_replica "$leg"
  touch "$STATE/go-copy-half"
  wait_until 300 leg_is "$leg" failed || fail "leg $leg is $(leg_state "$leg"), not failed"
  note "leg $leg failed; volume $(volume_state)"
  wait_step git-half
  leg_is "$leg" failed || fail "leg $leg is $(leg_state "$leg") while its replica is down"
  note "restarting replica $leg"
  restart_replica "$leg"
  touch "$STATE/go-git-half"
  wait "$workload_pid" || rc=$?
  cat /tmp/workload.out
  [ "$rc" -eq 0 ] || fail "the workload failed with status $rc"
  note "workload done; waiting for leg $leg to be uptodate"
  wait_until 600 leg_is "$leg" uptodate || fail "leg $leg is $(leg_report "$leg"), not uptodate"
  wait_until 60 volume_is healthy || fail "the volume is $(volume_state), not healthy"
  resync_kind=$(status_get ".legs[] | select(.index == $leg) | .last_resync.kind")
  resync_bytes=$(status_get ".legs[] | select(.index == $leg) | .last_resync.bytes")
  resync_seconds=$(status_get ".legs[] | select(.index == $leg) | .last_resync.seconds")
  resync_zeroed=$(status_get ".legs[] | select(.index == $leg) | .last_resync.zeroed")
  [ "$resync_kind" = incremental ] || fail "leg $leg had a $resync_kind resync, not incremental"
  # A resync covers each out-of-sync chunk once: never more than the volume.
  [ $(( resync_bytes + resync_zeroed )) -le "$(status_get .volume.size)" ] ||
    fail "leg $leg's resync copied $resync_bytes bytes and zeroed $resync_zeroed: more than the volume"
}

# check_kernel_log: no I/O or ext4 error in the kernel log; print how
# many "possible stuck request" warnings the nbd driver gave.
check_kernel_log ()
{
  local errors
  errors=$(dmesg | grep -E 'I/O error|EXT4-fs (error|warning)|Buffer I/O|blk_update_request|Receive control failed|Send control failed|Dead connection|Connection timed out' || true)
  [ -z "$errors" ] || fail "the kernel logged errors: $errors"
  echo "stuck_warnings=$(dmesg | grep -c 'Possible stuck request' || true)"
}

# check_filesystem DEV DIR: no error reached ext4; after a remount
# (read-only, caches dropped) every file is what the workload left; git
# fsck passes; e2fsck -fn finds nothing.
check_filesystem ()
{
  local dev=$1 dir=$2
  [ "$(cat "/sys/fs/ext4/${dev#/dev/}/errors_count")" -eq 0 ] ||
    fail "ext4 counted errors on $dev"
  umount "$dir"
  e2fsck -fn "$dev" || fail "e2fsck -fn $dev found problems"
  echo 3 >/proc/sys/vm/drop_caches
  mount -o ro "$dev" "$dir"
  "$WORKLOAD" verify "$dir" "$STATE" || fail "the files on $dev are not what was written"
  umount "$dir"
}

# fio_numbers DEV: random 4 KiB reads and writes (libaio, O_DIRECT, queue
# depth 16, 20 s) and sequential 1 MiB writes (10 s) on DEV; print them.
fio_numbers ()
{
  local dev=$1 rw seq
  rw=$(fio --name=randrw --filename="$dev" --ioengine=libaio --direct=1 \
         --rw=randrw --bs=4k --iodepth=16 --size=128M --runtime=20 \
         --time_based --output-format=json |
       jq -r '.jobs[0] | "fio_randrw_4k_read_iops=\(.read.iops | floor) fio_randrw_4k_write_iops=\(.write.iops | floor)"')
  seq=$(fio --name=seqwrite --filename="$dev" --ioengine=libaio --direct=1 \
          --rw=write --bs=1M --iodepth=4 --size=128M --runtime=10 \
          --time_based --output-format=json |
        jq -r '.jobs[0] | "fio_seqwrite_1m_MiBps=\(.write.bw / 1024 | floor)"')
  echo "$rw $seq"
}

# differing_chunks SIZE A B: print how many 64 KiB chunks of the first
# SIZE bytes of files A and B differ, and the offsets of the first ten.
differing_chunks ()
{
  local n=0 list='' off
  for off in $(cmp -l -n "$1" "$2" "$3" | awk '{ print int(($1 - 1) / 65536) * 65536 }' | uniq); do
    n=$(( n + 1 ))
    [ "$n" -gt 10 ] || list+=" $off"
  done
  echo "$n chunks differ, the first at:$list"
}

# compare_legs SIZE N: the first SIZE bytes of /tmp/r1.img .. r(N-1).img
# equal those of /tmp/r0.img (run after a clean stop of the controller;
# the status from just before it is in /tmp/status.json).
compare_legs ()
{
  local i bad=0
  for (( i = 1; i < $2; i++ )); do
    if ! cmp -s -n "$1" /tmp/r0.img "/tmp/r$i.img"; then
      echo "leg $i differs from leg 0: $(differing_chunks "$1" /tmp/r0.img "/tmp/r$i.img")"
      bad=1
    fi
  done
  [ "$bad" -eq 0 ] ||
    fail "the legs differ; the last status was: $(jq -c '{volume: (.volume | {state, generation}), legs: [.legs[] | {index, state, last_resync, errors, last_error}]}' /tmp/status.json)"
}

# refused_write_check DEV: a write the controller refuses must fail with
# EIO and change nothing.  1 MiB of old data is written at 64 MiB;
# replicas 1 and 2 are killed, which leaves the volume readonly (writes
# fail with EIO below quorum); sixteen 64 KiB O_DIRECT writes of new data
# there must fail with EIO, not succeed and not time out; once the
# replicas are back and resynced the 1 MiB reads back as the old data,
# unshifted.  nbdublk up to 1.22 completes a failed request with a
# positive errno, which the kernel takes for a count of bytes done: the
# write is retried at the same sector and ends as EINVAL or as a
# success, and data read back after such errors can be shifted; this
# check fails on such an nbdublk.  The controller must run with
# quorum=2 and three legs, and the check writes to the raw device: run
# it after the file system checks.
refused_write_check ()
{
  local dev=$1 bs=$(( 64 * 1024 )) seek=1024 out rc=0
  head -c $(( 16 * bs )) /dev/urandom >/tmp/old
  head -c $(( 16 * bs )) /dev/urandom >/tmp/new
  dd if=/tmp/old of="$dev" bs="$bs" seek="$seek" count=16 oflag=direct \
     conv=notrunc status=none || fail "cannot write the old data to $dev"
  kill_replica 1
  kill_replica 2
  wait_until 30 volume_is readonly || fail "the volume is $(volume_state), not readonly"
  out=$(timeout 300 dd if=/tmp/new of="$dev" bs="$bs" seek="$seek" count=16 \
        oflag=direct conv=notrunc 2>&1) || rc=$?
  [ "$rc" -ne 124 ] || fail "a write the controller refused had not failed after 300 s"
  [ "$rc" -ne 0 ] || fail "writes the controller refused were reported written: $out"
  grep -q 'Input/output error' <<<"$out" ||
    fail "a write the controller refused did not fail with EIO: $out"
  restart_replica 1
  restart_replica 2
  wait_until 300 volume_is healthy || fail "the volume is $(volume_state), not healthy"
  dd if="$dev" of=/tmp/back bs="$bs" skip="$seek" count=16 iflag=direct status=none ||
    fail "cannot read back the old data from $dev"
  cmp /tmp/old /tmp/back ||
    fail "a refused write changed the data (or it reads back shifted)"
  note "a refused write failed with EIO and changed nothing"
}

# stop_controller: wait until every leg is uptodate (a leg that timed
# out under load is back and resynced), save the status to
# /tmp/status.json, then stop the controller.
stop_controller ()
{
  controller_alive
  wait_until 600 volume_is healthy ||
    fail "the volume is $(volume_state), not healthy: $(status_get '[.legs[] | "leg \(.index) \(.state) \(.last_error // "")"] | join("; ")')"
  status >/tmp/status.json
  stop_server c
}

# leg_errors: print each leg's error count, comma-separated (more than
# the one kill means a leg also timed out under load).
leg_errors ()
{
  jq -r '[.legs[].errors] | map(tostring) | join(",")' /tmp/status.json
}

# stop_all: stop the controller (first: replicas wait for their clients)
# and the replicas still running.
stop_all ()
{
  local name
  stop_server c
  for name in "${!server_pid[@]}"; do
    stop_server "$name"
  done
}
