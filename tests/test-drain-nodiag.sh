#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# On a kernel that cannot say when an aborted Unix connection's server
# closed it (no unix_diag), a failed leg stays out and says why
# (drain.c), and the controller warns at start.
#
# Two file legs; the controller preloads tests/nodiag.c, which makes
# sock_diag sockets fail.  Leg 1's replica is killed under a write
# (its connection dies abruptly) and started again: the leg must stay
# failed, its last_error naming unix_diag, while writes go on on leg 0.
# A controller started again without the preload takes the leg back and
# resyncs it: both legs then hold every acknowledged write.
# Before the message was added, last_error said only "waiting Ns so far"
# for ever and nothing named the module.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
[ -f "$NODIAG" ] || { echo "$0: $NODIAG not built"; exit 77; }

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
len=$(( 64 * 1024 ))

start_replica 0
start_replica 1
CONTROLLER_PRELOAD=$NODIAG \
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2
grep -q 'modprobe unix_diag' "$tmpdir/c.log"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$len"

# Leg 1's server dies with the connection open: an abrupt end.
kill_replica 1
write_random "$c_uri" "$expected" "$len" "$len"
wait_leg_state 30 "$ctl" 1 failed
restart_replica 1
wait_until 30 eval 'nbdrep_status_json "$ctl" | grep -q "modprobe unix_diag"'
write_random "$c_uri" "$expected" $(( 2 * len )) "$len"
sleep 3
status_check "$ctl" 'leg(1)["state"] == "failed"'

# Without the preload the kernel answers: the leg comes back.
stop_controller c
restart_controller c
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
