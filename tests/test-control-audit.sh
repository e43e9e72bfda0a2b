#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Every control request that changes something is logged with the
# uid and pid of the process that sent it (SO_PEERCRED) and its
# outcome: membership changes (fail, resync, remove, add) always, as an
# nbdkit error line, a refused one with its reason; a setting as a debug
# line; status requests not at all.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

source "$abs_top_srcdir/tests/control-functions.sh"

uid=$(id -u)
start_control_volume
start_replica 2                 # added later

# nbdrep_pid ARGS...: run nbdrep ARGS... (exit status 0 or 1 both taken)
# and set $pid to its process id.
nbdrep_pid ()
{
  "$NBDREP" "$@" &
  pid=$!
  wait "$pid" || true
}

# logged LINE: the controller's log has exactly LINE (a fixed string)
# after nbdkit's prefix.
logged ()
{
  grep -qxF -- "$1" < <(sed -E 's/^nbdkit: ([a-z]+\[[0-9]+\]: )?//' "$tmpdir/c.log")
}

nbdrep_pid fail "$ctl" 1
logged "error: control: fail-leg from uid $uid pid $pid: {\"cmd\":\"fail-leg\",\"index\":1}: done"
wait_leg_state 60 "$ctl" 1 uptodate

nbdrep_pid resync "$ctl" 1 --full
logged "error: control: resync from uid $uid pid $pid: {\"cmd\":\"resync\",\"index\":1,\"full\":true}: done"
wait_leg_state 60 "$ctl" 1 uptodate

nbdrep_pid fail "$ctl" 7
logged "error: control: fail-leg from uid $uid pid $pid: {\"cmd\":\"fail-leg\",\"index\":7}: refused: no leg 7 (the volume has 2 legs)"

nbdrep_pid set "$ctl" resync-rate 8M
logged "debug: control: set from uid $uid pid $pid: {\"cmd\":\"set\",\"key\":\"resync-rate\",\"value\":\"8M\"}: done"

nbdrep_pid remove "$ctl" 1
logged "error: control: remove-leg from uid $uid pid $pid: {\"cmd\":\"remove-leg\",\"index\":1}: done"

nbdrep_pid add "$ctl" "$r2_uri"
logged "error: control: add-leg from uid $uid pid $pid: {\"cmd\":\"add-leg\",\"uri\":\"$r2_uri\"}: done"
wait_leg_state 60 "$ctl" 2 uptodate

"$NBDREP" status "$ctl"
! grep -q 'control: status from' "$tmpdir/c.log"
