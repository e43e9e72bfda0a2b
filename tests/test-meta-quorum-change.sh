#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# quorum= is recorded in the metadata; a start's election uses the
# recorded value, and a different quorum= given then is recorded with
# the start's new generation and used from then on
# (nbdkit-replicate-plugin(1), quorum=; ELECTION, rule 6: with M
# members and quorum Q "as recorded", M - Q + 1 must be reachable).
#   1. Three legs created with quorum=2: recorded (nbdrep inspect).
#      Write A.  Clean stop.
#   2. Leg 2's server stopped; start with quorum=1 (no force): the
#      election uses the recorded 2 (2 of the 3 members are enough,
#      where quorum 1 would need all 3), and the start records 1 (the
#      log, status, and nbdrep inspect of legs 0 and 1).  Used: with
#      leg 1 killed too, one uptodate leg still takes writes (B).
#   3. Legs 1 and 2 back and resynced; clean stop.  A start without
#      quorum= and leg 2's server stopped must be refused: the recorded
#      quorum 1 needs all 3 members.
#   4. A start with every leg: quorum 1 still; the oracle (A, B).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
log=$tmpdir/c.log
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

# nbdkit as start_controller runs it (with the sanitizer's runtime).
nbdkit_cmd=("$NBDKIT")
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" "$NBDKIT")
fi

# recorded_quorum URI: the quorum leg URI's superblock records.
recorded_quorum ()
{
  "$NBDREP" inspect "$1" | awk '$1 == "quorum" { print $2; exit }'
}

start_replica 0 16M
start_replica 1 16M
start_replica 2 16M

# 1.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" quorum=2 \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"                            # A
stop_controller c
for u in "$r0_uri" "$r1_uri" "$r2_uri"; do
  [ "$(recorded_quorum "$u")" = 2 ]
done

# 2.
stop_replica 2
if ! start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" quorum=1 \
       wait=2 control="$ctl"; then
  echo "$0: refused: the election did not use the recorded quorum 2"
  exit 1
fi
wait_until 30 status_check "$ctl" \
  'leg(0)["state"] == "uptodate" and leg(1)["state"] == "uptodate"'
grep 'quorum changed from 2 to 1' "$log"
status_check "$ctl" 's["volume"]["quorum"] == 1'
[ "$(recorded_quorum "$r0_uri")" = 1 ]
[ "$(recorded_quorum "$r1_uri")" = 1 ]
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" $(( 4 * M )) "$M"                 # B
status_check "$ctl" 's["volume"]["state"] == "degraded"'

# 3.
restart_replica 1
restart_replica 2
wait_volume_state 60 "$ctl" healthy
stop_controller c
stop_replica 2
rc=0
run_bounded "$tmpdir/refused.log" 'cannot start the volume' 60 \
  "${nbdkit_cmd[@]}" -f -U "$tmpdir/refused.sock" "$PLUGIN" \
  "$r0_uri" "$r1_uri" "$r2_uri" wait=2 || rc=$?
cat "$tmpdir/refused.log"
if [ "$rc" -eq 0 ] ||
   ! grep -q 'only 2 of the 3 members .* (quorum 1 needs 3)' \
     "$tmpdir/refused.log"; then
  echo "$0: the start without leg 2 was not refused by the recorded quorum 1"
  exit 1
fi

# 4.
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" 's["volume"]["quorum"] == 1'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
