#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Data integrity of the filter shape: the replicate filter over nbdkit's
# file plugin (leg 0, a fresh 64M image) with 0, 1 and 2 NBD replica
# legs on fresh file replicas.  For each, the random-writes.py workload
# (a few hundred writes of 512 B..1 MiB at random, also unaligned,
# offsets, some with FUA, plus zeroes and trims) reads the whole export
# back through the controller and checks it against what it wrote; the
# volume is still healthy with no leg error; then leg 0's image file
# (cmp -n of the exported size) and every NBD leg's data area must equal
# the expected image, both while the controller runs and after it has
# stopped cleanly.  The seed is printed (set SEED to replay one).

source ./functions.sh
set -euo pipefail
set -x

requires_plugin file
requires_nbdinfo
requires python3 -c 'import nbd'

workload=$abs_top_srcdir/tests/random-writes.py
seed=${SEED:-$RANDOM}
echo "$0: seed $seed"

# compare_all EXPECTED LOCAL-IMAGE URI...: leg 0's file and the NBD
# legs hold EXPECTED in their data areas.
compare_all ()
{
  local expected=$1 local_img=$2
  shift 2
  cmp -n "$(stat -c %s "$expected")" "$expected" "$local_img"
  [ $# -eq 0 ] || compare_legs "$expected" "$@"
}

next_replica=0
for replicas in 0 1 2; do
  legs=$(( replicas + 1 ))
  local_img=$tmpdir/local$replicas.img
  truncate -s 64M "$local_img"
  uris=() args=()
  for (( i = 0; i < replicas; i++ )); do
    start_replica "$next_replica" 64M
    uri_var=r${next_replica}_uri
    uris+=("${!uri_var}")
    args+=(replica="${!uri_var}")
    next_replica=$(( next_replica + 1 ))
  done
  name=c$replicas
  ctl=$tmpdir/$name.ctl
  start_controller "$name" --filter="$FILTER" file "$local_img" \
    "${args[@]}" control="$ctl"
  uri_var=${name}_uri
  uri=${!uri_var}

  test "$(volume_state "$ctl")" = healthy
  test "$(nbdrep_status_get "$ctl" 'len(s["legs"])')" -eq "$legs"
  test "$(nbdrep_status_get "$ctl" 's["legs"][0]["local"]')" = True
  size=$(nbdinfo --size "$uri")
  test "$(nbdrep_status_get "$ctl" 's["volume"]["size"]')" -eq "$size"

  expected=$tmpdir/expected$replicas
  python3 "$workload" "$uri" "$expected" $(( seed + replicas )) 300
  test "$(stat -c %s "$expected")" -eq "$size"

  # Nothing went wrong on the way: every leg uptodate, no leg error.
  test "$(nbdrep_status_get "$ctl" \
            '[l["state"] for l in s["legs"]].count("uptodate")')" -eq "$legs"
  test "$(nbdrep_status_get "$ctl" \
            'sum(l["errors"] for l in s["legs"])')" -eq 0
  test "$(volume_state "$ctl")" = healthy

  compare_all "$expected" "$local_img" "${uris[@]}"
  stop_controller "$name"
  compare_all "$expected" "$local_img" "${uris[@]}"
  rm -f "$expected"
done
