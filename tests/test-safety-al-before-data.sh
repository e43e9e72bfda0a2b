#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A write to a cold activity-log extent makes it hot in the log on every
# leg (one log write with FUA) before its data goes out; after a
# controller crash only the extents in the log can differ between the
# uptodate legs (nbdkit-replicate-plugin(1), "The activity log"; the
# design note of al.c: al_acquire before the legs' writes in io.c).
#
# Two file legs, each behind the faultinject filter.  A write D (256 KiB
# at 8 MiB: one 4 MiB extent, cold) is made while the activity-log
# writes (FUA, the log area near the end of each leg, from nbdrep
# inspect --json) are held on both legs; the faultinject logs trace
# every request to D's range.  Leg 0 lets D's data through, leg 1 holds
# it.  Checked while the log writes are held (1 s, time enough for data
# sent too early to arrive): no data write to D's range reached a leg,
# and leg 0's file does not hold D.  Then the crash: kill -9 the
# controller and both replicas (the held writes die with them), restart.
# Oracle: every acknowledged write reads back (D was not acknowledged:
# its range holds the old data) and the legs are equal.
# If data went out before the log was written, leg 0 would hold D, leg
# 1 not, and no log would list D's extent: the legs would differ.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
KiB=1024
MiB=$(( 1024 * KiB ))
D=$(( 8 * MiB ))
len=$(( 256 * KiB ))

for i in 0 1; do
  start_replica "$i" -- --filter="$FAULTINJECT" rules="$tmpdir/r$i.rules" \
    log="$tmpdir/r$i.faults"
done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# Acknowledged data in other extents, and in D's extent before it.
write_random "$c_uri" "$expected" 0 "$MiB"
write_random "$c_uri" "$expected" "$D" "$MiB"
write_random "$c_uri" "$expected" $(( 20 * MiB )) "$MiB"

# The log area: both copies of the activity log (same on both legs,
# which have the same size).
read -r al_start al_end < <("$NBDREP" inspect "$r0_uri" --json | python3 -c '
import json, sys
l = json.load(sys.stdin)["layout"]
offs = l["activity_log_offsets"]
print(min(offs), max(offs) + l["activity_log_bytes"])
')
[ "$al_start" -gt "$D" ]

# D's extent must be cold (the cooler passes every 2 s).
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}
wait_until 20 _cold

data_rule="id=data op=write,zero,trim range=$D-$(( D + 4 * MiB ))"
fault_arm "$tmpdir/r0.rules" \
  "id=al op=write fua=yes range=$al_start-$al_end phase=hold secs=60 count=1" \
  "$data_rule phase=hold secs=0 count=0"
fault_arm "$tmpdir/r1.rules" \
  "id=al op=write fua=yes range=$al_start-$al_end phase=hold secs=60 count=1" \
  "$data_rule phase=hold secs=60 count=0"

# D, never acknowledged: saved first, then written (the client sees an
# error when the controller dies).
"$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom($len)
with open('$tmpdir/D', 'wb') as f:
    f.write(buf)
h.pwrite(buf, $D)
h.flush()
print('D acknowledged')
" >"$tmpdir/writer.out" 2>&1 &
writer=$!
fault_wait "$tmpdir/r0.faults" al fire 10
fault_wait "$tmpdir/r1.faults" al fire 10
sleep 1

cat "$tmpdir/r0.faults" "$tmpdir/r1.faults"
for i in 0 1; do
  if _fault_logged "$tmpdir/r$i.faults" fire data; then
    echo "$0: a data write to D's extent reached leg $i while the" \
         "activity-log write was held" >&2
    exit 1
  fi
done
if cmp -s -n "$len" -i "0:$D" "$tmpdir/D" "$tmpdir/r0.img"; then
  echo "$0: leg 0 holds D while the activity-log write is held" >&2
  exit 1
fi

# The crash, during the hold.
kill_controller c
kill_replica 0
kill_replica 1
wait "$writer" || true
cat "$tmpdir/writer.out"
if grep -q 'D acknowledged' "$tmpdir/writer.out"; then
  echo "$0: D was acknowledged while its log write was held" >&2
  exit 1
fi
fault_clear "$tmpdir/r0.rules"
fault_clear "$tmpdir/r1.rules"
restart_replica 0
restart_replica 1
restart_controller c
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
