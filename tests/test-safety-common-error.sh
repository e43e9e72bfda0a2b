#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An error that every leg returns alike (DESIGN.md sections 4 and 13).
# Only a refusal of the request itself (EINVAL, EPERM, ENOTSUP: no leg
# touched its data) may be "common": it goes to the client and fails
# no leg.  A data-path error (EIO, ENOSPC ...) is never common: a leg
# that failed a write may or may not hold it, so when every leg failed
# it all but one of them (the lowest uptodate one, leg 0) are failed
# and resync from the one kept, and the range reads the same on every
# uptodate leg again.  The defect: such an error failed no leg, the
# volume stayed healthy and the legs differed over the range.
#
# Two 32 MiB file legs, both behind the fault filter, 16 MiB of random
# data written (acknowledged).  Each variant has its own range, written
# by one client request that both legs fail:
#
#  (1) EIO: r0 applies the write and reports EIO (apply-error, once),
#      r1 refuses it with EIO (and any write to the range while armed,
#      so that leg 1 cannot be uptodate again before the status right
#      after the error has been read): the client gets EIO; right after
#      it leg 1 is failed for that error (the generation is bumped, only
#      leg 0 is uptodate); once the rules are cleared leg 1 resyncs back
#      from leg 0;
#  (2) ENOSPC, the same way: the client gets ENOSPC, leg 1 is failed;
#  (3) a refusal alike: both refuse the write with EINVAL: the client
#      gets EINVAL, no leg is failed, the generation is unchanged and
#      the volume stays healthy;
#  (4) a flush that both legs fail with EIO (every flush while armed,
#      so the engine's own flushes cannot use up the rule): after a
#      write the client acknowledged, the client's flush gets EIO and
#      leg 1 is failed, leg 0 stays uptodate.
#
# After each variant the rules are cleared and the volume must become
# healthy; then the oracle: the range of the failed write reads the
# same on both replicas (read directly, not through the controller;
# its content may be old or new), and with that range taken as it is,
# both legs and the controller hold exactly what was acknowledged.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
test -f "$FAULTINJECT" || _skip "the faultinject filter ($FAULTINJECT)"

KiB=1024
MiB=1048576
ctl=$tmpdir/c.ctl
for i in 0 1; do
  start_replica "$i" 32M -- --filter="$FAULTINJECT" \
    rules="$tmpdir/r$i.rules" log="$tmpdir/r$i.faults"
done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
for (( off = 0; off < 16 * MiB; off += 4 * MiB )); do
  write_random "$c_uri" "$tmpdir/expected" "$off" $(( 4 * MiB ))
done
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"

# generation: print the volume's generation counter.
generation ()
{
  nbdrep_status_get "$ctl" 's["volume"]["generation"]'
}

# settle_range OFFSET LENGTH: the LENGTH bytes at OFFSET, which a write
# that failed may or may not have changed, must be the same on both
# replicas (each read directly); they go into the expected file as
# they are.
settle_range ()
{
  "$NBDSH" -c "
def read(uri):
    g = nbd.NBD()
    g.connect_uri(uri)
    data = g.pread($2, $1)
    g.shutdown()
    return data
a = read('$r0_uri')
b = read('$r1_uri')
if a != b:
    first = next(i for i in range($2) if a[i] != b[i])
    raise SystemExit('legs 0 and 1 differ over [%d, %d), first at %d'
                     % ($1, $1 + $2, $1 + first))
with open('$tmpdir/expected', 'r+b') as f:
    f.seek($1)
    f.write(a)
"
}

# back_to_healthy: clear the rules of both replicas, wait for the
# volume to be healthy again.
back_to_healthy ()
{
  fault_clear "$tmpdir/r0.rules"
  fault_clear "$tmpdir/r1.rules"
  wait_leg_state 30 "$ctl" 1 uptodate
  wait_volume_state 30 "$ctl" healthy
}

# snapshot_check FILE EXPR: status_check on the status JSON saved in
# FILE (by nbdrep_status_json) rather than on the current one.
snapshot_check ()
{
  status_json_check "$2" <"$1"
}

