#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A full resync writes every bitmap page of its target's slot under the
# new bm_gen, also the pages whose bits it did not change (DESIGN.md
# section 13): a page left on disk under the old bm_gen reads as empty
# after a restart.
#
# Two 32 MiB file legs (one bitmap page covers the whole volume), leg 1
# behind the faultinject filter, timeout=30.  Twice, once per way of
# starting a full resync that changes slot 1's bm_gen:
#   1. leg 1's replica is killed (leg 1 failed); the WHOLE volume is
#      written with new data through the controller, so slot 1's bitmap
#      page is all set, and persisted on leg 0 (activity log cold; `nbdrep
#      inspect` of leg 0: slot 1's page current, every chunk out of sync);
#   2. every data write to leg 1 is held (range 0-<volume size>: the
#      metadata area at the end is not) for 15 s, so that the resync
#      never completes a copy and no checkpoint rewrites the page;
#   3. a full resync of leg 1 starts (`nbdrep resync CTL 1` of the
#      failed leg only makes the monitor reconnect it at once):
#      (a) its replica returns with a BLANK image (a replacement disk:
#          full resync as a new member);
#      (b) its replica returns with its old image (an incremental resync
#          starts and stalls on the held writes), then `nbdrep resync
#          CTL 1 --full` fails it (a controller that waits for an aborted
#          connection to drain waits for the held writes to end) and the
#          full resync starts, and stalls too;
#   4. once leg 1 is syncing (kind full), kill -9 the controller, then
#      leg 1's replica; clear the rules; restart both.
# Checks, once the restarted controller is healthy: the oracle (the
# controller and both legs read exactly the acknowledged data); leg 1
# was resynced over the whole volume (last_resync bytes + zeroed = the
# volume size); and leg 0's slot 1 page, as `nbdrep inspect` read it
# between the kill and the restart, was current (under the slot's new
# bm_gen) and covered every chunk.
# Before the fix the page kept the old bm_gen: the restarted controller
# read it as empty, resynced nothing and called leg 1 uptodate while it
# held zeroes (a) or the older data (b).

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

start_replica 0 32M
start_replica 1 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=30
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$expected" "$c_uri"

# fill_volume: write the whole volume with fresh random data through the
# controller (1 MiB requests) and flush; only then put it in $expected.
fill_volume ()
{
  "$NBDSH" -u "$c_uri" -c "
import os
size = h.get_size()
data = bytearray(os.urandom(size))
step = 1024 * 1024
for off in range(0, size, step):
    h.pwrite(bytes(data[off:off + step]), off)
h.flush()
with open('$expected', 'r+b') as f:
    f.write(data)
"
}

# inspect_leg0 FILE: save `nbdrep inspect --json` of leg 0 in FILE.
inspect_leg0 ()
{
  "$NBDREP" inspect --json "$r0_uri" >"$1"
}

# slot1_all_set FILE: check in the `nbdrep inspect --json` output FILE
# that slot 1's bitmap page is current and marks every chunk.
slot1_all_set ()
{
  python3 - "$1" "$size" <<'EOF'
import json, sys
ins = json.load(open(sys.argv[1]))
size = int(sys.argv[2])
oos = [o for o in ins["out_of_sync"] if o["slot"] == 1]
assert len(oos) == 1, "slot 1 is not an absent slot on leg 0: %r" % ins["out_of_sync"]
o = oos[0]
print("slot 1 on leg 0: %r; bm_gen %r" % (o, ins["slots"][1]["bm_gen"]))
assert o["pages"]["current"] == 1 and o["pages"]["stale"] == 0, \
    "slot 1's bitmap page on leg 0 is not current under bm_gen %r: %r" \
    % (ins["slots"][1]["bm_gen"], o["pages"])
assert o["bytes"] == size, \
    "slot 1's bitmap on leg 0 covers %d bytes, not the whole volume (%d)" \
    % (o["bytes"], size)
EOF
}

# hold_data_writes: hold every data write to leg 1 for 15 s (its
# replica is down: the log of the filter starts afresh).
hold_data_writes ()
{
  : >"$faults" || return 1
  fault_arm "$rules" \
    "id=hold op=write,zero,trim range=0-$size phase=hold secs=15 count=0"
}

# crash_and_restart VARIANT: with leg 1 syncing (full) and stalled: kill
# the controller and leg 1's replica, save what leg 0 says of slot 1,
# restart both without rules; once healthy, the oracle, then: leg 1 was
# resynced over the whole volume, and slot 1's page on leg 0 was
# current (new bm_gen) and all set when the controller died.
crash_and_restart ()
{
  kill_controller c || return 1
  kill_replica 1 || return 1
  inspect_leg0 "$tmpdir/inspect-$1.json" || return 1
  fault_clear "$rules" || return 1
  restart_replica 1 || return 1
  restart_controller c || return 1
  wait_volume_state 40 "$ctl" healthy || return 1
  compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" || return 1
  status_check "$ctl" "leg(1)['last_resync'] is not None and
    leg(1)['last_resync']['bytes'] + leg(1)['last_resync']['zeroed'] == $size" ||
    return 1
  slot1_all_set "$tmpdir/inspect-$1.json"
}

# Data A on both legs.
fill_volume
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"

# --- (a) a blank replacement disk.
kill_replica 1
wait_leg_state 20 "$ctl" 1 failed
fill_volume                                       # data B, leg 0 only
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"
inspect_leg0 "$tmpdir/inspect-before-a.json"
slot1_all_set "$tmpdir/inspect-before-a.json"
hold_data_writes
rm -f "$tmpdir/r1.img"
restart_replica 1
"$NBDREP" resync "$ctl" 1                         # reconnect it now
wait_until 20 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and leg(1)['resync']['kind'] == 'full'"
fault_wait "$faults" hold fire 10
status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync']['done'] < $size"
crash_and_restart a

# --- (b) the old disk returns, then the operator asks for a full resync.
kill_replica 1
wait_leg_state 20 "$ctl" 1 failed
fill_volume                                       # data C, leg 0 only
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"
inspect_leg0 "$tmpdir/inspect-before-b.json"
slot1_all_set "$tmpdir/inspect-before-b.json"
hold_data_writes
restart_replica 1
"$NBDREP" resync "$ctl" 1                         # reconnect it now
wait_until 20 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and
  leg(1)['resync']['kind'] == 'incremental' and
  leg(1)['resync']['total'] == $size"
fault_wait "$faults" hold fire 10
held_before=$(grep -c '^fire hold ' "$faults")
"$NBDREP" resync "$ctl" 1 --full
wait_until 40 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and leg(1)['resync']['kind'] == 'full'"
more_held () { [ "$(grep -c '^fire hold ' "$faults")" -gt "$held_before" ]; }
wait_until 10 more_held                           # the full resync's writes
status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync']['done'] < $size"
crash_and_restart b
