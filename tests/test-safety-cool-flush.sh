#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The cooler flushes the legs before it lets extents leave the activity
# log (nbdkit-replicate-plugin(1), "The activity log"; al_cool in al.c):
# an extent out of the log is one crash recovery will not look at, so
# its writes must be durable on every leg first, even when clients
# never flush.
#
# Two 64 MiB file legs; leg 1 is served through the faultinject filter
# (tracing the flushes that reach it) and then nbdkit's cache filter
# with cache=writeback, which keeps written blocks in its own temporary
# cache file and writes them to the file only on flush (a FUA write:
# that request only); kill -9 of the replica throws the cache away,
# like a disk losing its volatile write cache.  The controller runs
# with -D replicate.cool_pause=1000: a cooling pass with candidates
# pauses once it has flushed the legs, before the extents leave the log.
#
# The log is cold; W (1 MiB at 8 MiB, one 4 MiB extent) is written and
# acknowledged, never flushed by the client (which stays connected).
# The setup works: leg 1's file does not hold W unless a flush reached
# leg 1.  The next cooling pass (its pause marks it) must have flushed
# leg 1: its file holds W.  Once the status shows the log cold (and no
# leg's log on disk lists W's extent: nbdrep inspect), kill -9
# the controller and then leg 1's replica, restart both.  Oracle: every
# acknowledged write (W too) reads back from the controller and from
# each leg.  A cooler that let W's extent go unflushed would leave leg 1
# without W and W's extent out of every log: nothing would repair it.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter cache
requires python3 -c 'import json'

KiB=1024
MiB=$(( 1024 * KiB ))
W=$(( 8 * MiB ))
len=$MiB
ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
log=$tmpdir/c.log

start_replica 0 64M
start_replica 1 64M -- --filter="$FAULTINJECT" --filter=cache \
  cache=writeback rules="$rules" log="$faults"
start_controller c -D replicate.cool_pause=1000 "$PLUGIN" "$r0_uri" \
  "$r1_uri" control="$ctl" timeout=30
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# Acknowledged and flushed data elsewhere.
write_random "$c_uri" "$expected" 0 "$MiB"
write_random "$c_uri" "$expected" $(( 20 * MiB )) "$MiB"

# _cold: is no activity-log extent hot?
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}
wait_until 20 _cold

# _pauses: how many cooling passes with candidates paused so far.
_pauses ()
{
  grep -c 'activity log cooling: pausing' "$log" || :
}
# _paused_more N: did a pass pause after the first N?
_paused_more ()
{
  [ "$(_pauses)" -gt "$1" ]
}
# _r1_holds_w: does leg 1's file hold W?
_r1_holds_w ()
{
  cmp -s -n "$len" -i "0:$W" "$tmpdir/W" "$tmpdir/r1.img"
}

fault_arm "$rules" "id=flush op=flush phase=hold secs=0 count=0"
n=$(_pauses)

# W, acknowledged (into the expected file at once), never flushed; the
# client stays connected until the end.
head -c "$len" /dev/urandom >"$tmpdir/W"
"$NBDSH" -u "$c_uri" -c "
import time
h.pwrite(open('$tmpdir/W', 'rb').read(), $W)
print('W acknowledged', flush=True)
time.sleep(60)
" >"$tmpdir/writer.out" 2>&1 &
writer=$!
_stop_writer () { kill "$writer" 2>/dev/null || :; wait "$writer" 2>/dev/null || :; }
cleanup_fn _stop_writer
wait_until 10 grep -q 'W acknowledged' "$tmpdir/writer.out"
dd if="$tmpdir/W" of="$expected" bs="$len" seek=$(( W / len )) \
  conv=notrunc status=none

# The setup works: without a flush W is only in leg 1's cache.
if _r1_holds_w && ! _fault_logged "$faults" fire flush; then
  echo "$0: W reached r1.img although no flush reached leg 1" >&2
  exit 1
fi

# The cooling pass that lets W's extent go: its pause comes after its
# flush of the legs.
wait_until 20 _paused_more "$n"
cat "$faults"
if ! _r1_holds_w; then
  echo "$0: a cooling pass reached its pause (legs flushed) but leg 1's" \
       "file does not hold W: the cooler did not flush leg 1" >&2
  exit 1
fi
wait_until 20 _cold
# ... and the smaller log written: no leg's log lists W's extent.
_leg_log_cold ()
{
  [ "$("$NBDREP" inspect "$1" --json |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["activity_log"]["hot"])')" -eq 0 ]
}
wait_until 10 _leg_log_cold "$r0_uri"
wait_until 10 _leg_log_cold "$r1_uri"

# The crash: the controller, then leg 1's replica (its cache is lost).
kill_controller c
kill_replica 1
_stop_writer
cat "$tmpdir/writer.out"
fault_clear "$rules"
restart_replica 1
restart_controller c
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
