#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A slot's bm_gen and the pages of its bitmap (metaio.c, the design
# note): a page on disk under another bm_gen than the one the winners'
# superblock records reads as empty.  A full resync gives its target's
# slot a new bm_gen (resync.c, new_bm_gen); two crash windows around it,
# each driven here with kill -9 of the controller:
#
# A. The new bm_gen must not be set before the target's own superblock
#    holds it: if marking the target inconsistent fails (claim_target),
#    the pages written meanwhile under the new bm_gen (by the activity
#    log's cooler) read as empty under the old one, which the winners
#    still record and the target still holds: after a crash it resumes
#    incrementally from an empty bitmap.
# B. The new bm_gen must not be recorded in a superblock before every
#    page of the slot is written under it (metaio_defer_bm_gen): a
#    generation bump made meanwhile for another reason (here another
#    leg's failure) recorded it while the pages were still under the old
#    one; after a crash the target, whose superblock holds the new bm_gen
#    (inconsistent), resumed incrementally from pages that read as empty.
# Either way the target was called uptodate without its data.
#
# Three 32 MiB file legs, leg 2 behind the faultinject filter.
#   A1. data; leg 2 killed; B1 written (leg 2 misses it) and the log
#       cooled (slot 2's page marks B1); every write to leg 2 refused;
#       leg 2 back with its old image and `nbdrep resync CTL 2 --full`:
#       its claim fails writing its superblock; W written and the log
#       cooled (the cooler writes slot 2's pages);
#   A2. kill -9 the controller, rules cleared, a new controller (with
#       -D replicate.claim_pause=30000, for B): once healthy, the oracle.
#   B1. leg 2 killed; once the log is cold (its cooler would write the
#       new pages and close the window), leg 2 back BLANK (a replacement
#       disk): its full resync gives slot 2 a new bm_gen and pauses
#       before writing the pages;
#   B2. in the pause, leg 1 is killed: its failure is recorded by a
#       generation bump, the other superblock write inside the window;
#   B3. kill -9 the controller (still in the pause); leg 1 back, a new
#       controller (no pause): once healthy, the oracle, and leg 2 was
#       rebuilt fully (the bump recorded slot 2's old bm_gen, which is
#       not the generation leg 2 holds).
# Before the fix: in A, leg 2 resumed "incrementally" with 0 bytes to
# copy and kept its old data where B1 and W were written; in B, it
# resumed "incrementally" with 0 bytes and was uptodate holding zeroes.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))

# _cold: is no activity-log extent hot?  (Its cooler writes every dirty
# bitmap page.)
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}

# _gen_above N: is the volume's generation above N?
_gen_above ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['generation']")" -gt "$1" ]
}

# _resyncs: show how the legs were resynced after the last start.
_resyncs ()
{
  grep -E 'is stale|resync of' "$tmpdir/c.log" | tail -n 3 || :
}

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=3
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$(( 4 * MiB ))"
write_random "$c_uri" "$expected" "$(( 20 * MiB ))" "$(( 4 * MiB ))"

# A1.
kill_replica 2
wait_leg_state 30 "$ctl" 2 failed
write_random "$c_uri" "$expected" "$(( 8 * MiB ))" "$MiB"        # B1
wait_until 30 _cold
fault_arm "$rules" "id=sb op=write phase=refuse error=EIO count=0"
restart_replica 2
"$NBDREP" resync "$ctl" 2 --full
fault_wait "$faults" sb fire 30
write_random "$c_uri" "$expected" "$(( 12 * MiB ))" "$MiB"       # W
wait_until 30 _cold

# A2.
kill_controller c
fault_clear "$rules"
start_controller c -D replicate.claim_pause=30000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" timeout=3
wait_volume_state 60 "$ctl" healthy
_resyncs
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# B1.
kill_replica 2
wait_leg_state 30 "$ctl" 2 failed
wait_until 30 _cold
rm -f "$tmpdir/r2.img"
restart_replica 2
"$NBDREP" resync "$ctl" 2                         # reconnect it now
wait_until 30 grep -q 'resync claim: pausing' "$tmpdir/c.log"

# B2.
gen=$(nbdrep_status_get "$ctl" "s['volume']['generation']")
kill_replica 1
wait_leg_state 20 "$ctl" 1 failed
wait_until 20 _gen_above "$gen"
status_check "$ctl" "leg(2)['state'] == 'stale'"

# B3.
kill_controller c
restart_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=3
wait_volume_state 60 "$ctl" healthy
_resyncs
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
status_check "$ctl" "leg(2)['last_resync'] is not None and
  leg(2)['last_resync']['kind'] == 'full' and
  leg(2)['last_resync']['bytes'] + leg(2)['last_resync']['zeroed'] == $size"
