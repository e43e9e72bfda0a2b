#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A write that the only uptodate leg fails but a syncing leg takes must
# not stay on the syncing leg alone (io.c, fail_lone_takers; found by the
# fault campaign, seed 5).
#
# Two file legs, leg 0 behind the faultinject filter, leg 1 too.  Leg 1
# is away while Y is written, then comes back: its incremental resync
# copies Y and stalls in its last flush (leg 1's flushes are held 4 s).
# Meanwhile a write W to X, which leg 1 holds already, is refused by leg
# 0 (EIO) and lands on leg 1: the client gets EIO, leg 0 (the last
# uptodate leg) is failed.  Leg 0 comes back uptodate (nothing can have
# been acknowledged without it), then leg 1's flush ends.  Before the
# fix leg 1 then finished its resync and was uptodate too, holding W
# where leg 0 did not: the legs differed.  Now leg 1 is failed with W's
# range in its bitmap and resyncs it from leg 0.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))
X=$(( 8 * MiB ))
Y=$(( 20 * MiB ))
len=$(( 64 * 1024 ))

start_replica 0 -- --filter="$FAULTINJECT" rules="$tmpdir/r0.rules" \
  log="$tmpdir/r0.faults"
start_replica 1 -- --filter="$FAULTINJECT" rules="$tmpdir/r1.rules" \
  log="$tmpdir/r1.faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=10
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 16 * MiB ))

kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$tmpdir/expected" "$Y" "$len"
fault_arm "$tmpdir/r1.rules" "id=fl op=flush phase=hold secs=4 count=0"
restart_replica 1
wait_until 30 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and
  leg(1)['resync']['done'] >= leg(1)['resync']['total']"
fault_wait "$tmpdir/r1.faults" fl fire 10

fault_arm "$tmpdir/r0.rules" \
  "id=w op=write range=$X-$(( X + len )) phase=refuse error=EIO count=1"
expect_error "$c_uri" EIO "h.pwrite(bytes([0x5a]) * $len, $X)"
fault_clear "$tmpdir/r0.rules"
fault_clear "$tmpdir/r1.rules"
wait_volume_state 60 "$ctl" healthy

# W was not acknowledged: old or new, but the same on both legs.
"$NBDSH" -u "$r0_uri" -c "
with open('$tmpdir/expected', 'r+b') as f:
    f.seek($X)
    f.write(h.pread($len, $X))
"
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
