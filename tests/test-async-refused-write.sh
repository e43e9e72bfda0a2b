#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A write that the volume does not keep must not stay on an
# asynchronous leg either: once the leg has caught up (replicating,
# lag_bytes 0 after a flush) it must equal the volume (DESIGN.md
# section 14: the volume's state at some flush, plus part of the next
# epoch).  Found by the fault campaign (torture.py with its
# asynchronous leg: TORTURE_SEED=1001, round 23, "async-differs").
#
# Two synchronous legs behind the faultinject filter and an
# asynchronous leg.  Known data is written and flushed; then both
# synchronous legs refuse one write, each phase at its own offset:
#   1. with EINVAL: a common refusal (section 13), the client gets
#      EINVAL, no leg fails, the volume keeps the old data;
#   2. with EIO: every leg erred, one is kept (judge.c, keep_one_leg)
#      and the other failed and resynced from it, the client gets EIO,
#      the volume keeps the old data.
# After each, once the asynchronous leg has caught up, every leg must
# equal the known data.  Both phases run; the test fails if either
# leaves the asynchronous leg different.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected

start_replica 0 32M -- --filter="$FAULTINJECT" rules="$tmpdir/r0.rules" \
  log="$tmpdir/r0.faults"
start_replica 1 32M -- --filter="$FAULTINJECT" rules="$tmpdir/r1.rules" \
  log="$tmpdir/r1.faults"
start_replica 2 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  timeout=2 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# caught_up: the volume healthy, the asynchronous leg replicating with
# nothing queued or unflushed after a flush.
caught_up ()
{
  wait_volume_state 60 "$ctl" healthy
  wait_until 60 status_check "$ctl" \
    'leg(2)["async"]["state"] == "replicating" and leg(2)["resync"] is None'
  "$NBDSH" -u "$c_uri" -c 'h.flush()'
  wait_until 60 status_check "$ctl" \
    'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0 and leg(2)["async"]["buffer_used"] == 0'
}

# phase ID ERRNO OFFSET: both synchronous legs refuse the write of 64K of
# 0x45 at OFFSET with ERRNO (the client must see it); then every leg
# must equal the expected data.
rc=0
phase ()
{
  local i
  write_random "$c_uri" "$expected" "$3" 65536
  for i in 0 1; do
    fault_arm "$tmpdir/r$i.rules" \
      "id=$1 op=write range=0-16M phase=refuse error=$2 count=1"
  done
  expect_error "$c_uri" "$2" "h.pwrite(b'E' * 65536, $3)"
  for i in 0 1; do
    fault_wait "$tmpdir/r$i.faults" "$1" fire 10
    fault_clear "$tmpdir/r$i.rules"
  done
  caught_up
  "$NBDSH" -u "$r2_uri" -c "print('$1: the asynchronous leg at $3 holds', h.pread(8, $3))"
  if ! compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"; then
    echo "$0: phase $1: the legs differ after a write refused with $2" >&2
    rc=1
    # Overwrite the range through the controller, so that the next
    # phase starts with equal legs.
    write_random "$c_uri" "$expected" "$3" 65536
    caught_up
  fi
}

phase einval EINVAL 1048576
phase eio EIO 4194304
exit "$rc"
