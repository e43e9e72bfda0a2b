#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Maintenance of a leg with nbdrep fail and nbdrep resync (DESIGN.md
# sections 7 and 9, nbdrep(1)), on three 64 MiB file legs:
#
#  - `nbdrep fail CTL 1` with the activity log cold: leg 1 is failed at
#    once ("failed by the operator", generation bumped, volume degraded);
#    its replica is then taken down for maintenance and writes go on
#    (6 writes spanning 5 + 16 + 1 + 2 + 1 + 1 chunks, the last two in one
#    copy run with a gap); the replica comes back
#    and the controller reconnects it by itself, with no nbdrep
#    command: an incremental resync of exactly the chunks written
#    meanwhile (26 * 64 KiB, each copied once), then uptodate;
#  - `nbdrep resync CTL 1` of the uptodate leg is refused (exit 1, with
#    the message saying to ask for a full resync); `nbdrep resync CTL 1
#    --full` rebuilds it: syncing (kind full, total the volume size),
#    then uptodate with last_resync.kind full and bytes copied plus
#    zeroed equal to the volume size;
#  - a syncing leg may be failed too: it comes back and resumes from
#    its last checkpoint (an incremental resync of what was left);
#  - errors: fail and resync of a removed leg (exit 1, the controller's
#    message).
#
# After each step the oracle: every uptodate leg equals what the client
# wrote, and no write failed.

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
chunk=$(( 64 * KiB ))
ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" 64M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$tmpdir/expected" "$c_uri"

write_random "$c_uri" "$tmpdir/expected" 0 $(( 16 * MiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 48 * MiB )) $(( 4 * MiB ))
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

# --- fail for maintenance.
gen=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
"$NBDREP" fail "$ctl" 1
# The monitor reconnects a failed leg after 1 s: take the replica down
# at once, as the operator servicing it would.
kill_replica 1
status_check "$ctl" "leg(1)['state'] == 'failed' and
  leg(1)['last_error'] == 'failed by the operator' and
  s['volume']['state'] == 'degraded' and s['volume']['uptodate'] == 2 and
  s['volume']['generation'] > $gen and
  leg(0)['state'] == 'uptodate' and leg(2)['state'] == 'uptodate'"
"$NBDREP" status "$ctl" >"$tmpdir/status" || test $? -eq 3
cat "$tmpdir/status"
grep -Eq '^1 +failed +- ' "$tmpdir/status"
writes1=$(nbdrep_status_get "$ctl" 's["legs"][1]["writes"]')

# Writes go on while it is away: 256 KiB at an unaligned offset (5
# chunks), 1 MiB aligned (16), 4 KiB (1), 68 KiB across a boundary (2),
# and two chunks of one 1 MiB copy run with a clean chunk between them
# (each copied once).
write_random "$c_uri" "$tmpdir/expected" $(( 8 * MiB + 100 * KiB )) $(( 256 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 40 * MiB )) $MiB
write_random "$c_uri" "$tmpdir/expected" $(( 20 * MiB + 4 * KiB )) $(( 4 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 30 * MiB + 60 * KiB )) $(( 68 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 44 * MiB )) $(( 4 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 44 * MiB + 128 * KiB )) $(( 4 * KiB ))
missed=$(( 26 * chunk ))
status_check "$ctl" "leg(1)['state'] == 'failed' and
  leg(1)['writes'] == $writes1 and s['volume']['state'] == 'degraded'"

# The replica is back; the controller finds it by itself.
restart_replica 1
wait_leg_state 40 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'incremental' and
  leg(1)['last_resync']['bytes'] + leg(1)['last_resync']['zeroed'] == $missed and
  leg(1)['writes'] > $writes1"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- resync of an uptodate leg: refused without --full.
expect_refusal 1 '^nbdrep: resync: leg 1 is uptodate: nothing to resync (ask for a full resync to rebuild it anyway)$' \
  resync "$ctl" 1
status_check "$ctl" "leg(1)['state'] == 'uptodate' and
  leg(1)['last_resync']['kind'] == 'incremental'"

# --- resync --full rebuilds it (slowly at first, so it is seen).
"$NBDREP" set "$ctl" resync-rate 16M
gen=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
"$NBDREP" resync "$ctl" 1 --full
wait_until 10 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and leg(1)['resync']['total'] > 0"
status_check "$ctl" "leg(1)['resync']['kind'] == 'full' and
  leg(1)['resync']['total'] == $size and
  leg(1)['resync']['done'] < $size and
  s['volume']['state'] == 'degraded' and s['volume']['generation'] > $gen"
# A write while it rebuilds reaches it too.
write_random "$c_uri" "$tmpdir/expected" $(( 60 * MiB )) $(( 64 * KiB ))
"$NBDREP" set "$ctl" resync-rate 0
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'full' and
  leg(1)['last_resync']['bytes'] + leg(1)['last_resync']['zeroed'] == $size and
  leg(1)['last_resync']['bytes'] >= 20 * $MiB"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- A syncing leg can be failed: it comes back and resumes where its
# last checkpoint (every 2 s) left it, incrementally.  The volume's
# first 16 MiB are data (sparse regions are not charged to the rate):
# at 4 MiB/s, 12 MiB done is 3 s in, past a checkpoint of about 8 MiB.
"$NBDREP" set "$ctl" resync-rate 4M
"$NBDREP" resync "$ctl" 2 --full
wait_until 20 status_check "$ctl" "leg(2)['state'] == 'syncing' and
  leg(2)['resync'] is not None and leg(2)['resync']['done'] >= 12 * $MiB"
"$NBDREP" fail "$ctl" 2
status_check "$ctl" "leg(2)['state'] == 'failed' and
  leg(2)['last_error'] == 'failed by the operator'"
wait_until 10 status_check "$ctl" "leg(2)['state'] == 'syncing' and
  leg(2)['resync'] is not None and leg(2)['resync']['total'] > 0"
status_check "$ctl" "leg(2)['resync']['kind'] == 'incremental' and
  leg(2)['resync']['total'] <= $size - 4 * $MiB"
"$NBDREP" set "$ctl" resync-rate 0
wait_leg_state 40 "$ctl" 2 uptodate
wait_volume_state 10 "$ctl" healthy
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- Errors: a removed leg can be neither failed nor resynced.
"$NBDREP" remove "$ctl" 2
status_check "$ctl" "leg(2)['state'] == 'removed'"
expect_refusal 1 '^nbdrep: fail-leg: leg 2 is removed, not uptodate or syncing$' \
  fail "$ctl" 2
expect_refusal 1 '^nbdrep: resync: leg 2 is removed$' resync "$ctl" 2
expect_refusal 1 '^nbdrep: resync: leg 2 is removed$' resync "$ctl" 2 --full
status_check "$ctl" "leg(2)['state'] == 'removed' and
  s['volume']['state'] == 'healthy' and s['volume']['uptodate'] == 2"
write_random "$c_uri" "$tmpdir/expected" $(( 2 * MiB )) $(( 64 * KiB ))
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri"

# --- Errors: the last uptodate leg cannot be failed (like md, which
# keeps its last in-sync disk): with leg 1 failed, leg 0 is the last.
"$NBDREP" fail "$ctl" 1
kill_replica 1
status_check "$ctl" "leg(1)['state'] == 'failed' and s['volume']['uptodate'] == 1"
expect_refusal 1 '^nbdrep: fail-leg: leg 0 is the last uptodate leg: failing it would fail the volume$' \
  fail "$ctl" 0
status_check "$ctl" "leg(0)['state'] == 'uptodate'"
