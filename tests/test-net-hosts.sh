#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Three legs, two of them on other "hosts" (network namespaces,
# net-functions.sh) over TCP, quorum=majority, timeout=2; the
# controller in its own namespace.
#   1. Both far hosts partitioned (silently: packets dropped both ways):
#      a write fails with EIO once they time out (not a hang), the volume
#      turns readonly, reads go on from leg 0.  After the heal both legs
#      drain, resync and return, and the volume takes writes again with
#      no operator action.
#   2. The controller restarted while h1 is partitioned: with two of the
#      three members reachable (quorum 2 needs M - Q + 1 = 2) it starts
#      degraded, takes writes on legs 0 and 2, and leg 1 rejoins after
#      the heal, resynced incrementally.
#   3. Host h2 replaced: its server killed, its namespace torn down and
#      made again with a blank disk: the leg is rebuilt in full, and
#      sparsely (the copy skips what reads as zeroes).
# The oracle after each: every acknowledged write reads back from the
# volume and from every leg.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/net-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
net_setup h1 h2

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

# start: the controller, in its namespace.
start ()
{
  CONTROLLER_NETNS=$net_ctl start_controller c "$PLUGIN" \
    "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" timeout=2 \
    quorum=majority wait=30
}

# check_all: the oracle, on the volume and the three legs.
check_all ()
{
  compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
}

start_replica 0
start_host_replica 1 h1 10809
start_host_replica 2 h2 10809
start
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$(( 4 * MiB ))"

# --- 1. Two of three partitioned.
partition h1
partition h2
# The write rewrites what is there: whether or not it landed on leg 0
# before it failed, the oracle holds.
timeout 60 "$NBDSH" -u "$c_uri" -c "
with open('$expected', 'rb') as f:
    f.seek($MiB)
    buf = f.read($len)
try:
    h.pwrite(buf, $MiB)
    h.flush()
except nbd.Error as e:
    assert e.errno == 'EIO' or e.errno == 5, e
else:
    raise AssertionError('a write with 1 of 3 legs and quorum 2 succeeded')
"
wait_volume_state 10 "$ctl" readonly
timeout 30 "$NBDSH" -u "$c_uri" -c "
with open('$expected', 'rb') as f:
    want = f.read(4 * $MiB)
assert h.pread(4 * $MiB, 0) == want, 'reads differ while readonly'
"
heal h1
heal h2
wait_volume_state 120 "$ctl" healthy
write_random "$c_uri" "$expected" "$(( 2 * MiB ))" "$len"
check_all

# --- 2. Restarted with one host partitioned.
stop_server c
partition h1
start
wait_volume_state 30 "$ctl" degraded
status_check "$ctl" 'leg(0)["state"] == "uptodate" and leg(2)["state"] == "uptodate"'
write_random "$c_uri" "$expected" "$(( 3 * MiB ))" "$len"
heal h1
wait_volume_state 120 "$ctl" healthy
status_check "$ctl" 'leg(1)["last_resync"]["kind"] == "incremental"'
check_all

# --- 3. Host h2 replaced, with a blank disk.
kill_replica 2
wait_leg_state 30 "$ctl" 2 failed
net_recreate h2
rm -f "$tmpdir/r2.img"
restart_replica 2
wait_volume_state 120 "$ctl" healthy
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "full"'
check_all
# Written: about 4.2 MiB of 64; a rebuild that wrote every byte would
# allocate it all.
allocated=$(du -k "$tmpdir/r2.img" | cut -f1)
if [ "$allocated" -gt $(( 16 * 1024 )) ]; then
  echo "$0: the rebuilt leg allocates $allocated KiB: not sparse" >&2
  exit 1
fi
