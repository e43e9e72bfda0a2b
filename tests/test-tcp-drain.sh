#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Legs on TCP whose connections end abruptly come back, and only once
# nothing sent on the old connections can land (drain.c; the Unix-socket
# cases are test-safety-late-write.sh and test-fault-*).  Two file legs,
# leg 1 on TCP (loopback) behind the faultinject filter, timeout=2.
#   A. Replica 1 killed and restarted: its kernel closed the sockets
#      (FIN), so the leg is back and resynced at once.
#   B. A write held 10 s on replica 1 (W1): the leg times out; W2, newer,
#      is acknowledged from leg 0.  Until W1 has landed, leg 1 is neither
#      uptodate nor syncing (its last_error says it waits); then the
#      server's late reply is received, it closes the connection, and
#      the leg is resynced: both legs hold W2.
# (A reset, which proves nothing, is test-net-partition.sh's: a
# firewall's reset can be made only in a namespace of the test's own.)
# Before the fix, TCP legs never came back from A or B (a socket that
# had been shut down both ways was answered with a reset by the late
# reply, or its TIME_WAIT read as CLOSE: never "drained").

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
port=$(free_port)

# last_error_of LEG: leg LEG's last_error.
last_error_of ()
{
  nbdrep_status_json "$ctl" | python3 -c '
import json, sys
print(json.load(sys.stdin)["legs"][int(sys.argv[1])]["last_error"] or "")
' "$1"
}

start_replica 0
start_replica 1 --port "$port" -- --filter="$FAULTINJECT" rules="$rules" \
  log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" "$X" "$len"

# --- A. Killed and restarted.
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" 0 "$len"
restart_replica 1
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"

# --- B. A late write.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=10"
write_random "$c_uri" "$expected" "$X" "$len"        # W1
fault_wait "$faults" late fire 5
wait_leg_state 10 "$ctl" 1 failed
write_random "$c_uri" "$expected" "$X" "$len"        # W2
saw_wait=
while ! grep -q '^done late ' "$faults"; do
  status_check "$ctl" 'leg(1)["state"] not in ("uptodate", "syncing")'
  case $(last_error_of 1) in *"to close"*) saw_wait=1 ;; esac
  sleep 0.2
done
[ -n "$saw_wait" ] || {
  echo "$0: leg 1's last_error never said it waits for its old connection" >&2
  exit 1
}
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