# data_path_error ID ERRNO OFFSET STRERROR: a write of 256 KiB at
# OFFSET that r0 applies and fails with ERRNO (once), and r1 refuses
# with ERRNO (ERRNO's message is STRERROR).  r1's rule stays armed
# (count=0) until the end of the checks of the error, so that leg 1,
# once failed, cannot be uptodate again before they are done: its
# resync must write the range.
data_path_error ()
{
  local id=$1 err=$2 off=$3 what=$4 len=$(( 256 * KiB )) gen
  local range=$off-$(( off + len ))
  gen=$(generation)
  fault_arm "$tmpdir/r0.rules" \
    "id=$id-0 op=write range=$range phase=apply-error error=$err"
  fault_arm "$tmpdir/r1.rules" \
    "id=$id-1 op=write range=$range phase=refuse error=$err count=0"
  expect_error "$c_uri" "$err" "h.pwrite(bytes([0x5a]) * $len, $off)"
  nbdrep_status_json "$ctl" >"$tmpdir/$id.json"
  fault_wait "$tmpdir/r0.faults" "$id-0" done 5
  fault_wait "$tmpdir/r1.faults" "$id-1" fire 5
  back_to_healthy
  # The volume is healthy again: the range must read the same on both
  # legs (with the defect leg 0 holds the write and leg 1 does not).
  settle_range "$off" "$len"
  # Right after the error, leg 1 was failed for it (the generation
  # bumped before the client got the error) and leg 0 was kept.
  snapshot_check "$tmpdir/$id.json" "leg(0)['state'] == 'uptodate' and
    leg(1)['state'] != 'uptodate' and
    leg(1)['last_error'] == 'write failed: $what' and
    s['volume']['generation'] > $gen and s['volume']['uptodate'] == 1"
  grep -F "leg 1 ($r1_uri) failed: write failed: $what" "$tmpdir/c.log"
  # Leg 1 came back by resync from leg 0.
  status_check "$ctl" "leg(1)['last_resync'] is not None and
    leg(0)['last_resync'] is None"
  compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
}

# --- (1) EIO alike, (2) ENOSPC alike.
data_path_error eio EIO $(( 20 * MiB )) 'Input/output error'
data_path_error nospc ENOSPC $(( 22 * MiB )) 'No space left on device'

# --- (3) A refusal alike: nobody fails.
off=$(( 24 * MiB ))
len=$(( 256 * KiB ))
gen=$(generation)
fault_arm "$tmpdir/r0.rules" \
  "id=inval-0 op=write range=$off-$(( off + len )) phase=refuse error=EINVAL"
fault_arm "$tmpdir/r1.rules" \
  "id=inval-1 op=write range=$off-$(( off + len )) phase=refuse error=EINVAL"
expect_error "$c_uri" EINVAL "h.pwrite(bytes([0xa5]) * $len, $off)"
fault_wait "$tmpdir/r0.faults" inval-0 fire 5
fault_wait "$tmpdir/r1.faults" inval-1 fire 5
status_check "$ctl" "leg(0)['state'] == 'uptodate' and
  leg(1)['state'] == 'uptodate' and s['volume']['state'] == 'healthy' and
  s['volume']['generation'] == $gen"
fault_clear "$tmpdir/r0.rules"
fault_clear "$tmpdir/r1.rules"
# Still healthy a moment later (nothing is resyncing either).
sleep 1.5
status_check "$ctl" "leg(0)['state'] == 'uptodate' and
  leg(1)['state'] == 'uptodate' and s['volume']['state'] == 'healthy' and
  s['volume']['generation'] == $gen"
settle_range "$off" "$len"
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
# And the range is writable as usual.
write_random "$c_uri" "$tmpdir/expected" "$off" "$len"

# --- (4) A flush both legs fail with EIO.
gen=$(generation)
"$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom(256 * $KiB)
h.pwrite(buf, 26 * $MiB)
with open('$tmpdir/expected', 'r+b') as f:
    f.seek(26 * $MiB)
    f.write(buf)
"
# (r1 first: should one of the engine's own flushes come in between,
# it fails leg 1 alone, which is what the checks expect anyway.)
fault_arm "$tmpdir/r1.rules" "id=fl-1 op=flush phase=refuse error=EIO count=0"
fault_arm "$tmpdir/r0.rules" "id=fl-0 op=flush phase=refuse error=EIO count=0"
expect_error "$c_uri" EIO "h.flush()"
status_check "$ctl" "leg(0)['state'] == 'uptodate' and
  leg(1)['state'] != 'uptodate' and
  s['volume']['generation'] > $gen and leg(1)['last_error'] is not None"
grep -F "leg 1 ($r1_uri) failed: flush failed: Input/output error" "$tmpdir/c.log"
back_to_healthy
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
