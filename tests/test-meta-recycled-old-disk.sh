#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg whose slot was given to another disk comes back, after a
# restart, with its old disk: it is rebuilt fully as a new member, never
# judged by the slot it names (nbdkit-replicate-plugin(1), ELECTION,
# rule 5: "fully ... if its slot is no longer its own (a leg removed,
# then added back)"; max-legs=: "A leg whose slot was given away is
# rebuilt fully if it ever comes back, never judged against its old
# data").
#   1. Legs 0, 1 and 2 (r0-r2): write A.  nbdrep remove 2; nbdrep add
#      of a blank disk (r3): it takes slot 2, leg 2's.  Write B (r2 has
#      not got it).  Clean stop.
#   2. Start with r0, r1, r3 and r2 (the old disk, leg 3 now): its
#      superblock names slot 2, which r3 owns (a member, its bitmap
#      empty): leg 3 must be rebuilt fully (the log says so, its last
#      resync is "full", it has a new leg UUID and a slot of its own).
#   3. The oracle: A and B on every leg.  An incremental resync from
#      slot 2's bitmap would copy nothing: r2 would lack B.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
M=$(( 1024 * 1024 ))

start_replica 0 16M
start_replica 1 16M
start_replica 2 16M
start_replica 3 16M

# 1.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"                             # A
old_uuid=$(nbdrep_status_get "$ctl" \
             'next(l["uuid"] for l in s["legs"] if l["index"] == 2)')
"$NBDREP" remove "$ctl" 2
"$NBDREP" add "$ctl" "$r3_uri"
wait_until 60 status_check "$ctl" \
  'leg(3)["state"] == "uptodate" and s["volume"]["state"] == "healthy"'
status_check "$ctl" 'leg(3)["slot"] == 2'
write_random "$c_uri" "$expected" $(( 4 * M )) "$M"                  # B
stop_controller c

# 2.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r3_uri" "$r2_uri" \
  control="$ctl"
wait_until 60 status_check "$ctl" \
  'leg(3)["state"] == "uptodate" and s["volume"]["state"] == "healthy"'
grep "leg 3 (nbd.*r2.sock) is stale: full resync" "$log"
! grep "r2.sock.*incremental" "$log"
status_check "$ctl" "
  leg(3)['last_resync']['kind'] == 'full' and
  leg(3)['uuid'] != '$old_uuid' and
  leg(2)['slot'] == 2 and leg(3)['slot'] not in (0, 1, 2) and
  all(leg(i)['state'] == 'uptodate' for i in range(4))"

# 3.
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r3_uri" "$r2_uri"
