#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg that fails the flush a backup-begin sends it before holding it
# out is failed, as a failed client flush fails a leg, not left uptodate
# with writes it may lose (backup.c, hold_leg).
#
# Three file legs, leg 2 behind the faultinject filter.  With the
# activity log cold (no flush of the engine's own comes in between),
# leg 2 is armed to refuse flushes, and backup-begin picks it to hold:
# the backup goes live (the reply says why), leg 2 is failed with the
# flush's error; once the rule is gone it resyncs, and the legs equal
# what was written.

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
MiB=$(( 1024 * 1024 ))

start_replica 0
start_replica 1
start_replica 2 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

fault_arm "$rules" "id=fl op=flush phase=refuse error=EIO count=0"
r=$(python3 "$abs_top_srcdir/tests/control-session.py" "$ctl" \
      <<<'{"cmd":"backup-begin","base":null}')
echo "$r"
fault_wait "$faults" fl fire 5
python3 -c '
import json, sys
r = json.loads(sys.argv[1])
if not r["ok"] or r["consistency"] == "point-in-time":
    sys.exit("expected a live backup after the failed flush: %s" % sys.argv[1])
' "$r"
status_check "$ctl" "leg(2)['state'] in ('failed', 'stale', 'syncing') and
  'flush failed' in (leg(2)['last_error'] or '') and
  leg(0)['state'] == 'uptodate' and leg(1)['state'] == 'uptodate'"

# (The backup ended with its control connection.)
fault_clear "$rules"
write_random "$c_uri" "$tmpdir/expected" $(( 16 * MiB )) $(( 1 * MiB ))
wait_volume_state 60 "$ctl" healthy
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
