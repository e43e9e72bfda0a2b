#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A slow link (net-functions.sh): three legs, leg 0 local, legs 1 and 2
# on TCP in hosts h1 and h2, and h2's link shaped by tbf to 24 Mbit/s
# (3 MiB/s) each way.  What it costs is printed, not asserted (the
# machine's load decides the figures):
#   1. fio random 4k writes at QD8 for 5 s with leg 2 in, then with leg
#      2 failed and h2 partitioned (the slow leg out, and kept out): IOPS
#      and latency of each, and the ratio.
#   2. 4 MiB more written while leg 2 is out, then the heal, and its resync
#      over the slow link with resync-rate=1M while fio writes again: the
#      resync's rate
#      (it must keep to the cap: at most twice it, over the whole
#      resync), the client's IOPS during it (it must get some: the
#      resync may not starve it), and after it the oracle: the three legs
#      are equal.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/net-functions.sh"

requires_nbdsh
requires_nbdinfo
requires fio --enghelp=nbd
requires python3 -c 'import json'
net_setup h1 h2

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))

# shape HOST RATE: tbf at RATE on HOST's link, both ways.
shape ()
{
  local k=$(( $(host_address "$1" | cut -d. -f3) ))
  in_netns "$(host_netns "$1")" tc qdisc add dev eth0 root \
    tbf rate "$2" burst 32kbit latency 400ms
  in_netns "$net_ctl" tc qdisc add dev "nr$$h$k" root \
    tbf rate "$2" burst 32kbit latency 400ms
}

# fio_writes NAME: 5 s of random 4k writes at QD8 over the first
# 4 MiB; prints "NAME: IOPS mean-latency-us p99-us" and fails on an
# error.
fio_writes ()
{
  fio --name="$1" --ioengine=nbd "--uri=$c_uri" --rw=randwrite --bs=4k \
    --iodepth=8 --size=4M --time_based --runtime=5 --norandommap \
    --output-format=json --output="$tmpdir/$1.json"
  python3 -c '
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
w = job["write"]
assert job["error"] == 0, job["error"]
print("%s: %.0f IOPS, mean %.0f us, p99 %.0f us" % (sys.argv[2], w["iops"],
      w["lat_ns"]["mean"] / 1e3,
      w["clat_ns"]["percentile"]["99.000000"] / 1e3))
' "$tmpdir/$1.json" "$1" | tee -a "$tmpdir/report"
}

# iops NAME: the IOPS of fio run NAME.
iops ()
{
  python3 -c '
import json, sys
print("%.0f" % json.load(open(sys.argv[1]))["jobs"][0]["write"]["iops"])
' "$tmpdir/$1.json"
}

start_replica 0
start_host_replica 1 h1 10809
start_host_replica 2 h2 10809
shape h2 24mbit
CONTROLLER_NETNS=$net_ctl start_controller c "$PLUGIN" \
  "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" timeout=10
wait_volume_state 60 "$ctl" healthy

# --- 1. The slow leg in, then out.
fio_writes slow-leg-in
partition h2
"$NBDREP" fail "$ctl" 2
wait_leg_state 10 "$ctl" 2 failed
fio_writes slow-leg-out
echo "slow leg in / out: $(python3 -c "print('%.2f' % ($(iops slow-leg-in) / max(1, $(iops slow-leg-out))))")x the IOPS" |
  tee -a "$tmpdir/report"

# --- 2. Its resync over the slow link, capped, under client writes.
"$NBDSH" -u "$c_uri" -c "
import os
h.pwrite(os.urandom(4 * $MiB), 32 * $MiB)
h.flush()
"
"$NBDREP" set "$ctl" resync-rate 1M
heal h2
wait_until 60 status_check "$ctl" 'leg(2)["state"] == "syncing"'
fio_writes during-resync
wait_volume_state 300 "$ctl" healthy
json=$(nbdrep_status_json "$ctl")
python3 -c '
import json, sys
r = json.loads(sys.argv[1])["legs"][2]["last_resync"]
rate = r["bytes"] / max(r["seconds"], 0.001)
print("resync over the slow link: %d bytes in %.1f s, %.2f MiB/s (cap 1 MiB/s)"
      % (r["bytes"], r["seconds"], rate / 2**20))
assert r["bytes"] >= 4 << 20, r
assert rate <= 2 << 20, "the resync ran at %.2f MiB/s, over twice its cap" % (rate / 2**20)
' "$json" | tee -a "$tmpdir/report"
test "$(iops during-resync)" -gt 0
compare_legs_equal "$("$NBDINFO" --size "$c_uri")" "$r0_uri" "$r1_uri" "$r2_uri"
cat "$tmpdir/report"
