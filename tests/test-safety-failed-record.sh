#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A write may be acknowledged only if the membership change it waited
# for was recorded; a leg whose failure could not be recorded is never
# uptodate again by itself (DESIGN.md section 13, judge_acknowledge in
# io.c, metaio_bump in metaio.c, judge_sb_locked in monitor.c).
#
# Two file legs A (leg 0) and B (leg 1, behind the faultinject filter),
# read=first.  B's next superblock write is held 3 s and then refused
# with EIO (its data writes succeed).  Then:
#   1. A is killed; the monitor fails it and bumps the generation, whose
#      superblock write to B is the one held;
#   2. meanwhile a FUA write W goes to B alone and completes there; it
#      waits for the change, which fails (B is failed too, the volume
#      has no uptodate leg): W must not be acknowledged;
#   3. B is taken down and A comes back first: A holds the generation
#      the volume last recorded but its failure was noted, so it is not
#      a member: it must not be uptodate (before the fix it was, and
#      served its old data at W's offset; W had been acknowledged);
#   4. B comes back: it is uptodate again (the last leg standing, a
#      member of that generation), A resyncs from it, the volume is
#      healthy and both legs equal what was acknowledged (W's range,
#      which was not acknowledged, only equal on both legs).
# Then the same with a restart: W is held on B by the same refusal, and
# both legs and a new controller are started together (crash recovery
# then picks one of two legs of the same generation): every
# acknowledged write must read back.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))
W=$(( 8 * MiB ))
len=$(( 64 * 1024 ))

# fua_write OFFSET: write random data with FUA at OFFSET through the
# controller; put it into the expected file only if it was acknowledged.
# Prints "ok" or the error.
fua_write ()
{
  "$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom($len)
try:
    h.pwrite(buf, $1, nbd.CMD_FLAG_FUA)
except nbd.Error as e:
    print('error: %s' % e)
else:
    with open('$expected', 'r+b') as f:
        f.seek($1)
        f.write(buf)
    print('ok')
"
}

# read_matches OFFSET LENGTH: does the controller return the expected
# bytes there (an error counts as no: nothing served is not wrong data,
# so it prints "error" and succeeds)?
read_matches ()
{
  "$NBDSH" -u "$c_uri" -c "
try:
    got = h.pread($2, $1)
except nbd.Error as e:
    print('error: %s' % e)
    raise SystemExit(0)
with open('$expected', 'rb') as f:
    f.seek($1)
    want = f.read($2)
if got != want:
    raise SystemExit('the controller serves data that is not what was '
                     'acknowledged at offset $1')
print('matches')
"
}

# A start: data everywhere, acknowledged.
start_replica 0
start_replica 1 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=3 \
  read=first
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 16 * MiB ))

# 1-2.  A dies; the bump's superblock write to B is held, then refused;
# W goes to B meanwhile.
fault_arm "$rules" "id=sb op=write range=-8K- phase=refuse delay=3 count=1"
kill_replica 0
fault_wait "$faults" sb fire 10
result=$(fua_write "$W")
echo "W: $result"
case $result in
  ok) echo "W was acknowledged although the change it waited for failed" ;;
esac

# 3.  B away, A back first: A must not be uptodate.
kill_replica 1
fault_clear "$rules"
restart_replica 0
sleep 3
status_check "$ctl" 'leg(0)["state"] != "uptodate"'
read_matches "$W" "$len"
read_matches 0 $(( 16 * MiB ))

# 4.  B back: uptodate, A resyncs from it.
restart_replica 1
wait_volume_state 60 "$ctl" healthy
if [ "$result" != ok ]; then
  # Not acknowledged: old or new, but the same on both legs.
  "$NBDSH" -u "$r1_uri" -c "
with open('$expected', 'r+b') as f:
    f.seek($W)
    f.write(h.pread($len, $W))
"
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
[ "$result" != ok ] || { echo "$0: W was acknowledged" >&2; exit 1; }

# The same refusal, then a restart of everything.
stop_controller c
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=3 \
  read=first
wait_volume_state 30 "$ctl" healthy
write_random "$c_uri" "$expected" 0 $(( 4 * MiB ))
fault_arm "$rules" "id=sb2 op=write range=-8K- phase=refuse delay=3 count=1"
kill_replica 0
fault_wait "$faults" sb2 fire 10
result=$(fua_write "$W")
echo "W: $result"
kill_controller c
kill_replica 1
fault_clear "$rules"
restart_replica 0
restart_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=3 \
  read=first
wait_volume_state 60 "$ctl" healthy
if [ "$result" != ok ]; then
  "$NBDSH" -u "$c_uri" -c "
with open('$expected', 'r+b') as f:
    f.seek($W)
    f.write(h.pread($len, $W))
"
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
[ "$result" != ok ] || { echo "$0: W was acknowledged" >&2; exit 1; }
