#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Overlapping writes reach every leg in the same order: a write takes
# the range lock over its piece before it goes to any leg, and keeps it
# until every leg answered (the design note of io.c, step 2; aio.c keeps
# its hold the same way).  test-overlap.sh hammers this at random; here
# one interleaving is driven.
#
# Two file legs, each behind the faultinject filter, whose logs trace
# every write to the range X (64 KiB at 8 MiB, its activity-log extent
# made hot first).  W1 (connection A) is let through on leg 0 and held
# 3 s on leg 1 (count=1: only W1).  Once W1 is done on leg 0 and held
# on leg 1, W2 (connection B) overlaps it (the second half of X and the
# 32 KiB after).  Checked 1 s later, while W1 is still held (time
# enough for a W2 sent too early to arrive): no leg saw W2, neither
# write is acknowledged.  Then, once W1 is done on leg 1: W2 reaches
# leg 1 only after W1 was done there (the log's order) and is held
# 0.5 s there, so that W2's acknowledgement comes after W1's.  Oracle:
# the controller and both legs hold W1 overwritten by W2.
# Without the range lock W2 would reach leg 0 at once, land on leg 1
# before the held W1, and the legs would differ.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
KiB=1024
MiB=$(( 1024 * KiB ))
X=$(( 8 * MiB ))
len=$(( 64 * KiB ))
W2=$(( X + len / 2 ))

for i in 0 1; do
  start_replica "$i" -- --filter="$FAULTINJECT" rules="$tmpdir/r$i.rules" \
    log="$tmpdir/r$i.faults"
done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# X's activity-log extent hot, and old data in X and after it.
write_random "$c_uri" "$expected" "$X" "$MiB"

range="range=$X-$(( X + 2 * len ))"
fault_arm "$tmpdir/r0.rules" "id=x0 op=write,zero,trim $range phase=hold secs=0 count=0"
fault_arm "$tmpdir/r1.rules" \
  "id=w1 op=write,zero,trim $range phase=hold secs=3 count=1" \
  "id=w2 op=write,zero,trim $range phase=hold secs=0.5 count=1" \
  "id=x1 op=write,zero,trim $range phase=hold secs=0 count=0"

# write_bg NAME OFFSET: write len random bytes (saved in $tmpdir/NAME)
# at OFFSET on a connection of its own, in the background (pid in
# $tmpdir/NAME.pid); on the acknowledgement it prints the wall clock
# in ns into $tmpdir/NAME.ack.
write_bg ()
{
  head -c "$len" /dev/urandom >"$tmpdir/$1"
  "$NBDSH" -u "$c_uri" -c "
import time
with open('$tmpdir/$1', 'rb') as f:
    buf = f.read()
h.pwrite(buf, $2)
t = time.time_ns()
with open('$tmpdir/$1.ack', 'w') as f:
    print(t, file=f)
" >"$tmpdir/$1.out" 2>&1 &
  echo $! >"$tmpdir/$1.pid"
}

write_bg w1 "$X"
fault_wait "$tmpdir/r1.faults" w1 fire 10
fault_wait "$tmpdir/r0.faults" x0 done 10
write_bg w2 "$W2"
sleep 1

cat "$tmpdir/r0.faults" "$tmpdir/r1.faults"
if _fault_logged "$tmpdir/r1.faults" done w1; then
  echo "$0: W1 was done on leg 1 before its hold ended (the check is late)" >&2
  exit 1
fi
n0=$(grep -c '^fire x0 ' "$tmpdir/r0.faults")
if [ "$n0" -ne 1 ]; then
  echo "$0: W2 reached leg 0 while the overlapping W1 was held on leg 1" >&2
  exit 1
fi
if _fault_logged "$tmpdir/r1.faults" fire w2 ||
   _fault_logged "$tmpdir/r1.faults" fire x1; then
  echo "$0: W2 reached leg 1 while the overlapping W1 was held there" >&2
  exit 1
fi
for w in w1 w2; do
  if [ -e "$tmpdir/$w.ack" ]; then
    echo "$0: $w was acknowledged while W1 was held on leg 1" >&2
    exit 1
  fi
done

# W1 goes on; W2 after it.
wait "$(cat "$tmpdir/w1.pid")" || { cat "$tmpdir/w1.out"; exit 1; }
wait "$(cat "$tmpdir/w2.pid")" || { cat "$tmpdir/w2.out"; exit 1; }
cat "$tmpdir/r0.faults" "$tmpdir/r1.faults"
# Leg 1: W1 done before W2 arrived; W2 the only other write to X.
[ "$(awk '{ print $1, $2 }' "$tmpdir/r1.faults" | tr '\n' ' ')" = \
  "fire w1 done w1 fire w2 done w2 " ]
# Leg 0: W1, then W2 (offsets as sent).
[ "$(awk '{ print $1, $2, $5 }' "$tmpdir/r0.faults" | tr '\n' ' ')" = \
  "fire x0 $X done x0 $X fire x0 $W2 done x0 $W2 " ]
[ "$(awk '$1 == "fire" { print $5 }' "$tmpdir/r1.faults" | tr '\n' ' ')" = \
  "$X $W2 " ]
t1=$(cat "$tmpdir/w1.ack") t2=$(cat "$tmpdir/w2.ack")
if [ "$t2" -le "$t1" ]; then
  echo "$0: W2 was acknowledged before W1 ($t2 <= $t1 ns)" >&2
  exit 1
fi

dd if="$tmpdir/w1" of="$expected" bs="$len" oflag=seek_bytes seek="$X" conv=notrunc status=none
dd if="$tmpdir/w2" of="$expected" bs="$len" oflag=seek_bytes seek="$W2" conv=notrunc status=none
fault_clear "$tmpdir/r0.rules"
fault_clear "$tmpdir/r1.rules"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
status_check "$ctl" 'all(l["state"] == "uptodate" for l in s["legs"])'
