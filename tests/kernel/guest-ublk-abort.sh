#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# vm: kernel=trixie
# vm: timeout=1200
# vm: mem=2G
#
# The controller killed by nbdkit's own abort under a mounted ublk
# filesystem, and brought back by its supervisor (README, "A client that
# vanishes"), in the VM of vm-run.sh booted with Debian 13's kernel.
#
# nbdkit before 1.33.10 (the guest runs the host's, Debian 12's 1.32.5)
# aborts ("raw_send_socket: Assertion `sock >= 0' failed") when an NBD
# client leaves with several replies pending.  The controller serves
# ext4 on /dev/ublkb0 (ublk=0, three file replicas) and also listens for
# NBD clients on /tmp/c.sock.  While the shared file workload
# (workload.sh) runs on the filesystem, a vanishing client hits that
# socket at three points (halfway through the copy, in the fsync phase,
# halfway through the git commits) until the controller dies: nbdcopy
# reads the volume with four 2 MiB requests in flight, is stopped
# (SIGSTOP: it reads no more replies) and a second or more later killed,
# its socket closed with the replies queued, which is what a killed
# nbdcopy or qemu is and what the client of tests/test-client-death.sh
# that sleeps first does (the image has no python for that one).  The supervisor
# restarts the controller, which takes the held device back.
#
# Asserted: each of the three rounds kills the controller within five
# clients, and every exit of the controller and of a leg server is that
# abort (status 134, the assertion in that run's log); each time the
# new controller recovers the device (ublk recovered=true); the
# workload finishes with every file as written; no I/O or ext4 error in
# the kernel log, ext4's errors_count 0, e2fsck -fn clean, every file as
# written after a remount; after a clean stop the legs are identical.
# On an nbdkit without the abort the test is skipped (77): it has
# nothing to kill the controller with.
#
# The supervisor: the guest's PID 1 is the image's /init shell script,
# not systemd, so there is no systemd-run; supervise() below does what
# the README's units ask of systemd (Restart=on-failure, RestartSec=1,
# StartLimitIntervalSec=0, ExecStartPre removing a stale socket).

source /test/guest-lib.sh

modprobe ublk_drv ||
  { echo "SKIP: kernel $(uname -r) has no ublk_drv"; exit 77; }
nbdkit_version=$(nbdkit --version | awk '{ print $2 }')
if [ "$(printf '%s\n' 1.33.10 "$nbdkit_version" | sort -V | head -n 1)" = 1.33.10 ]; then
  echo "SKIP: nbdkit $nbdkit_version does not abort when a client vanishes (fixed in 1.33.10): nothing kills the controller"
  exit 77
fi

queues=$(( $(nproc) < 4 ? $(nproc) : 4 ))
ASSERTION='raw_send_socket: Assertion `sock >= 0'"'"' failed'
declare -A supervisor_pid=()  # name -> pid of its supervision loop

# supervise NAME ARGS...: run `nbdkit -f ARGS` on /tmp/NAME.sock the way
# systemd runs a unit with Restart=on-failure and RestartSec=1: an exit
# with status 0 (the clean stop of SIGTERM) ends it; any other exit (a
# signal, a non-zero status) is appended to /tmp/NAME.exits as "STATUS
# UPTIME RUN" and the server is started again a second later, with no
# limit on the number of restarts (StartLimitIntervalSec=0).  Run N logs
# to /tmp/NAME.N.log; /tmp/NAME.pid is the running server's pid, written
# by nbdkit once it serves.  The socket is removed before each start
# (the units' ExecStartPre): an aborted nbdkit leaves it behind, and
# nbdkit will not listen on an existing path ("Address already in use").
supervise ()
{
  local name=$1
  shift
  (
    run=0
    while :; do
      run=$(( run + 1 ))
      rm -f "/tmp/$name.sock" "/tmp/$name.pid"
      nbdkit -f -U "/tmp/$name.sock" -P "/tmp/$name.pid" "$@" \
        </dev/null >"/tmp/$name.$run.log" 2>&1 &
      rc=0
      wait $! || rc=$?
      [ "$rc" -ne 0 ] || exit 0
      echo "$rc $(cut -d' ' -f1 /proc/uptime) $run" >>"/tmp/$name.exits"
      sleep 1
    done
  ) </dev/null >/dev/null 2>&1 &
  # (Not on the console's pipe: a loop left running by a failed test
  # would keep /init from reporting its status.)
  supervisor_pid[$name]=$!
  wait_until 60 test -s "/tmp/$name.pid" || fail "nbdkit $name did not start: $(cat "/tmp/$name.1.log")"
}

