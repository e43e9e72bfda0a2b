#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A writer that read the membership while the asynchronous leg was
# syncing, and queues only once the leg has failed and come back
# (stale, its catch-up not yet receiving writes), must not queue: its
# write, sent to the leg outside any catch-up, may land after the
# catch-up copied newer data over the same range (async.c, the marking
# protocol: a leg out of the receiving legs gets marks, never writes).
#
# Two file legs and an asynchronous one behind the faultinject filter.
# -D replicate.queue_pause=4000: the first write that queues for the
# asynchronous leg (W1 to X) waits 4 s after reading the membership,
# before it queues, its range held; -D replicate.resume_pause=8000:
# every resync waits 8 s before its target receives writes.
#   1. W1 to X waits (the leg is syncing, replicating);
#   2. nbdrep fail 2: the leg fails (its sender idle: nothing queued),
#      X is in its bitmap (W1's extent is hot); it comes back stale and
#      its catch-up waits 8 s before it receives writes;
#   3. W1 goes on within that wait; the faultinject filter holds the
#      first write to X that reaches the leg for 10 s, then applies it;
#   4. W2 to X (newer data), while the leg is still stale;
#   5. the catch-up copies X (W2) and ends; once the held write is done
#      and the leg reports replicating with no lag after a flush, every
#      leg must hold W2.
# Before the fix W1 was queued while the leg was stale and sent at
# once; held, it landed after the catch-up had copied W2 over X, and the
# leg, replicating, held W1 there.
#
# With WHEN=syncing (test-async-late-queue-syncing.sh) no resync waits:
# the catch-up makes the leg syncing and starts copying X while W1
# still waits, W1 goes on only then and queues, and W2 is queued after
# it.  The catch-up's copy of X waits for W1's range lock (resync.c,
# copy_run), so it copies W1 or W2, never before W1; the queue sends
# W1 before W2; the leg must end up with W2 as well.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected
X=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
resume_pause=8000
[ "${WHEN:-stale}" = stale ] || resume_pause=0
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  -D replicate.queue_pause=4000 -D replicate.resume_pause=$resume_pause \
  control="$ctl"
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# 1.  W1 waits before it queues (the first write queued for the leg).
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=10 count=1"
"$NBDSH" -u "$c_uri" -c "
import os
h.pwrite(os.urandom($len), $X)
" &
w1=$!
wait_until 30 grep -q 'pausing 4000 ms before it queues' "$tmpdir/c.log"

# 2.  The leg fails and comes back stale; its catch-up waits (or,
# WHEN=syncing, starts).
"$NBDREP" fail "$ctl" 2
wait_until 30 grep -q 'leg 2: failed -> stale' "$tmpdir/c.log"

# 3, 4.  W1 goes on; then W2, newer, while the leg is still stale (or,
# WHEN=syncing, catching up: its catch-up started while W1 waited).
wait "$w1"
if [ "${WHEN:-stale}" = stale ]; then
  status_check "$ctl" 'leg(2)["async"]["state"] == "behind"'
else
  grep -q 'leg 2: stale -> syncing (incremental resync started)' \
    "$tmpdir/c.log"
fi
write_random "$c_uri" "$expected" "$X" "$len"

# 5.  The held write has landed and the catch-up has ended.
fault_wait "$faults" late done 60
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
