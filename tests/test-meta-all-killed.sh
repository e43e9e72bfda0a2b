#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# All legs die at once under writes; whatever order they come back in, a
# new controller never serves older data than what was acknowledged, and
# the legs converge (DESIGN.md sections 5 and 6).
#
# Twice, on fresh legs: three file legs, four clients (meta-writers.py)
# writing and logging every acknowledged write; then either the
# controller is killed first and the three replicas right after it, or
# the three replicas first (one kill(1) for all three: microseconds
# apart; the harness' kill_replica then only reaps them) and the
# controller after its clients have seen the errors.  The leg images are
# saved, and for each of the 6 orders of the legs: the images are put
# back, and the legs are restarted one at a time in that order; after
# each one a controller is started with wait=0 (decide at once) on all
# three URIs.  While legs are missing it may refuse (which generation
# each leg holds depends on the timing of the kills, so refusals are
# not asserted); whenever it starts it must serve every acknowledged
# write; with all three legs it must start, become healthy, and the
# legs must be identical.  Runtime is dominated by the 12 orders (about
# 2 s each).

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import nbd, random; random.Random(1).randbytes(1)'

ctl=$tmpdir/c.ctl
writers=$abs_top_srcdir/tests/meta-writers.py
clients=4
region=$(( 4 * 1024 * 1024 ))

# start_volume: start the controller on the three legs, deciding at once.
start_volume ()
{
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
    control="$ctl" wait=0 timeout=2
}

# enough_writes: has every client 30 acknowledged writes?
enough_writes ()
{
  local cid
  for (( cid = 0; cid < clients; cid++ )); do
    [ "$(grep -c '^A' "$tmpdir/log$cid" 2>/dev/null)" -ge 30 ] || return 1
  done
}

# kill_all_replicas: SIGKILL the three replicas in one kill(1), then let
# the harness reap them.  (kill_replica alone would kill them up to
# 100 ms apart.  It is called as a condition because its own kill(1) of
# an already dead process fails, which set -e must not take for an
# error; what matters is that it returns 0 once the replica is reaped.)
kill_all_replicas ()
{
  local i
  kill -KILL "$(server_pid r0)" "$(server_pid r1)" "$(server_pid r2)"
  for i in 0 1 2; do
    if ! kill_replica "$i"; then
      echo "$0: replica $i could not be reaped"
      return 1
    fi
  done
}

# check_acknowledged URI: every acknowledged write reads back from URI.
check_acknowledged ()
{
  python3 "$writers" check "$1" "$clients" "$region" "$tmpdir/log"
}

# crash ORDER: fresh legs and volume, writes, then kill everything in
# ORDER (controller-first or legs-first); saves the images as snapN.img.
crash ()
{
  local i cid pids=()
  rm -f "$tmpdir"/log* "$tmpdir"/r?.img "$ctl"
  for i in 0 1 2; do start_replica "$i" --file 24M; done
  start_volume
  wait_for test -S "$ctl"
  wait_volume_state 30 "$ctl" healthy
  for (( cid = 0; cid < clients; cid++ )); do
    python3 "$writers" write "$cid" "$c_uri" "$tmpdir/log$cid" "$region" &
    pids+=($!)
  done
  wait_until 30 enough_writes
  case $1 in
    controller-first)
      kill_controller c
      kill_all_replicas ;;
    legs-first)
      kill_all_replicas ;;
  esac
  for i in "${pids[@]}"; do wait "$i"; done
  if [ "$1" = legs-first ]; then
    kill_controller c
  fi
  for (( cid = 0; cid < clients; cid++ )); do
    test "$(grep -c '^U' "$tmpdir/log$cid")" -eq 1
  done
  for i in 0 1 2; do
    cp --sparse=always "$tmpdir/r$i.img" "$tmpdir/snap$i.img"
  done
}

# come_back A B C: put the saved images back and restart the legs in
# the order A B C, trying to start the volume after each.
come_back ()
{
  local i n=0 started uri_var
  for i in 0 1 2; do
    cp --sparse=always "$tmpdir/snap$i.img" "$tmpdir/r$i.img"
  done
  for i in "$@"; do
    n=$(( n + 1 ))
    restart_replica "$i"
    uri_var=r${i}_uri
    "$NBDREP" inspect "${!uri_var}" | grep -E 'generation|flags' || :
    started=
    if start_volume; then started=1; fi
    if [ -z "$started" ]; then
      # Refusing is right only while a leg is missing.
      test "$n" -lt 3
      continue
    fi
    echo "order $*: started with $n leg(s)"
    check_acknowledged "$c_uri"
    if [ "$n" -lt 3 ]; then
      stop_controller c
    fi
  done
  wait_volume_state 30 "$ctl" healthy
  check_acknowledged "$c_uri"
  compare_legs_equal "$("$NBDINFO" --size "$c_uri")" "$r0_uri" "$r1_uri" "$r2_uri"
  stop_controller c
  for i in 0 1 2; do kill_replica "$i"; done
}

for order in controller-first legs-first; do
  crash "$order"
  for perm in "0 1 2" "0 2 1" "1 0 2" "1 2 0" "2 0 1" "2 1 0"; do
    # shellcheck disable=SC2086
    come_back $perm
  done
done
