#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep resync --full races the engine's own judgement (nbdrep(1)
# resync, fail).  Two defects:
#
#  (a) `nbdrep resync CTL N --full` of an uptodate leg fails it first,
#      but, unlike `nbdrep fail`, was not refused when the leg was the
#      last uptodate one, or when fewer uptodate legs than quorum would
#      remain: the volume failed (or turned read-only), and the last
#      leg, back holding the generation, rejoined as uptodate with no
#      rebuild at all, the command having answered success.  Now both
#      are refused with the messages of `nbdrep fail`, and nothing
#      changes.
#  (b) `nbdrep resync CTL N --full` of a stale leg whose incremental
#      resync was starting (its kind judged when it came back; held
#      here before it receives writes by -D replicate.resume_pause)
#      answered success, but the resync went on incremental, and the
#      full request lingered for its next return.  Now the resync is
#      restarted as a full one (the incremental one stopped, the leg
#      failed and judged again): every chunk of the volume copied or
#      zeroed.
#  (c) `nbdrep resync CTL N --full` of the failed leg that may hold the
#      newest data (no leg uptodate: the volume has failed, and N is a
#      member of the last recorded generation) answered success, and
#      the leg came back uptodate without the rebuild (there is no
#      source).  Now it is refused, saying why, and nothing changes.
#
# Three 32 MiB file legs, quorum=2 (then two, for (a) and (c)).  After
# each step the oracle.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

MiB=1048576
ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" 32M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5 quorum=2 -D replicate.resume_pause=3000
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))

# --- (a) Leg 2 away: rebuilding leg 0 would leave one uptodate leg,
# fewer than quorum.
"$NBDREP" fail "$ctl" 2
kill_replica 2
gen=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
expect_refusal 1 '^nbdrep: resync: rebuilding leg 0 would leave fewer uptodate legs than quorum (the volume would turn read-only)$' \
  resync "$ctl" 0 --full
sleep 1
status_check "$ctl" "leg(0)['state'] == 'uptodate' and
  leg(1)['state'] == 'uptodate' and s['volume']['state'] == 'degraded' and
  s['volume']['generation'] == $gen and leg(0)['last_resync'] is None"
write_random "$c_uri" "$tmpdir/expected" $(( 10 * MiB )) $MiB
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri"

# --- (b) Leg 2 back: its incremental resync is held before it
# receives writes, stale; a full resync is asked for meanwhile.
# paused N: at least N resyncs have reached their hold so far.
paused () { test "$(grep -c 'resync: pausing' "$tmpdir/c.log")" -ge "$1"; }
pauses=$(grep -c 'resync: pausing' "$tmpdir/c.log" || :)
restart_replica 2
wait_leg_state 10 "$ctl" 2 stale
wait_until 10 paused $(( pauses + 1 ))
"$NBDREP" resync "$ctl" 2 --full
wait_leg_state 30 "$ctl" 2 uptodate
status_check "$ctl" "leg(2)['last_resync']['kind'] == 'full' and
  leg(2)['last_resync']['bytes'] + leg(2)['last_resync']['zeroed'] == $size and
  s['volume']['state'] == 'healthy'"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"
# The request is spent: leg 2 failed again comes back incrementally.
"$NBDREP" fail "$ctl" 2
write_random "$c_uri" "$tmpdir/expected" $(( 20 * MiB )) $MiB
wait_until 10 status_check "$ctl" "leg(2)['state'] == 'uptodate' and
  leg(2)['last_resync']['kind'] == 'incremental'"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c

# --- (a) The last uptodate leg (quorum 1): refused, the volume keeps it.
ctl=$tmpdir/d.ctl
for i in 3 4; do start_replica "$i" 32M; done
start_controller d "$PLUGIN" "$r3_uri" "$r4_uri" control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$d_uri"
write_random "$d_uri" "$tmpdir/expected" 0 $(( 4 * MiB ))
"$NBDREP" fail "$ctl" 1
kill_replica 4
expect_refusal 1 '^nbdrep: resync: leg 0 is the last uptodate leg: rebuilding it would fail the volume$' \
  resync "$ctl" 0 --full
sleep 1
status_check "$ctl" "leg(0)['state'] == 'uptodate' and
  s['volume']['state'] == 'degraded'"
write_random "$d_uri" "$tmpdir/expected" $(( 2 * MiB )) $MiB
compare_legs "$tmpdir/expected" "$r3_uri"
if grep -q 'the volume has failed' "$tmpdir/d.log"; then
  echo "$0: the volume failed" >&2
  exit 1
fi
stop_controller d

# (c) The volume failed: leg 1 first, then leg 0, the last to fail.
ctl=$tmpdir/e.ctl
for i in 5 6; do start_replica "$i" 32M; done
start_controller e "$PLUGIN" "$r5_uri" "$r6_uri" control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$e_uri"
write_random "$e_uri" "$tmpdir/expected" 0 $(( 2 * MiB ))
kill_replica 6
write_random "$e_uri" "$tmpdir/expected" $(( 2 * MiB )) $MiB
wait_leg_state 10 "$ctl" 1 failed
kill_replica 5
"$NBDSH" -u "$e_uri" -c "
try:
    h.pwrite(b'x' * 4096, 8 * $MiB)
    h.flush()
except nbd.Error:
    pass
"
wait_volume_state 10 "$ctl" failed
expect_refusal 1 '^nbdrep: resync: leg 0 may hold the newest data (no leg is uptodate, and it is a member of the last recorded generation): a full resync has no source now; ask again once another leg is uptodate$' \
  resync "$ctl" 0 --full
restart_replica 5
wait_leg_state 30 "$ctl" 0 uptodate
restart_replica 6
wait_volume_state 30 "$ctl" healthy
compare_legs "$tmpdir/expected" "$e_uri" "$r5_uri" "$r6_uri"
