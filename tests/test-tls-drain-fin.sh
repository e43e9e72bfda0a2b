#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# TLS legs on TCP: an aborted TLS connection counts as drained only if
# the server's FIN had come before the controller shut it down
# (drain.c: only libnbd can read a TLS connection, so it is shut down
# both ways; CLOSE_WAIT then, the server closed first).  Two file legs
# with pre-shared keys, leg 1 on TCP (loopback) behind the faultinject
# filter, connections=1 (one socket per leg, so which end closed first
# is the test's to choose), timeout=2.
#   A. The controller aborts first: a write W1 held 4 s on replica 1
#      times the leg out; W2, newer, is acknowledged from leg 0.  The
#      leg stays out while W1 is held, and still once W1 has landed and
#      the server is done with the connection (whatever it sent after
#      our shutdown met a closed end: nothing on that socket shows the
#      server's close); its last_error asks for --server-restarted,
#      which brings it back, resynced: both legs hold W2 (a leg counted
#      drained too early is resynced before W1 lands, then holds W1).
#   B. The server closes first: the filter shuts down its sockets (the
#      server keeps running) under a write W3.  The leg fails and comes
#      back by itself, resynced, with no restart and no operator's word.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/tls-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

psk=$tmpdir/keys.psk
make_psk "$psk" alice
ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
X=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))
port=$(free_port)

start_replica 0 16M -- --tls=require --tls-psk="$psk"
start_replica 1 16M --port "$port" -- --tls=require --tls-psk="$psk" \
  --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  tls=require tls-psk="$psk" tls-username=alice connections=1 timeout=2
wait_volume_state 30 "$ctl" healthy
test "$(tls_connections "$tmpdir/c.log")" -ge 2
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" "$X" "$len"
legs=("$c_uri" "nbds+unix://alice@/?socket=$tmpdir/r0.sock&tls-psk-file=$psk"
      "nbds://alice@localhost:$port/?tls-psk-file=$psk")

leg1_out () { status_check "$ctl" 'leg(1)["state"] not in ("uptodate", "syncing")'; }
leg1_asks () {
  status_check "$ctl" '"--server-restarted" in (leg(1)["last_error"] or "")'
}

# --- A. The controller aborts first.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=4 count=1"
write_random "$c_uri" "$expected" "$X" "$len"        # W1
fault_wait "$faults" late fire 5
wait_leg_state 10 "$ctl" 1 failed
write_random "$c_uri" "$expected" "$X" "$len"        # W2
while ! grep -q '^done late ' "$faults"; do
  leg1_out
  sleep 0.2
done
# W1 has landed and the server closes its end; the monitor looks again
# every 200 ms.
for (( i = 0; i < 10; i++ )); do leg1_out; sleep 0.2; done
leg1_asks
"$NBDREP" resync "$ctl" 1 --server-restarted
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "${legs[@]}"

# --- B. The server closes first.
fault_arm "$rules" "id=drop op=write range=$X-$(( X + len )) phase=drop count=1"
write_random "$c_uri" "$expected" "$X" "$len"        # W3
fault_wait "$faults" drop fire 5
wait_leg_state 10 "$ctl" 1 failed
wait_volume_state 10 "$ctl" healthy
compare_legs "$expected" "${legs[@]}"
grep -q 'shut down [1-9][0-9]* connected sockets' "$tmpdir/r1.log"
