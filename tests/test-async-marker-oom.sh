#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg whose epoch marker cannot be had at a client
# flush (out of memory) must not merge that epoch with the next one:
# a write the client issued after the flush returned could then land
# on the leg before a write the flush made durable, a state no crash of
# the volume leaves (DESIGN.md section 14: "always crash-consistent").
# The leg falls behind instead (async.c: async_cut_epochs).
# -D replicate.async_marker_fail=1 makes every marker fail.
#
# Two file legs and an asynchronous one behind the faultinject filter:
#   1. W0 (at 16M) is sent to the asynchronous leg and held there 2 s,
#      so that its sender is busy;
#   2. meanwhile W1 (at 1M), a client flush, then W2 (at 8M): W1 is
#      queued before the flush, W2 after it; the filter holds the first
#      write to W1's range 6 s;
#   3. as soon as the leg's file holds W2 it must hold W1 as well, or
#      the leg must be catching up (not consistent: then a failover
#      refuses it);
#   4. the recovery site takes over at that moment: the controller and
#      the leg's server are killed (SIGKILL), the synchronous legs lost;
#      prefer=2 force=true either refuses the leg (caught catching up)
#      or serves a volume that holds W1, since it holds W2;
#   5. the synchronous legs come back (rebuilt from the promoted leg
#      after a failover): every acknowledged write reads back.

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
M=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-full=block timeout=30 control="$ctl" -D replicate.async_marker_fail=1
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 1, 2.
fault_arm "$rules" \
  "id=busy op=write range=$(( 16 * M ))-$(( 16 * M + len )) phase=hold secs=2 count=1" \
  "id=w1 op=write range=$M-$(( M + len )) phase=hold secs=6 count=1"
"$NBDSH" -u "$c_uri" -c "
import time
def put(seed, off):
    buf = bytes([seed]) * $len
    h.pwrite(buf, off)
    with open('$expected', 'r+b') as f:
        f.seek(off)
        f.write(buf)
put(0x40, 16 * $M)
time.sleep(0.3)
put(0x41, $M)
h.flush()
put(0x42, 8 * $M)
"
fault_wait "$faults" busy fire 10

# 3.  The leg's own file, as a crash or a failover would find it, the
# moment W2 is there.
rc=0
landed_in_order "$tmpdir/r2.img" $len $(( 8 * M )) 0x42 $M 0x41 40 || rc=$?
[ $rc -ne 2 ]
state=$(nbdrep_status_get "$ctl" \
  'next(str(l["async"]["consistent"]) + " " + l["async"]["state"] + " " + str(l["async"]["pull_aheads"]) for l in s["legs"] if l["index"] == 2)')
echo "status when W2 landed (consistent, state, pull-aheads): $state"
w1_with_w2=true
[ $rc -eq 0 ] || w1_with_w2=false

# 4.  Nothing is left to land: the leg's server dies as it is.
kill_controller c
kill_replica 2
stop_replica 0
stop_replica 1
fault_clear "$rules"
restart_replica 2
if start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
     control="$ctl" prefer=2 force=true wait=2; then
  grep 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
  "$NBDSH" -u "$c_uri" -c "
w1 = h.pread($len, $M)
w2 = h.pread($len, 8 * $M)
assert w2 == bytes([0x42]) * $len, 'W2 is not on the promoted leg'
assert w1 == bytes([0x41]) * $len, \\
    'after the failover the volume holds W2 but not W1, which the ' \\
    'client flushed before it issued W2 (leg status when W2 landed: $state)'
"
  stop_controller c
  # The returning synchronous legs are rebuilt from the promoted one
  # only under the same prefer= (a failover's remedy).
  again=(prefer=2 force=true)
else
  # Refused: only a leg caught catching up may be.
  ! $w1_with_w2
  grep -i 'inconsistent' "$tmpdir/c.log"
  again=()
fi

# 5.
restart_replica 0
restart_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" "${again[@]}"
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
