#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep fail, resync --full and remove refuse to take out the last
# uptodate leg (nbdrep(1)).  The check must hold when the state changes,
# not only when the command begins: another leg may fail in between.
# Here it does, every time: -D replicate.refusal_pause=3000 holds each
# command for 3 s between its first check (leg 1 still uptodate) and
# taking leg 0 out; meanwhile replica 1 is killed and a client write
# fails leg 1, leaving leg 0 the last uptodate leg.  Each command must
# then be refused, leg 0 stay uptodate and the volume degraded, its
# writes acknowledged; once leg 1 is back, the oracle.
#
# The control thread serves one request at a time, so while a command
# is held the test watches the controller's log, not nbdrep status.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
MiB=$(( 1024 * 1024 ))

start_replica 0 16M
start_replica 1 16M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  timeout=5 -D replicate.refusal_pause=3000
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$MiB"

# pauses_of WHAT: how many holds of WHAT ("failing" ...) have begun.
pauses_of ()
{
  grep -c "$1: pausing 3000 ms" "$log" || :
}

# more_pauses WHAT N: has a hold of WHAT begun since there were N?
more_pauses ()
{
  test "$(pauses_of "$1")" -gt "$2"
}

# race CASE WHAT NBDREP-ARGS...: run the command, fail leg 1 while it
# is held, and require its refusal.
race ()
{
  local case=$1 what=$2 out=$tmpdir/nbdrep.$1 pauses rc=0
  shift 2
  pauses=$(pauses_of "$what")
  "$NBDREP" "$@" >"$out" 2>&1 &
  local cmd=$!
  wait_until 30 more_pauses "$what" "$pauses"
  kill_replica 1
  # This write fails leg 1 (and is acknowledged: leg 0 is uptodate).
  write_random "$c_uri" "$expected" $(( case * 2 * MiB )) "$MiB"
  grep -q 'leg 1 .*failed' "$log"
  wait "$cmd" || rc=$?
  cat "$out"
  if [ "$rc" -eq 0 ]; then
    echo "$0: $case: '$*' took out the last uptodate leg"
    exit 1
  fi
  grep -q 'last uptodate leg' "$out"
  test "$(leg_state "$ctl" 0)" = uptodate
  test "$(volume_state "$ctl")" = degraded
  write_random "$c_uri" "$expected" $(( case * 2 * MiB + MiB )) "$MiB"
  restart_replica 1
  "$NBDREP" resync "$ctl" 1
  wait_volume_state 60 "$ctl" healthy
  compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
}

race 1 failing fail "$ctl" 0
race 2 rebuilding resync --full "$ctl" 0
race 3 remove remove "$ctl" 0
