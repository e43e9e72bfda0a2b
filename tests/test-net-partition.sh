#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A replica on another "host" (a network namespace, net-functions.sh)
# cut off by a silent partition: packets dropped both ways, no FIN, no
# reset.  Leg 0 is a local file replica, leg 1 a file replica on TCP in
# host h1 behind the faultinject filter; the controller runs in its own
# namespace with timeout=2.
#   0. Under fio (random writes with verify): h1 partitioned for 5 s
#      half-way through the writes, then healed.  fio sees no error, no
#      request of its waits more than a few timeouts (a bound on the
#      stall, not a measurement: the leg is failed after one timeout),
#      every block verifies, leg 1 comes back by itself and the legs are
#      equal.
#   1. A write held on h1's server when the partition starts (W1): the
#      client's write is acknowledged from leg 0 once leg 1 times out,
#      and W2 (newer data, same range) too.  W1 lands on h1 during the
#      partition; leg 1 stays out (neither uptodate nor syncing) through
#      it, and after the heal too until the server, which gets our FIN
#      only then, has closed the old connection.  Then the leg is
#      resynced incrementally: both legs hold W2.
#   2. The partition again, the leg idle: the next write fails it after
#      the timeout.  The operator says its server is gone (nbdrep resync
#      --server-restarted), so the controller reconnects into the black
#      hole: meanwhile client writes complete and nbdrep status answers
#      (no lock, control request or client request is held by a
#      connect that cannot finish).  After the heal the leg is back.
#   3. A reset from a firewall while the server holds a
#      write: W3 held on h1 for good, and the controller's namespace
#      rejects what it sends to h1 with a TCP reset, as a firewall
#      would; the leg times out and its connections end in resets.  A
#      reset proves nothing (the server still holds W3): the leg stays
#      out, also once the firewall lets everything through, and its
#      last_error asks for "nbdrep resync CTL 1 --server-restarted";
#      once h1's server has been killed and started again, that brings
#      it back, resynced.
# Before the fix (TCP aborts shut the socket down both ways) the late
# reply of W1 was answered with a reset and the leg never came back.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/net-functions.sh"

requires_nbdsh
requires_nbdinfo
requires fio --enghelp=nbd
requires python3 -c 'import json'
net_setup h1

ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
X=$(( 2 * 1024 * 1024 ))
len=$(( 64 * 1024 ))

# leg_out: leg 1 is neither uptodate nor syncing.
leg_out ()
{
  status_check "$ctl" 'leg(1)["state"] not in ("uptodate", "syncing")'
}

start_replica 0
start_host_replica 1 h1 10809 -- --filter="$FAULTINJECT" rules="$rules" \
  log="$faults"
CONTROLLER_NETNS=$net_ctl start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy

# --- 0. A partition under fio.
fio --name=partition --ioengine=nbd "--uri=$c_uri" --rw=randwrite \
  --bsrange=4k-64k --offset=16M --size=16M --rate=,2m --verify=crc32c \
  --do_verify=1 --output-format=json --output="$tmpdir/fio.json" &
fio_pid=$!
wait_until 30 status_check "$ctl" "leg(1)['bytes_written'] >= 8 << 20"
partition h1
wait_leg_state 10 "$ctl" 1 failed
sleep 5
heal h1
fio_rc=0
wait "$fio_pid" || fio_rc=$?
cat "$tmpdir/fio.json"
test "$fio_rc" -eq 0
python3 -c '
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
stall = job["write"]["clat_ns"]["max"] / 1e9
print("fio: error %d, wrote %d, verified %d, longest write %.2f s"
      % (job["error"], job["write"]["io_bytes"], job["read"]["io_bytes"], stall))
assert job["error"] == 0 and job["read"]["io_bytes"] == 16 << 20
assert stall < 12, "a write waited %.1f s with timeout=2" % stall
' "$tmpdir/fio.json"
wait_volume_state 90 "$ctl" healthy
compare_legs_equal "$("$NBDINFO" --size "$c_uri")" "$r0_uri" "$r1_uri"
new_expected "$expected" "$c_uri"
"$NBDCOPY" "$c_uri" "$expected"
write_random "$c_uri" "$expected" 0 "$(( 4 * 1024 * 1024 ))"

# --- 1. A partition with a write held on the far side.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=6"
write_random "$c_uri" "$expected" "$X" "$len" &     # W1
w1=$!
fault_wait "$faults" late fire 10
partition h1
wait "$w1"
wait_leg_state 10 "$ctl" 1 failed
write_random "$c_uri" "$expected" "$X" "$len"        # W2
while ! grep -q '^done late ' "$faults"; do
  leg_out
  sleep 0.2
done
for (( i = 0; i < 10; i++ )); do leg_out; sleep 0.2; done
heal h1
wait_volume_state 90 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
fault_clear "$rules"
status_check "$ctl" 'leg(1)["last_resync"]["kind"] == "incremental"'

# --- 2. Reconnecting into a black hole holds nothing.
partition h1
write_random "$c_uri" "$expected" "$X" "$len"
wait_leg_state 10 "$ctl" 1 failed
"$NBDREP" resync "$ctl" 1 --server-restarted
for (( i = 0; i < 4; i++ )); do
  rc=0
  timeout 10 "$NBDREP" status "$ctl" >/dev/null || rc=$?
  [ "$rc" -eq 3 ]                       # answered: degraded
  timeout 10 bash -c "$(declare -f write_random); NBDSH=$NBDSH
    write_random '$c_uri' '$expected' $(( X + (i + 1) * len )) $len"
  leg_out
  sleep 1
done
heal h1
wait_volume_state 90 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"

# --- 3. A firewall's reset, with a write held on the far side.
fault_arm "$rules" "id=stuck op=write range=$X-$(( X + len )) phase=hold secs=600"
write_random "$c_uri" "$expected" "$X" "$len" &     # W3
w3=$!
fault_wait "$faults" stuck fire 10
in_netns "$net_ctl" iptables -I OUTPUT -p tcp -d "$(host_address h1)" \
  -j REJECT --reject-with tcp-reset
wait "$w3"
wait_leg_state 10 "$ctl" 1 failed
sleep 1
in_netns "$net_ctl" iptables -F OUTPUT
for (( i = 0; i < 15; i++ )); do leg_out; sleep 0.2; done
json=$(nbdrep_status_json "$ctl")
grep -q -- '--server-restarted' <<<"$json" || {
  echo "$0: leg 1's last_error does not say how to bring it back" >&2
  exit 1
}
kill_replica 1
fault_clear "$rules"
restart_replica 1
for (( i = 0; i < 10; i++ )); do leg_out; sleep 0.2; done
"$NBDREP" resync "$ctl" 1 --server-restarted
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
