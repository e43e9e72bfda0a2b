#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The acknowledgement rule on the asynchronous path (aio.c, the ublk
# frontend's): a write is acknowledged only if the membership change it
# waited for was recorded (finish_write -> judge_acknowledge in io.c), as
# test-safety-failed-record.sh checks on the synchronous path.
#
# The controller is tests/aio-driver --script: the engine without
# nbdkit, each request started with engine_aio_start and, when it cannot
# be completed without waiting, finished by engine_aio_finish, as
# ublk.c does.  Two file legs A (leg 0) and B (leg 1, behind the
# faultinject filter), read=first.  B's next superblock write is held
# 3 s and then refused with EIO (its data writes succeed).
#   1. A is killed; its failure is recorded by a generation bump whose
#      superblock write to B is the one held.  Meanwhile a FUA write W
#      is started, on B alone; B takes it at once, but a change is being
#      recorded, so W is unfinished and its finisher waits for the
#      change, which fails (B is failed too, no leg is uptodate): W must
#      not be acknowledged.  (Before judge_acknowledge, engine_aio_finish
#      waited for the change and acknowledged W, judged against the
#      membership of its start.)
#   2. B is taken down and A comes back first: its failure was noted
#      though not recorded, so it must not be uptodate.
#   3. B comes back: uptodate, A resyncs from it, both legs equal what
#      was acknowledged (W's range, not acknowledged, only the same on
#      both legs).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

DRIVER="$abs_top_builddir/tests/aio-driver"
ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
KiB=1024
MiB=$(( 1024 * KiB ))
W=$(( 8 * MiB ))
len=$(( 64 * KiB ))

start_replica 0
start_replica 1 -- --filter="$FAULTINJECT" rules="$tmpdir/r1.rules" \
  log="$tmpdir/r1.faults"

coproc DRV { exec "$DRIVER" --script replica="$r0_uri" replica="$r1_uri" \
  control="$ctl" timeout=3 read=first 2>"$tmpdir/driver.err"; }
driver_pid=$DRV_PID
driver_in=${DRV[1]} driver_out=${DRV[0]}

# stop_driver: end the driver (closing its input ends it; killed if it
# does not) and show its errors.
stop_driver ()
{
  if [ -n "$driver_pid" ]; then
    exec {driver_in}>&-
    if ! wait_until 20 _pid_gone "$driver_pid"; then
      kill -KILL "$driver_pid" 2>/dev/null
    fi
    wait "$driver_pid" 2>/dev/null || true
    driver_pid=
  fi
  cat "$tmpdir/driver.err" >&2
}
_pid_gone () { ! kill -0 "$1" 2>/dev/null; }
cleanup_fn stop_driver

# ask COMMAND: send a command to the driver, print its answer.
ask ()
{
  local reply
  echo "$1" >&"$driver_in"
  read -r -t 60 reply <&"$driver_out" || {
    echo "$0: no answer to: $1" >&2
    return 1
  }
  echo "$reply"
}

# aio_write OFFSET NAME [sync-write]: write len random bytes (kept in
# $tmpdir/NAME) at OFFSET through the driver; into the expected file
# only if acknowledged.  Prints the answer.
aio_write ()
{
  local reply
  head -c "$len" /dev/urandom >"$tmpdir/$2"
  reply=$(ask "${3:-write} $1 $len $tmpdir/$2") || return 1
  if [[ $reply == ok* ]]; then
    dd if="$tmpdir/$2" of="$expected" bs="$len" seek=$(( $1 / len )) \
      conv=notrunc status=none
  fi
  echo "$reply"
}

wait_volume_state 30 "$ctl" healthy
size=$(nbdrep_status_get "$ctl" "s['volume']['size']")
rm -f "$expected"
truncate -s "$size" "$expected"

# _cold: is no activity-log extent hot?
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}

# 1.  The asynchronous path takes a write only to a hot activity-log
# extent.  W's is warmed by a synchronous write just after a cooling
# pass took it out, so the next pass is 2 s away (AL_INTERVAL in al.c).
# A dies; the bump recording that holds its superblock write on B, then
# refuses it; W goes to B meanwhile.
reply=$(aio_write "$W" warm sync-write)
[ "$reply" = "ok sync" ]
wait_until 10 _cold
reply=$(aio_write "$W" warm sync-write)
[ "$reply" = "ok sync" ]
fault_arm "$tmpdir/r1.rules" \
  "id=sb op=write range=-8K- phase=refuse delay=3 count=1"
kill_replica 0
fault_wait "$tmpdir/r1.faults" sb fire 10
result=$(aio_write "$W" w)
echo "W: $result"
case $result in
  ok*) echo "$0: W was acknowledged although the change it waited for failed" >&2
       exit 1 ;;
  "error EIO finished") ;;
  *) echo "$0: W was not served as an unfinished asynchronous write: $result" >&2
     exit 1 ;;
esac

# 2.  B away, A back first: A must not be uptodate.
kill_replica 1
fault_clear "$tmpdir/r1.rules"
restart_replica 0
sleep 3
status_check "$ctl" 'leg(0)["state"] != "uptodate"'

# 3.  B back: uptodate, A resyncs from it; W's range (not
# acknowledged) the same on both legs.
restart_replica 1
wait_volume_state 60 "$ctl" healthy
reply=$(ask "read $W $len $tmpdir/got")
[ "$reply" = "ok inline" ]
dd if="$tmpdir/got" of="$expected" bs="$len" seek=$(( W / len )) \
  conv=notrunc status=none
compare_legs "$expected" "$r0_uri" "$r1_uri"
