#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync reads only from a leg that is uptodate now (DESIGN.md
# sections 7 and 13): when its source leaves uptodate while the resync
# runs, it stops before the next chunk and takes every chunk it still
# has to copy (and those it took from that source since its last
# known-good point) from another uptodate leg.  The defect: the resync
# kept copying from a source that had been failed, whose server still
# answers reads, and so overwrote on the target writes the failed
# source never got.
#
# Three 32 MiB file legs, leg 0 behind the fault filter; the volume is
# filled with random data (acknowledged).  `nbdrep resync CTL 2 --full`
# at resync-rate=4M (about 8 s for the volume) copies from leg 0, the
# lowest uptodate leg.  While leg 2 is syncing and its resync has not
# reached the second half of the volume, leg 0 stops being uptodate
# while its server still serves reads:
#
#  (a) r0 refuses every write and zero (EIO, always) and a client write
#      of 1 MiB near the END of the volume (not copied yet) is
#      acknowledged: it reached legs 1 and 2, leg 0 failed it and is
#      failed (and, the rule staying armed, cannot rejoin);
#  (b) `nbdrep fail CTL 0`, then the same rule is armed on r0 (the
#      monitor reconnects a failed leg after 1 s: an incremental resync
#      would hand leg 0 the new data before leg 2's copy gets there and
#      hide the defect), then a client write of 1 MiB near the end.
#
# In each: the status shows leg 0 failed (or stale) and leg 2 still
# syncing below the written range; the resync is then let run at full
# speed to the end (uptodate), the rule is cleared, leg 0 resyncs back
# and the volume is healthy.  The oracle: every uptodate leg and the
# controller hold exactly what was acknowledged -- leg 2 in particular
# holds the new data near the end (with the defect it holds leg 0's
# old data there).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
test -f "$FAULTINJECT" || _skip "the faultinject filter ($FAULTINJECT)"

MiB=1048576
ctl=$tmpdir/c.ctl
rules=$tmpdir/r0.rules
faults=$tmpdir/r0.faults
start_replica 0 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_replica 1 32M
start_replica 2 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5 resync-rate=4M
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$tmpdir/expected" "$c_uri"

# Fill the whole volume with random data (in 4 MiB writes, then a
# flush); the expected file gets it once it is acknowledged.
"$NBDSH" -u "$c_uri" -c "
import os
size = $size
data = os.urandom(size)
for off in range(0, size, 4 * $MiB):
    h.pwrite(data[off:off + 4 * $MiB], off)
h.flush()
with open('$tmpdir/expected', 'r+b') as f:
    f.write(data)
"
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# start_full_resync_of_leg2: start a full resync of leg 2
# (source: leg 0) and wait until it is syncing, has copied something
# and is still in the first half of the volume.
start_full_resync_of_leg2 ()
{
  "$NBDREP" set "$ctl" resync-rate 4M
  "$NBDREP" resync "$ctl" 2 --full
  wait_until 10 status_check "$ctl" "leg(2)['state'] == 'syncing' and
    leg(2)['resync'] is not None and leg(2)['resync']['done'] > 0"
  status_check "$ctl" "leg(2)['resync']['kind'] == 'full' and
    leg(2)['resync']['done'] < $size // 2 and
    leg(0)['state'] == 'uptodate' and leg(1)['state'] == 'uptodate'"
}

# finish_and_check TAIL: leg 0 is out and leg 2 has not copied the
# range written at TAIL yet; let the resync finish, clear the rules,
# wait for the volume to be healthy again and check the oracle.
finish_and_check ()
{
  status_check "$ctl" "leg(0)['state'] in ('failed', 'stale') and
    leg(1)['state'] == 'uptodate' and leg(2)['state'] == 'syncing' and
    leg(2)['resync'] is not None and leg(2)['resync']['done'] < $1 and
    s['volume']['state'] == 'degraded'"
  "$NBDREP" set "$ctl" resync-rate 0
  wait_leg_state 30 "$ctl" 2 uptodate
  status_check "$ctl" "leg(2)['last_resync']['kind'] == 'full' and
    leg(1)['state'] == 'uptodate'"
  # Leg 2 against what was acknowledged, before leg 0 comes back.
  compare_legs "$tmpdir/expected" "$c_uri" "$r1_uri" "$r2_uri"
  fault_clear "$rules"
  wait_leg_state 30 "$ctl" 0 uptodate
  wait_volume_state 30 "$ctl" healthy
  compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
}

# --- (a) leg 0 fails a client write while it is the resync's source.
start_full_resync_of_leg2
tail_a=$(( size - 2 * MiB ))
fault_arm "$rules" "id=w0 op=write,zero phase=refuse error=EIO count=0"
write_random "$c_uri" "$tmpdir/expected" "$tail_a" "$MiB"
fault_wait "$faults" w0 fire 5
status_check "$ctl" "leg(0)['state'] in ('failed', 'stale') and
  leg(0)['last_error'] is not None"
finish_and_check "$tail_a"

# --- (b) the operator fails leg 0 while it is the resync's source.
start_full_resync_of_leg2
tail_b=$(( size - MiB ))
"$NBDREP" fail "$ctl" 0
fault_arm "$rules" "id=w0b op=write,zero phase=refuse error=EIO count=0"
status_check "$ctl" "leg(0)['state'] == 'failed' and
  leg(0)['last_error'] == 'failed by the operator'"
write_random "$c_uri" "$tmpdir/expected" "$tail_b" "$MiB"
finish_and_check "$tail_b"
