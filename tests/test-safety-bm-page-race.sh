#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A bitmap page being written while a client write sets another bit in
# it must not lose that bit (common/replication/pure/bitmap.c, "Dirty
# marks and the metadata writer"; metaio.c, encode_page): the writer
# takes the page's dirty mark before it reads the page's words, so a
# bit set after the read makes the page dirty again and the next
# bitmap write carries it.  A writer that cleared the mark after its
# write would leave the page on disk without the bit, while the
# activity log lets the bit's extent go (al.c: the cooler writes the
# dirty pages, then lets idle extents leave): after a controller crash
# nothing would say that the absent leg misses the write.
#
# Driven: two legs, -D replicate.bm_write_pause=1500 (every batch of
# bitmap pages waits 1.5 s once encoded, before it is sent).  Leg 1's
# server is killed and A (64 KiB at 0) written: leg 1 fails, its slot's
# page 0 is dirty; the cooler encodes it (with A's bit) and pauses.
# Inside that pause, B (64 KiB at 8 MiB: another chunk of the same
# page, another activity-log extent) is written and acknowledged.  Once
# the log is cold in memory and on leg 0's disk, the controller is
# killed (kill -9) and started again (without the pause) with leg 1's
# server back: leg 1's incremental resync, from slot 1's bitmap on
# leg 0 alone, must cover B.  Oracle: every acknowledged write reads
# back from the controller and from both legs.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
KiB=1024
MiB=$(( 1024 * KiB ))

start_replica 0 32M
start_replica 1 32M
start_controller c -D replicate.bm_write_pause=1500 "$PLUGIN" \
  "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

kill_replica 1
write_random "$c_uri" "$expected" 0 $(( 64 * KiB ))                # A
wait_until 30 grep -q 'leg 1: [a-z]* -> failed' "$log"

# B, written inside a bitmap write's pause that began after leg 1's
# failure was recorded (its batch holds leg 1's page 0, all dirty since
# the failure gave the slot a new bm_gen) and acknowledged before that
# pause is over.
"$NBDSH" -u "$c_uri" -c "
import os, re, time
def lines():
    return open('$log', errors='replace').read().splitlines()
def open_pause():
    ls = lines()
    failed = max(i for i, l in enumerate(ls)
                 if re.search(r'leg 1: [a-z]+ -> failed', l))
    recorded = next((i for i in range(failed, len(ls))
                     if re.search(r'generation \d+ recorded', ls[i])), None)
    if recorded is None:
        return None
    starts = [i for i in range(recorded, len(ls))
              if 'bitmap write: pausing' in ls[i]]
    if starts and not any('bitmap write: pause over' in l
                          for l in ls[starts[-1]:]):
        return starts[-1]
    return None
deadline = time.monotonic() + 20
while (start := open_pause()) is None:
    assert time.monotonic() < deadline, 'no bitmap write paused'
    time.sleep(0.01)
buf = os.urandom(64 * $KiB)
h.pwrite(buf, 8 * $MiB)
h.flush()
ls = lines()
assert not any('bitmap write: pause over' in l for l in ls[start:]), \
    'B was acknowledged only after the pause was over: too slow to test'
print('B acknowledged inside the bitmap write paused at line %d' % start)
with open('$expected', 'r+b') as f:
    f.seek(8 * $MiB)
    f.write(buf)
"

# The log cold in memory, then on leg 0's disk: A and B are now only in
# slot 1's bitmap.
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"
_leg0_log_cold ()
{
  [ "$("$NBDREP" inspect "$r0_uri" --json |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["activity_log"]["hot"])')" -eq 0 ]
}
wait_until 10 _leg0_log_cold

kill_controller c
restart_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
grep -E 'leg 1.*(incremental|resync)' "$tmpdir/c.log" | tail -5 || :
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