# unsupervise NAME: stop server NAME cleanly (SIGTERM, status 0 ends the
# supervision); fail if it does not exit within 60 s.
unsupervise ()
{
  local name=$1 pid=${supervisor_pid[$1]} rc=0
  kill -TERM "$(cat "/tmp/$name.pid")"
  wait_until 60 eval "! kill -0 $pid" || fail "$name did not stop within 60 s of SIGTERM"
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "the supervision of $name ended with status $rc"
  unset "supervisor_pid[$name]"
}

# exits NAME: print how many times server NAME exited abnormally.
exits ()
{
  if [ -f "/tmp/$1.exits" ]; then wc -l <"/tmp/$1.exits"; else echo 0; fi
}

# check_exits NAME: every abnormal exit of server NAME was nbdkit's abort:
# status 134 (SIGABRT) with the assertion in that run's log.
check_exits ()
{
  local rc at run
  [ -f "/tmp/$1.exits" ] || return 0
  while read -r rc at run; do
    [ "$rc" -eq 134 ] && grep -qF "$ASSERTION" "/tmp/$1.$run.log" ||
      fail "$1 (run $run) exited with status $rc at ${at}s, not of nbdkit's abort: $(tail -n 20 "/tmp/$1.$run.log")"
  done <"/tmp/$1.exits"
}

# aborted_since N: server c has exited abnormally more than N times.
aborted_since ()
{
  [ "$(exits c)" -gt "$1" ]
}

# ublk_is STATE: is the controller's ublk frontend in STATE?
ublk_is ()
{
  [ "$(status_get .volume.ublk.state)" = "$1" ]
}

# device_sized: /dev/ublkb0 exists and has a size.
device_sized ()
{
  [ -b /dev/ublkb0 ] && [ "$(cat /sys/block/ublkb0/size)" -gt 0 ]
}

