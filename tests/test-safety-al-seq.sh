#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The activity logs written to a leg that joins a running controller
# must be newer than those the leg holds from an earlier life (DESIGN.md
# section 5; metaio_learn_al_seq in metaio.c).  Of a log's two copies the
# one with the higher seq wins when it is read back after a crash; a leg
# whose seq the controller took to be 0 kept its old log current, so
# crash recovery would have read a stale list of hot extents from it.
#
# Two file legs.  A few controller runs over both give leg 1's logs a
# seq of some height.  Then leg 1 is away while a controller starts on
# leg 0 alone (force=true); it comes back, is resynced and becomes
# uptodate, writes go on: the current copy of its log (nbdrep inspect)
# must be one this controller wrote, with a seq above the old one.

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

# al_seq URI: the seq of the current copy of the leg's activity log.
al_seq ()
{
  "$NBDREP" inspect "$1" --json | python3 -c '
import json, sys
al = json.load(sys.stdin)["activity_log"]
print(al["copies"][al["copy"]]["seq"])
'
}

start_replica 0
start_replica 1
for run in 1 2 3 4; do
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
  wait_volume_state 30 "$ctl" healthy
  [ -e "$expected" ] || new_expected "$expected" "$c_uri"
  write_random "$c_uri" "$expected" $(( run * 4 * MiB )) 65536
  stop_controller c
done
old=$(al_seq "$r1_uri")
[ "$old" -ge 6 ]

# Leg 1 away at the start; it joins the running controller.
stop_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" wait=0 \
  force=true
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" $(( 20 * MiB )) 65536
restart_replica 1
wait_volume_state 60 "$ctl" healthy
write_random "$c_uri" "$expected" $(( 40 * MiB )) 65536
write_random "$c_uri" "$expected" $(( 44 * MiB )) 65536

new=$(al_seq "$r1_uri")
if [ "$new" -le "$old" ]; then
  echo "$0: leg 1's current activity log (seq $new) is the one of its" \
       "earlier life (seq $old): the logs written since are older" >&2
  exit 1
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
