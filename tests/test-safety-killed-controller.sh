#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A controller killed with a write in flight: that write must not land
# after a new controller has started (drain.c, "Connections we no
# longer hold").
#
# Two file legs on Unix sockets, leg 1 behind the faultinject filter,
# which holds one write to X for 8 s in a sleep that the end of its
# connection does not cut short, then applies it:
#   1. W1 to X from a client: held on leg 1;
#   2. the controller is killed (SIGKILL) while W1 is held, and started
#      again at once (wait=30): leg 1's server still has the dead
#      controller's connection open, so the new controller does not open
#      leg 1 until that connection is closed, and does not take the
#      election without it (its one other member is not enough to start
#      with the default quorum: every member is needed);
#   3. once W1 has landed the server closes that connection, the
#      controller starts (crash recovery over both legs), and a client
#      writes W2 to X;
#   4. both legs hold W2, and the volume reads W2.
# Before the fix the new controller started at once, recovered, took
# W2, and then W1 landed on leg 1 alone: two uptodate legs differed.
#
# With LEGS=tcp (test-tcp-killed-controller.sh) the legs are on
# loopback TCP: the server's end of the dead controller's connection is
# out of sight there, but the controller's own end stays in this
# kernel, held by no process, in FIN_WAIT2 until the server closes
# (drain.c, drain_tcp_orphans), and the new controller closes leg 1
# again right after opening it, before any request.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
X=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

port0=() port1=()
if [ "${LEGS:-unix}" = tcp ]; then
  port0=(--port "$(free_port)") port1=(--port "$(free_port)")
fi
start_replica 0 "${port0[@]}"
start_replica 1 "${port1[@]}" -- --filter="$FAULTINJECT" rules="$rules" \
  log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" wait=30
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" "$X" "$len"

# 1, 2.  W1 held on leg 1; the controller killed under it.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=8"
"$NBDSH" -u "$c_uri" -c "
import os
h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(os.urandom($len))), $X)
h.poll(100)
" &
client=$!
fault_wait "$faults" late fire 10
kill_server c
wait "$client" || :                     # W1 was never acknowledged
fault_clear "$rules"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" wait=30

# 3, 4.  (Before the fix W2 went in while W1 was still held.)
wait_volume_state 30 "$ctl" healthy
write_random "$c_uri" "$expected" "$X" "$len"
fault_wait "$faults" late done 30
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
grep -Eq 'connections? open whose client has gone' "$tmpdir/c.log"
