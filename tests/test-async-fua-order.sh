#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg must never hold a write made after a FUA write
# was acknowledged without that FUA write (DESIGN.md section 14: "always
# crash-consistent").  A FUA write is durable once acknowledged (NBD
# protocol), so no crash of the volume can lose it and keep a write the
# client issued only after the acknowledgement; a filesystem's journal
# relies on it (jbd2 writes its commit block with FUA, then the
# transaction's blocks to their home locations with no flush between;
# the built-in ublk frontend declares a volatile cache with FUA).
#
# Two file legs and an asynchronous one behind the faultinject filter:
#   1. W0 (at 16M) is sent to the asynchronous leg and held there 2 s,
#      so that its sender is busy;
#   2. meanwhile W1 (at 1M) with FUA, acknowledged by the synchronous
#      legs, then W2 (at 8M); no flush.  Both are queued while the sender
#      waits for W0, so they go in one batch; the filter holds W1 6 s;
#   3. as soon as the leg's file holds W2 it must hold W1 as well
#      (landed_in_order reads W2's range, then W1's; status must not
#      call the leg consistent otherwise);
#   4. the recovery site takes over at that moment: the controller and
#      the leg's server are killed (SIGKILL), the synchronous legs lost;
#      prefer=2 force=true promotes the leg, and the volume served from
#      it must hold W1, since it holds W2;
#   5. W0, W1 and W2 were all on the leg when it took over: every
#      acknowledged write reads back from the promoted volume.

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
  async-full=block timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 1, 2.
fault_arm "$rules" \
  "id=busy op=write range=$(( 16 * M ))-$(( 16 * M + len )) phase=hold secs=2 count=1" \
  "id=fua op=write range=$M-$(( M + len )) phase=hold secs=6 count=1"
"$NBDSH" -u "$c_uri" -c "
import time
def put(seed, off, flags=0):
    buf = bytes([seed]) * $len
    h.pwrite(buf, off, flags)
    with open('$expected', 'r+b') as f:
        f.seek(off)
        f.write(buf)
put(0x30, 16 * $M)
time.sleep(0.3)
put(0x31, $M, nbd.CMD_FLAG_FUA)
put(0x32, 8 * $M)
"
fault_wait "$faults" busy fire 10

# 3.  The leg's own file, as a crash or a failover would find it, the
# moment W2 is there.
rc=0
landed_in_order "$tmpdir/r2.img" $len $(( 8 * M )) 0x32 $M 0x31 || rc=$?
[ $rc -ne 2 ]
consistent=$(nbdrep_status_get "$ctl" \
  'next(str(l["async"]["consistent"]) + " " + l["async"]["state"] for l in s["legs"] if l["index"] == 2)')
echo "status when W2 landed: $consistent"
_fault_logged "$faults" fire fua
copy_ok=true
if [ $rc -ne 0 ]; then
  echo "$0: the asynchronous leg holds W2, issued after the FUA write W1" \
       "was acknowledged, but not W1: no crash state of the volume" \
       "(status: $consistent)"
  copy_ok=false
fi

# 4.  Nothing is left to land: the leg's server dies with W1 held
# (the filter holds a write before it applies it).
kill_controller c
kill_replica 2
stop_replica 0
stop_replica 1
fault_clear "$rules"
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" prefer=2 force=true wait=2
grep 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
"$NBDSH" -u "$c_uri" -c "
w1 = h.pread($len, $M)
w2 = h.pread($len, 8 * $M)
assert w2 == bytes([0x32]) * $len, 'W2 is not on the promoted leg'
assert w1 == bytes([0x31]) * $len, \\
    'after the failover the volume holds W2 but not the FUA write W1 ' \\
    'acknowledged before W2 was issued'
"

# 5.  W0, W1 and W2 were all on the leg when it took over (W0 before the
# batch, W1 before W2): every acknowledged write reads back.
compare_legs "$expected" "$c_uri" "$r2_uri"
$copy_ok
