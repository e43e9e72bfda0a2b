#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep remove of an asynchronous leg whose server holds a write, and
# the same server added back at once as a synchronous leg (DESIGN.md
# sections 13 and 14): the held write must not land on it after it has
# been synced and made uptodate.
#   1. W1 to X, flushed: the asynchronous leg's server holds it (8 s);
#   2. nbdrep remove takes leg 2 out; no client request fails;
#   3. nbdrep add of the same server is refused while W1 is held (its
#      server has not closed the aborted connection);
#   4. W2 to X, flushed, acknowledged while W1 is still held;
#   5. once W1 has landed, nbdrep add is accepted (a new leg, a full
#      sync), and once the volume is healthy every leg holds W2.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected
X=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
# timeout=3: nbdrep remove waits up to timeout= for the leg's requests
# in flight to be answered (leg_close_answered); W1, held 8 s, must
# outlast that wait, so that its connection is cut with W1 unanswered.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" timeout=3
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$len"

# 1, 2.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=8 count=1"
write_random "$c_uri" "$expected" "$X" "$len"
fault_wait "$faults" late fire 10
fault_clear "$rules"
"$NBDREP" remove "$ctl" 2
status_check "$ctl" 'leg(2)["state"] == "removed"'
write_random "$c_uri" "$expected" $(( 2 * X )) "$len"

# 3, 4.
if "$NBDREP" add "$ctl" "$r2_uri" 2>"$tmpdir/add.err"; then
  echo "$0: the leg was added back while a write sent to it was held"
  exit 1
fi
grep 'aborted connection' "$tmpdir/add.err"
write_random "$c_uri" "$expected" "$X" "$len"
! _fault_logged "$faults" done late

# 5.
fault_wait "$faults" late done 30
wait_until 30 "$NBDREP" add "$ctl" "$r2_uri"
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
