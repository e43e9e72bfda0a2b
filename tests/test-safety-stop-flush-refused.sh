#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A clean stop whose final flush a leg refuses must not leave that leg
# recorded as cleanly stopped (nbdkit-replicate-plugin(1): a clean stop
# is "every leg flushed, the activity log empty: the next start copies
# nothing"; ERRORS: a leg where a flush fails is failed; LOG: "clean
# stop: N activity-log extent(s) could not be emptied; the next start
# will resync them").  The leg's unflushed writes may be lost: the next
# start must resync them to it.
#
# Two file legs; leg 1 is served through the faultinject filter and
# then nbdkit's cache filter with cache=writeback (written blocks stay
# in its temporary cache until a flush; kill -9 of the replica throws
# them away, like a disk losing its volatile write cache).
#   1. Data written and flushed; the log is cold.
#   2. A write W2 to extent E (8-12 MiB) is held on leg 1 (6 s): while
#      it is in flight E cannot cool, so no cooling pass flushes the
#      legs.  W (1 MiB at 8 MiB, in E) is written and acknowledged,
#      never flushed: it is in leg 1's cache only.  Leg 1's flushes
#      are then refused (EIO).
#   3. SIGTERM: the clean stop waits for W2, then flushes the legs to
#      empty the log: leg 1 refuses, and is failed.  Then leg 1's
#      replica is killed (W is lost from it) and started again.
#   4. The restart resyncs leg 1; the oracle: W (and everything else
#      acknowledged) on both legs and through the controller.
# A stop that emptied the log on leg 1 as if its flush had worked (or
# failed it without its bitmap covering the hot extents) would leave
# leg 1 uptodate without W after the restart.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter cache
requires python3 -c 'import json'
test -f "$FAULTINJECT" || _skip "the faultinject filter ($FAULTINJECT)"

M=$(( 1024 * 1024 ))
W=$(( 8 * M ))
W2=$(( 10 * M ))
ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
log=$tmpdir/c.log

start_replica 0 32M
start_replica 1 32M -- --filter="$FAULTINJECT" --filter=cache \
  cache=writeback rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# 1.
write_random "$c_uri" "$expected" 0 "$M"
write_random "$c_uri" "$expected" "$W2" "$M"
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}
wait_until 20 _cold

# 2.  W2 rewrites what E holds at W2 already: its outcome changes nothing.
fault_arm "$rules" \
  "id=w2 op=write range=$W2-$(( W2 + M )) phase=hold secs=6 count=1"
"$NBDSH" -u "$c_uri" -c "
with open('$expected', 'rb') as f:
    f.seek($W2)
    h.pwrite(f.read($M), $W2)
" >"$tmpdir/w2.out" 2>&1 &
w2pid=$!
fault_wait "$faults" w2 fire 10
head -c "$M" /dev/urandom >"$tmpdir/W"
"$NBDSH" -u "$c_uri" -c "h.pwrite(open('$tmpdir/W', 'rb').read(), $W)"
dd if="$tmpdir/W" of="$expected" bs="$M" seek=$(( W / M )) conv=notrunc \
  status=none
fault_arm "$rules" "id=flush op=flush phase=refuse error=EIO count=0"
status_check "$ctl" 'leg(1)["state"] == "uptodate" and
  s["volume"]["activity_log"]["hot"] > 0'
# The setup works: W is in leg 1's cache, not in its file.
! cmp -s -n "$M" -i "0:$W" "$tmpdir/W" "$tmpdir/r1.img"

# 3.  No flush reached leg 1 before the stop.
! _fault_logged "$faults" fire flush
stop_controller c
wait $w2pid || :
cat "$faults"
_fault_logged "$faults" fire flush
grep 'leg 1 (.*) failed: flush failed' "$log"
kill_replica 1
! cmp -s -n "$M" -i "0:$W" "$tmpdir/W" "$tmpdir/r1.img"
fault_clear "$rules"
restart_replica 1

# 4.
restart_controller c
wait_volume_state 60 "$ctl" healthy
grep -E 'leg 1 \(.*\) is stale: (incremental|full) resync' "$log"
status_check "$ctl" 'leg(1)["last_resync"] is not None'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
