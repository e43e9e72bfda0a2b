#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg finishing its resync must get every bitmap page written before
# it is published as uptodate, including those written after it was
# sent every page (metaio_persist_bitmaps writes to the syncing legs too;
# resync.c finish).  Otherwise, after a crash, its copy of an absent
# leg's bitmap can lack a write that absent leg missed, and the absent
# leg's incremental resync from it skips that write.
#
# Three file legs; the controller with -D replicate.finish_pause=6000,
# which holds the end of every resync for 6 s between writing every
# bitmap page to the target and publishing it:
#   1. leg 2 killed (absent: its slot's bitmap marks what it misses);
#      leg 1 killed, written around, restarted: its resync reaches the
#      pause;
#   2. in the pause, R is written (to legs 0 and 1): slot 2's page
#      marks R; the activity-log cooler writes the page and takes R's
#      extent out of the log (the status shows no hot extent);
#   3. the pause ends, leg 1 is uptodate; a write to another extent, Q,
#      rewrites the log without R; the controller is killed at once
#      (before the cooler writes the page again), and leg 0 with it;
#   4. a controller is started over legs 1 and 2 (force=true: leg 0,
#      a member, is gone): the election takes leg 1's bitmaps and the
#      log {Q}; leg 2's incremental resync must copy R.
# Before the rule (the pages went to the uptodate legs only) leg 1's
# page for slot 2 lacked R, and leg 2 was called uptodate without it.

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
len=$(( 64 * 1024 ))
R=$(( 16 * MiB ))
Q=$(( 40 * MiB ))

# _cold: is no activity-log extent hot?
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}

start_replica 0
start_replica 1
start_replica 2
start_controller c -D replicate.finish_pause=6000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" timeout=3
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$MiB"

# 1.
kill_replica 2
wait_leg_state 30 "$ctl" 2 failed
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" 0 "$MiB"
restart_replica 1
wait_until 60 grep -q 'resync finish: pausing' "$tmpdir/c.log"

# 2.  (R and the cooler take about 2 s of the pause's 6.)
write_random "$c_uri" "$expected" "$R" "$len"
wait_until 5 _cold
status_check "$ctl" 'leg(1)["state"] == "syncing"'

# 3.
wait_leg_state 30 "$ctl" 1 uptodate
write_random "$c_uri" "$expected" "$Q" "$len"
kill_controller c
kill_replica 0

# 4.
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=3 wait=1 force=true
wait_leg_state 60 "$ctl" 2 uptodate
compare_legs "$expected" "$c_uri" "$r1_uri" "$r2_uri"
