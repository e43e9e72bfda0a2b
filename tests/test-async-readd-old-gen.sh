#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg removed and added back with its own storage must
# rejoin (nbdrep add --async), whatever the number of generations the
# volume went through while the leg was present.  Found by the fault
# campaign (torture.py with its asynchronous leg: TORTURE_SEED=3003
# TORTURE_SHAPE=filter, round 7: nbdrep add --async refused 2 s after
# nbdrep remove, "holds generation 5 which this volume never had (split
# brain)", and the leg never came back).
#
# The asynchronous leg's generation is the one its bitmap counts from:
# set by a full resync only (resync.c, claim_target), never advanced by
# its incremental catch-ups, and it never becomes a member.  So while
# the synchronous legs fail and come back, its generation falls out of
# the volume's history (32 generations); the monitor then judges its
# own storage, once removed (its slot freed), as holding a generation
# the volume never had (monitor.c, judge_sb_locked: V_REFUSE) although
# the volume had it, and although the man page says such a leg
# "resyncs fully".
#
# Two synchronous legs and an asynchronous one; leg 1 is failed and
# resynced until the volume's generation is 40 past its start; the
# asynchronous leg is removed and added back at once; it must catch up
# and then equal the synchronous legs.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 1048576

gen=$(nbdrep_status_get "$ctl" "s['volume']['generation']")
target=$((gen + 40))
while [ "$(nbdrep_status_get "$ctl" "s['volume']['generation']")" -lt "$target" ]
do
  "$NBDREP" fail "$ctl" 1
  "$NBDREP" resync "$ctl" 1
  wait_leg_state 60 "$ctl" 1 uptodate
done
# The asynchronous leg has been present all along, replicating.
write_random "$c_uri" "$expected" 2097152 1048576
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
"$NBDREP" inspect "$r2_uri" | grep -E '^ *generation'

"$NBDREP" remove "$ctl" 2
"$NBDREP" add "$ctl" "$r2_uri" --async

# It rejoins: a leg with that URI that is not removed, replicating,
# nothing queued after a flush, equal to the others.
async_leg='next(l for l in s["legs"] if l["uri"] == "'"$r2_uri"'" and l["state"] != "removed")'
wait_until 60 status_check "$ctl" \
  "($async_leg)['async'] is not None and ($async_leg)['async']['state'] == 'replicating' and ($async_leg)['resync'] is None"
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" "($async_leg)['async']['lag_bytes'] == 0"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
