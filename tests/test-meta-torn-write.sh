#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A write torn on every leg by the crash of all replicas is served torn
# after crash recovery, and the oracle of the test-meta-*.sh tests
# (meta-writers.py check) accepts it, block by block, while still
# catching a lost acknowledged write (DESIGN.md section 5, invariants 1
# and 3; the failure of test-meta-all-killed.sh this explains is in the
# commit that added this test).
#
# A replica SIGKILLed inside its pwrite(2) keeps the pages the kernel
# copied before it saw the signal (on ext4 with large folios, whole
# folios): the write in flight is torn at a folio boundary.  Here the
# faultinject filter's torn-exit phase does that deterministically: the
# three replicas apply the first half of one client write and exit, the
# controller (no leg left to record a failure on) fails the write and
# is killed.  Whichever leg the restarted controller elects and replays
# the activity log from (all three are normally still members of the
# one generation, as in the full run; a leg that lived a moment longer
# may have recorded another's failure), it serves the torn write: its
# first half new, its second half what the acknowledged writes left
# there.  The old checker, which took the failed write for all or
# nothing, failed here naming the failed write's first byte, as in the
# full run.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_plugin file
requires python3 -c 'import nbd, random; random.Random(1).randbytes(1)'
test -f "$FAULTINJECT"

ctl=$tmpdir/c.ctl
writers=$abs_top_srcdir/tests/meta-writers.py
region=$(( 4 * 1024 * 1024 ))
log=$tmpdir/log
# Client 0's writes, as meta-writers.py logs them: two acknowledged, then
# one that fails, overlapping the end of the first (as write 64 of the
# full run overlapped write 33) and running on into zeroes.
a0_off=$(( 128 * 1024 )); a0_len=$(( 64 * 1024 ))
a1_off=$(( 1024 * 1024 )); a1_len=$(( 64 * 1024 ))
u_off=$(( 172 * 1024 )); u_len=$(( 48 * 1024 ))

for i in 0 1 2; do
  start_replica "$i" --file 24M -- --filter="$FAULTINJECT" \
    rules="$tmpdir/r$i.rules" log="$tmpdir/r$i.faults"
done

# start_volume: the controller on the three legs, deciding at once.
start_volume ()
{
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
    control="$ctl" wait=0 timeout=2
  wait_for test -S "$ctl"
}
start_volume
wait_volume_state 30 "$ctl" healthy

# write_logged KIND SEQ OFFSET LENGTH: write meta-writers.py's data of
# client 0's write SEQ through the controller; KIND A: it must succeed,
# U: it must fail; log it as meta-writers.py does.
write_logged ()
{
  python3 - "$writers" "$c_uri" "$log"0 "$@" <<'EOF'
import importlib.util, nbd, sys
spec = importlib.util.spec_from_file_location("mw", sys.argv[1])
mw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mw)
uri, logf, kind = sys.argv[2], sys.argv[3], sys.argv[4]
seq, off, n = map(int, sys.argv[5:8])
h = nbd.NBD()
h.connect_uri(uri)
try:
    h.pwrite(mw.data_of(0, seq, n), off)
except nbd.Error as e:
    assert kind == "U", "acknowledged write %d failed: %s" % (seq, e)
    with open(logf, "a") as f:
        f.write("U %d %d %d %s\n" % (seq, off, n, e))
    sys.exit(0)
assert kind == "A", "write %d succeeded" % seq
with open(logf, "a") as f:
    f.write("A %d %d %d\n" % (seq, off, n))
h.shutdown()
EOF
}

write_logged A 0 "$a0_off" "$a0_len"
write_logged A 1 "$a1_off" "$a1_len"

# --- Every replica applies half of the next write to u's range and exits.
for i in 0 1 2; do
  fault_arm "$tmpdir/r$i.rules" \
    "id=torn op=write range=$u_off-$(( u_off + u_len )) phase=torn-exit"
done
write_logged U 2 "$u_off" "$u_len"
for i in 0 1 2; do
  reap_server "r$i" 30
  test "$server_status" -eq 0
  grep "^done torn torn-exit write $u_off $(( u_len / 2 ))\$" "$tmpdir/r$i.faults"
  fault_clear "$tmpdir/r$i.rules"
done
kill_controller c

# tear_on IMAGE: IMAGE holds u's first half (blocks of its data) and,
# in its second half, not u's data.
tear_on ()
{
  python3 - "$writers" "$1" "$u_off" "$u_len" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("mw", sys.argv[1])
mw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mw)
off, n = int(sys.argv[3]), int(sys.argv[4])
data = mw.data_of(0, 2, n)
with open(sys.argv[2], "rb") as f:
    f.seek(off)
    got = f.read(n)
landed = [got[b:b + 4096] == data[b:b + 4096] for b in range(0, n, 4096)]
print(sys.argv[2], "".join("1" if x else "0" for x in landed))
half = len(landed) // 2
assert landed == [True] * half + [False] * half
EOF
}
for i in 0 1 2; do tear_on "$tmpdir/r$i.img"; done

# --- The restart: crash recovery copies the AL extents from the source.
for i in 0 1 2; do
  restart_replica "$i"
  uri_var=r${i}_uri
  "$NBDREP" inspect "${!uri_var}" | grep -E 'generation|flags' || :
done
start_volume
grep 'crash recovery: [1-9][0-9]* activity-log extent(s)' "$tmpdir/c.log"
wait_volume_state 30 "$ctl" healthy

# Through the controller: the acknowledged writes, and u torn in 6 of
# its 12 blocks.
out=$(python3 "$writers" check "$c_uri" 1 "$region" "$log")
echo "$out"
grep "failed write at $u_off landed in $(( u_len / 4096 / 2 )) of its $(( u_len / 4096 )) blocks" <<<"$out"
compare_legs_equal "$("$NBDINFO" --size "$c_uri")" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c

# --- The checker still catches a lost acknowledged write, torn failed
# write or not, and a block of the failed write holding neither state.
python3 "$writers" check "$tmpdir/r0.img" 1 "$region" "$log"
# damaged OFFSET: a copy of leg 0 with 4 KiB of garbage at OFFSET.
damaged ()
{
  cp --sparse=always "$tmpdir/r0.img" "$tmpdir/bad.img"
  printf '%4096s' x | dd of="$tmpdir/bad.img" bs=4096 seek=$(( $1 / 4096 )) \
    conv=notrunc status=none
}
for bad in $(( a1_off + 8192 )) "$a0_off" $(( u_off + u_len - 4096 )); do
  damaged "$bad"
  if python3 "$writers" check "$tmpdir/bad.img" 1 "$region" "$log"; then
    echo "$0: the checker missed 4 KiB of garbage at $bad"
    exit 1
  fi
done
