#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A controller killed while the asynchronous leg's server holds a write:
# that write must not land on the leg after a new controller has
# caught it up and reports it replicating (DESIGN.md sections 13, 14;
# claim: a crash costs the asynchronous leg only an incremental resync
# and it then equals the synchronous legs).
#
# Two file legs and an asynchronous one behind the faultinject filter,
# which holds the first write to X for 8 s in a sleep the end of its
# connection does not cut short, then applies it:
#   1. W1 to X (acknowledged by the synchronous legs), flushed; the
#      asynchronous leg's sender sends it and it is held;
#   2. the controller is killed (SIGKILL) and started again at once;
#   3. once the volume is healthy, W2 to X (newer data) and a flush;
#   4. after W1 has landed (the filter logs "done"), and the leg reports
#      replicating with lag_bytes 0 after a flush, every leg holds W2,
#      and the resync after the crash was incremental.
# With LEGS=tcp (test-async-tcp-late-write.sh) the legs are on loopback
# TCP (drain.c, drain_tcp_orphans).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected
X=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

port0=() port1=() port2=()
if [ "${LEGS:-unix}" = tcp ]; then
  port0=(--port "$(free_port)") port1=(--port "$(free_port)")
  port2=(--port "$(free_port)")
fi
start_replica 0 32M "${port0[@]}"
start_replica 1 32M "${port1[@]}"
start_replica 2 32M "${port2[@]}" -- --filter="$FAULTINJECT" rules="$rules" \
  log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" wait=30
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")
write_random "$c_uri" "$expected" 0 "$len"

# 1, 2.  W1 held on the asynchronous leg; the controller killed under it.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=8 count=1"
write_random "$c_uri" "$expected" "$X" "$len"
fault_wait "$faults" late fire 10
kill_controller c
fault_clear "$rules"
restart_controller c

# 3.  W2 over W1 as soon as the volume takes writes.
wait_volume_state 30 "$ctl" healthy
write_random "$c_uri" "$expected" "$X" "$len"
# The interleaving: W2 was acknowledged while W1 was still held.
! _fault_logged "$faults" done late

# 4.
fault_wait "$faults" late done 30
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "incremental"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
if [ "${LEGS:-unix}" = unix ]; then
  grep -Eq 'connections? open whose client has gone' "$tmpdir/c.log"
fi
