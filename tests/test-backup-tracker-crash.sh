#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A crash just after the changed-block tracker's slot was given to a new
# leg (backup.c, backup_yield_tracker_slot; slots.c, slots_release).
# Until a superblock says the slot is free, a restart finds the tracker
# and the last backup's base, and the next backup gets only the changes
# its bitmap holds; so every write must still be marked there, and
# written, until then.  Before the fix the slot was freed in memory
# only: a write made after the hand-off and cooled was missing from the
# changes the next backup was given after kill -9 and a restart.
#   1. One leg, max-legs=2: a backup (backup-begin, backup-end done)
#      sets the base; write W1.
#   2. nbdrep add of a slow leg (a delay filter, so that preparing its
#      resync, which records the slot's new owner, takes a while): it
#      gets the tracker's slot; write W2, cooled; kill -9.
#   3. Restart with the first leg: backup-begin with the old base gets
#      every change since (W1 and W2), or null (read everything).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

KiB=1024
MiB=1048576
ctl=$tmpdir/c.ctl
log=$tmpdir/c.log
expected=$tmpdir/expected

start_replica 0 64M
start_replica 1 64M -- --filter=delay delay-write=15

# 1.
start_controller c "$PLUGIN" "$r0_uri" control="$ctl" max-legs=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 8 * MiB ))
session_open
r=$(session_ask '{"cmd":"backup-begin","base":null}')
token=$(reply_get "$r" token)
r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$token\",\"result\":\"done\"}")
session_close
write_random "$c_uri" "$expected" $(( 2 * MiB )) $(( 64 * KiB ))
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

# 2.
"$NBDREP" add "$ctl" "$r1_uri"
wait_until 30 grep -q 'backup: slot 1 given to a new leg' "$log"
write_random "$c_uri" "$expected" $(( 20 * MiB )) $(( 64 * KiB ))
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"
sleep 3
kill_controller c

# 3.
start_controller c "$PLUGIN" "$r0_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri"
session_open
r=$(session_ask "{\"cmd\":\"backup-begin\",\"base\":\"$token\"}")
session_close
reply_check "$r" 'r["changed"] is None or
  (any(e[0] <= 2 * 1048576 < e[0] + e[1] for e in r["changed"]) and
   any(e[0] <= 20 * 1048576 < e[0] + e[1] for e in r["changed"]))'