# stop_supervised_controller: wait until every leg is uptodate, save the
# status to /tmp/status.json, stop the controller cleanly.
stop_supervised_controller ()
{
  wait_until 600 volume_is healthy ||
    fail "the volume is $(volume_state), not healthy: $(status_get '[.legs[] | "leg \(.index) \(.state) \(.last_error // "")"] | join("; ")')"
  status >/tmp/status.json
  unsupervise c
}

# ublk_recovered: the running controller has taken the device back.
ublk_recovered ()
{
  [ "$(status_get '"\(.volume.ublk.state) \(.volume.ublk.recovered)"')" = "live true" ]
}

# vanish SECS: one vanishing client on the controller's NBD socket
# (header), killed SECS seconds after it was stopped.  It is stopped once
# nbdcopy has reported 1 % done (its reads are flowing; --progress=FD
# prints "N/100" lines, "0/100" as soon as it starts).  The abort needs
# two of its replies ready to send when it goes, and under emulation,
# with the workload keeping the legs busy, four 2 MiB reads are not all
# done 0.1 s after the stop as they are on a host: kill_round waits 1 s,
# then longer.
vanish ()
{
  local pid
  rm -f /tmp/vanish.progress
  nbdcopy --connections=1 --requests=4 --request-size=2097152 --no-extents \
    --progress=3 'nbd+unix:///?socket=/tmp/c.sock' null: \
    </dev/null >/dev/null 2>>/tmp/vanish.err 3>/tmp/vanish.progress &
  pid=$!
  wait_until 20 grep -q '^[1-9]' /tmp/vanish.progress || true
  kill -STOP "$pid" 2>/dev/null || true
  sleep "$1"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# kill_round STEP: once the workload is at STEP (or past it), send
# vanishing clients until the controller dies (at most five), then wait
# until its next run has taken the device back; append the clients it
# took and the seconds from the death to the device's recovery to
# $clients and $recovery.
kill_round ()
{
  local step=$1 before n at t
  until grep -qx "$step" "$STATE/progress" 2>/dev/null; do
    kill -0 "$workload_pid" 2>/dev/null || fail "the workload ended before step $step"
    sleep 0.2
  done
  before=$(exits c)
  for (( n = 1; n <= 5; n++ )); do
    vanish "$n"
    wait_until 5 aborted_since "$before" && break
  done
  [ "$(exits c)" -gt "$before" ] ||
    fail "at $step, five vanishing clients did not kill the controller (nbdkit $nbdkit_version): the test cannot check what it is for"
  check_exits c
  at=$(tail -n 1 /tmp/c.exits | cut -d' ' -f2)
  note "at $step: the controller aborted after $n client(s); waiting for its restart"
  wait_until 120 ublk_recovered ||
    fail "no controller took /dev/ublkb0 back within 120 s of the abort; $(exits c) abnormal exits, the last run logged: $(tail -n 3 "$(ls -t /tmp/c.*.log | head -n 1)")"
  t=$(awk -v a="$at" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')
  note "device recovered ${t}s after the abort; volume $(volume_state)"
  clients+=${clients:+,}$n
  recovery+=${recovery:+,}$t
}

start=$SECONDS
for i in 0 1 2; do
  truncate -s 256M "/tmp/r$i.img"
  supervise "r$i" file "/tmp/r$i.img"
done
supervise c "$PLUGIN" "$(leg_uri 0)" "$(leg_uri 1)" "$(leg_uri 2)" \
  control="$CTL" timeout=10 ublk=0 ublk-queues="$queues"
wait_until 60 volume_is healthy || fail "the volume is $(volume_state), not healthy"
wait_until 60 ublk_is live || fail "ublk is $(status_get .volume.ublk.state)"
[ "$(status_get .volume.ublk.recovered)" = false ] || fail "a new device was recovered"
size=$(status_get .volume.size)
wait_until 60 device_sized || fail "no /dev/ublkb0"
mkfs.ext4 -q -F /dev/ublkb0
mkdir -p /mnt/t
mount /dev/ublkb0 /mnt/t
note "ext4 on /dev/ublkb0 ($size bytes); the workload starts, nbdkit $nbdkit_version's abort will hit the controller three times"

# A fifth of the image's corpus (600 files picked evenly from it) and
# four commits: under emulation the workload's time goes into the
# processes it starts per file and per commit, and the three aborts need
# only its copy, fsync and git phases, not their length.
WORKLOAD_SOURCES=/corpus "$WORKLOAD" corpus /tmp/corpus 600 >/dev/null
WORKLOAD_COMMITS=4 "$WORKLOAD" run /tmp/corpus /mnt/t "$STATE" </dev/null >/tmp/workload.out 2>&1 &
workload_pid=$!
clients='' recovery=''
kill_round copy-half
kill_round deleted
kill_round git-half
rc=0
wait "$workload_pid" || rc=$?
cat /tmp/workload.out
[ "$rc" -eq 0 ] || fail "the workload failed with status $rc"
kernel_log=$(check_kernel_log)
check_filesystem /dev/ublkb0 /mnt/t
for i in 0 1 2; do check_exits "r$i"; done
check_exits c
deaths=$(exits c)
leg_deaths=$(( $(exits r0) + $(exits r1) + $(exits r2) ))
note "the controller aborted $deaths time(s), the leg servers $leg_deaths time(s)"
stop_supervised_controller
wait_until 30 test ! -e /dev/ublkb0 || fail "/dev/ublkb0 is still there after a clean stop"
compare_legs "$size" 3
for i in 0 1 2; do unsupervise "r$i"; done

echo "KERNEL-TEST ublk-abort: nbdkit=$nbdkit_version controller_aborts=$deaths" \
     "clients_per_abort=$clients recovery_seconds=$recovery leg_aborts=$leg_deaths" \
     "leg_errors=$(leg_errors) errors_count=0 legs_identical=yes $kernel_log" \
     "$(sed -n 's/^WORKLOAD //p' /tmp/workload.out) guest_seconds=$(( SECONDS - start ))"
