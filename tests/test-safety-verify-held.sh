#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A verify compares, and repairs from, only legs that are uptodate while
# it holds the run's lock (verify.c, verify_run): a leg that stopped
# being uptodate before the lock was taken may have missed a write to
# the run, and a repair from it would overwrite that acknowledged write
# on every leg (invariant 5).  A leg held out by a backup keeps its
# connections open, so it still answers the verify's reads.
#
# Two file legs (quorum 1, so a backup may hold one out); the
# controller with -D replicate.verify_pause=4000, which holds every
# verify for 4 s before it takes its first run's lock (the code before
# the fix had read which legs were uptodate by then):
#   1. A (1 MiB at 0) written to both legs;
#   2. `nbdrep verify --repair-from=1` (two legs: no majority, leg 1
#      uptodate: accepted) reaches the pause;
#   3. in the pause, backup-begin holds leg 1 out (point in time), and
#      W (64 KiB at 0) is written and acknowledged on leg 0 alone;
#   4. the pause ends and the verify runs to the end.
# Checks: the controller and leg 0 read W; the verify found nothing to
# compare leg 0 with (one uptodate leg: it ends as failed) and repaired
# nothing; once the backup ends, leg 1 resyncs and both legs equal what
# was written.
# Before the fix the verify compared leg 1 with the mask it read before
# the pause, found W's blocks different, and rewrote them on leg 0 from
# leg 1's copy of A, the reference it was given: W was lost.  (With
# three legs the majority, not the held leg, is the reference, and the
# defect only showed as a mismatch reported on the held leg.)

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
KiB=1024
MiB=$(( 1024 * KiB ))

for i in 0 1; do start_replica "$i" 16M; done
start_controller c -D replicate.verify_pause=4000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" control="$ctl" timeout=5 verify-rate=0
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# 1.
write_random "$c_uri" "$expected" 0 "$MiB"                     # A

# 2.
"$NBDREP" verify "$ctl" --repair-from=1
wait_until 30 grep -q 'verify: pausing' "$tmpdir/c.log"

# 3.  (The pause is 4 s; this takes well under a second.)
session_open
r=$(session_ask '{"cmd":"backup-begin","base":null}')
reply_check "$r" "r['ok'] and r['consistency'] == 'point-in-time' and
  r['leg'] == 1"
t=$(reply_get "$r" token)
write_random "$c_uri" "$expected" 0 $(( 64 * KiB ))            # W
status_check "$ctl" "leg(1)['state'] == 'stale' and
  s['volume']['verify']['state'] == 'running'"

# 4.
wait_until 30 grep -q 'verify: pause over' "$tmpdir/c.log"
wait_until 30 status_check "$ctl" "s['volume']['verify']['state'] != 'running'"

compare_legs "$expected" "$c_uri" "$r0_uri"
status_check "$ctl" "s['volume']['verify']['state'] == 'failed' and
  s['volume']['verify']['mismatched_bytes'] == 0 and
  s['volume']['verify']['repaired_bytes'] == 0"

r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$t\",\"result\":\"done\"}")
reply_check "$r" "r['ok']"
session_close
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
