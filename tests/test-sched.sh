#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# sched=auto and sched=keep (common/replication/pure/sched.c), seen from
# the kernel: ps lists each thread's scheduling class (TS for
# SCHED_OTHER, B for SCHED_BATCH).  A fresh controller over two replicas
# serves fio at queue depth 1 and no thread of it may be SCHED_BATCH;
# under fio at queue depth 32 from two connections, its waiting threads
# must move to SCHED_BATCH.  A second controller with sched=keep, under
# the same load, must leave every thread alone.  Both loads are verified
# random writes, and at the end every leg equals the first.

source ./functions.sh
set -euo pipefail
set -x

requires fio --enghelp=nbd
requires ps -L -o cls= -p $$

MiB=1048576

# batch_threads PID: how many threads of PID are SCHED_BATCH.
batch_threads ()
{
  ps -L -o cls= -p "$1" | grep -c '^ *B$' || true
}

# fio_verified URI DEPTH JOBS: verified random writes, 8M per job.
fio_verified ()
{
  fio --name=w --ioengine=nbd "--uri=$1" --rw=randwrite --bs=4k \
      --size=8M --offset_increment=8M --numjobs="$3" --iodepth="$2" \
      --verify=crc32c --do_verify=1 --loops=4 --group_reporting
}

# watch_batch PID FILE: while fio runs, note the most SCHED_BATCH
# threads of PID seen at once in FILE.
watch_batch ()
{
  local most=0 n
  echo 0 >"$2"
  while :; do
    n=$(batch_threads "$1")
    if [ "$n" -gt "$most" ]; then
      most=$n
      echo "$most" >"$2"
    fi
    sleep 0.1
  done
}

start_replica 0 40M
start_replica 1 40M
start_replica 2 40M
start_replica 3 40M

# run_load NAME DEPTH JOBS: fio against controller NAME; prints the
# most SCHED_BATCH threads seen at once meanwhile.
run_load ()
{
  local uri_var=${1}_uri pid watcher most=$tmpdir/most-$1-$2
  pid=$(server_pid "$1")
  watch_batch "$pid" "$most" &
  watcher=$!
  fio_verified "${!uri_var}" "$2" "$3" >&2
  kill "$watcher"
  wait "$watcher" || true
  cat "$most"
}

start_controller auto "$PLUGIN" "$r0_uri" "$r1_uri" control="$tmpdir/auto.ctl"
wait_volume_state 30 "$tmpdir/auto.ctl" healthy
n=$(run_load auto 1 1)
echo "sched=auto, depth 1: at most $n threads SCHED_BATCH"
test "$n" -eq 0
n=$(run_load auto 32 2)
echo "sched=auto, depth 32x2: at most $n threads SCHED_BATCH"
test "$n" -ge 4

start_controller keep "$PLUGIN" "$r2_uri" "$r3_uri" control="$tmpdir/keep.ctl" \
                 sched=keep
wait_volume_state 30 "$tmpdir/keep.ctl" healthy
n=$(run_load keep 32 2)
echo "sched=keep, depth 32x2: at most $n threads SCHED_BATCH"
test "$n" -eq 0

# The oracle: both volumes healthy, their legs identical.
test "$(volume_state "$tmpdir/auto.ctl")" = healthy
test "$(volume_state "$tmpdir/keep.ctl")" = healthy
stop_controller auto
stop_controller keep
compare_legs_equal $(( 16 * MiB )) "$r0_uri" "$r1_uri"
compare_legs_equal $(( 16 * MiB )) "$r2_uri" "$r3_uri"
