#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg added while a verify runs is compared (and repaired) like the
# others once it is uptodate (nbdrep(1) verify, add).  The defect: the
# verify had a read buffer only for the legs the volume had when it
# began, and read a leg added since into a null buffer: the controller
# died of a segmentation fault at the first run after the new leg's
# resync was done.
#
# Two 32 MiB file legs, 8 MiB of data; `nbdrep verify --repair-from=0`
# is held before its first run (-D replicate.verify_pause); meanwhile
# `nbdrep add` of a blank replica: full resync, uptodate.  Still before
# the first run, one 4 KiB block of the new leg is corrupted behind the
# controller's back.  The verify then compares three legs: it finds
# that block on leg 2 alone, repairs it from the majority, and ends
# done; the controller is alive and the oracle holds on all three legs.

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
for i in 0 1 2; do start_replica "$i" 32M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" \
  control="$ctl" timeout=5 verify-rate=0 -D replicate.verify_pause=8000
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))

"$NBDREP" verify "$ctl" --repair-from=0
status_check "$ctl" "s['volume']['verify']['state'] == 'running' and
  s['volume']['verify']['done'] == 0"

# The leg joins while the verify waits before its first run.
test "$("$NBDREP" add "$ctl" "$r2_uri")" = 2
wait_leg_state 20 "$ctl" 2 uptodate
bad=$(( 5 * MiB + 8 * KiB ))
head -c 4096 /dev/urandom >"$tmpdir/junk"
dd if="$tmpdir/junk" of="$tmpdir/r2.img" bs=4096 seek="$bad" \
  oflag=seek_bytes conv=notrunc status=none
# Still before the first run: the verify compares three legs.
status_check "$ctl" "s['volume']['verify']['state'] == 'running' and
  s['volume']['verify']['done'] == 0 and s['volume']['uptodate'] == 3"

wait_until 30 status_check "$ctl" "s['volume']['verify']['state'] != 'running'"
status_check "$ctl" "s['volume']['verify']['state'] == 'done' and
  [(m['offset'], m['length'], m['legs'])
   for m in s['volume']['verify']['mismatches']] == [($bad, 4096, [2])] and
  s['volume']['verify']['repaired_bytes'] == 4096 and
  s['volume']['state'] == 'healthy'"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"
write_random "$c_uri" "$tmpdir/expected" $(( 20 * MiB )) $MiB
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c
