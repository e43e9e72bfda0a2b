#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A controller killed with a write in flight on a TCP leg: that write
# must not land after a new controller on the same host has started
# (drain.c, drain_tcp_orphans).  test-safety-killed-controller.sh is the
# same on Unix sockets.
#
# Two file legs on loopback TCP, leg 1 behind the faultinject filter,
# which holds one write to X for 8 s in a sleep that the end of its
# connection does not cut short, then applies it:
#   1. W1 to X from a client: held on leg 1;
#   2. the controller is killed (SIGKILL) while W1 is held, and started
#      again at once (wait=30).  The dead controller's socket to leg 1's
#      server stays in this host's kernel, held by no process, in
#      FIN_WAIT2 until the server closes its end, which it does once W1
#      has landed: meanwhile the new controller opens leg 1, sees that
#      socket, and closes leg 1 again before any request, so the
#      election waits (every member is needed with the default quorum);
#   3. the controller starts once W1 has landed, and a client writes W2
#      to X;
#   4. both legs hold W2, and the volume reads W2.
# Before drain_tcp_orphans the new controller started at once, took W2,
# and then W1 landed on leg 1 alone: two uptodate legs differed.

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

start_replica 0 --port "$(free_port)"
start_replica 1 --port "$(free_port)" -- --filter="$FAULTINJECT" \
  rules="$rules" log="$faults"
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

# 3, 4.
wait_volume_state 30 "$ctl" healthy
write_random "$c_uri" "$expected" "$X" "$len"
fault_wait "$faults" late done 30
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
grep -q 'connection.* open whose client has gone' "$tmpdir/c.log"
