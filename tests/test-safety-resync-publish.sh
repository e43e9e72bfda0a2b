#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A membership change is published only once every write that read the
# old membership has marked the bitmaps of the slots it skipped: a
# write holds a ticket from reading the membership until it has marked,
# and membership_publish waits for the old epoch's tickets (member.c).
# Here the change is a resync's target starting to receive writes
# (resync.c, step 2): a write that did not go to the target must be in
# its bitmap before the copy reads it.
#
# Two file legs.  -D replicate.ticket_pause=4000: the first write that
# reads a membership with an absent slot waits 4 s between reading it
# and marking the bitmaps.
#   1. A written while healthy (no absent slot: no ticket, no pause);
#      replica 1 killed, leg 1 failed (its slot absent);
#   2. W (64 KiB at X = 8 MiB, outside A's activity-log extents) reads
#      that membership and waits before marking leg 1's bitmap;
#   3. during the wait replica 1 comes back and its incremental resync
#      starts: making leg 1 syncing must wait for W to mark X;
#   4. W goes to leg 0 only (the legs of the membership it read) and is
#      acknowledged; once the resync ends both legs hold A and W, and
#      again after a clean restart.
# Without the wait leg 1 is made syncing at once, its resync copies A
# alone (X not yet marked) and it is uptodate before W marks X: leg 1
# never gets W.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))
X=$(( 8 * MiB ))
len=$(( 64 * 1024 ))

start_replica 0 16M
start_replica 1 16M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  -D replicate.ticket_pause=4000
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# 1.
write_random "$c_uri" "$expected" 0 "$MiB"                     # A
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed

# 2.  W, acknowledged in the background.
"$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom($len)
h.pwrite(buf, $X)
h.flush()
with open('$expected', 'r+b') as f:
    f.seek($X)
    f.write(buf)
" &
w=$!
wait_until 30 grep -q 'pausing 4000 ms before it marks' "$tmpdir/c.log"

# 3.  Leg 1 back now (no backoff), while W waits.
restart_replica 1
"$NBDREP" resync "$ctl" 1

# 4.
wait "$w"
# The resync started while W waited (else this proves nothing).
awk '/leg 1: stale -> syncing \(incremental/ { s = NR }
     /write: pause over/ { p = NR }
     END { exit !(s && p && s < p) }' "$tmpdir/c.log"
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
stop_controller c
restart_controller c
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
