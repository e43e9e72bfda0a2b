#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Data integrity of the plugin shape with 1, 2 and 3 file legs: for each
# leg count, a controller on fresh replicas takes the random-writes.py
# workload (a few hundred writes of 512 B..1 MiB at random, also
# unaligned, offsets, some with FUA, plus zeroes and trims), which reads
# the whole export back through the controller and checks it against
# what it wrote; the volume is still healthy with no leg error; then
# every leg's data area must equal the expected image, both while the
# controller runs and after it has stopped cleanly.  The seed is
# printed (set SEED to replay one).

source ./functions.sh
set -euo pipefail
set -x

requires_plugin file
requires_nbdinfo
requires python3 -c 'import nbd'

workload=$abs_top_srcdir/tests/random-writes.py
seed=${SEED:-$RANDOM}
echo "$0: seed $seed"

next_replica=0
for legs in 1 2 3; do
  uris=()
  for (( i = 0; i < legs; i++ )); do
    start_replica "$next_replica" 64M
    uri_var=r${next_replica}_uri
    uris+=("${!uri_var}")
    next_replica=$(( next_replica + 1 ))
  done
  name=c$legs
  ctl=$tmpdir/$name.ctl
  start_controller "$name" "$PLUGIN" "${uris[@]}" control="$ctl"
  uri_var=${name}_uri
  uri=${!uri_var}

  test "$(volume_state "$ctl")" = healthy
  size=$(nbdinfo --size "$uri")
  test "$(nbdrep_status_get "$ctl" 's["volume"]["size"]')" -eq "$size"

  expected=$tmpdir/expected$legs
  python3 "$workload" "$uri" "$expected" $(( seed + legs )) 300
  test "$(stat -c %s "$expected")" -eq "$size"

  # Nothing went wrong on the way: every leg uptodate, no leg error.
  test "$(nbdrep_status_get "$ctl" \
            '[l["state"] for l in s["legs"]].count("uptodate")')" -eq "$legs"
  test "$(nbdrep_status_get "$ctl" \
            'sum(l["errors"] for l in s["legs"])')" -eq 0
  test "$(volume_state "$ctl")" = healthy

  compare_legs "$expected" "${uris[@]}"
  stop_controller "$name"
  compare_legs "$expected" "${uris[@]}"
  rm -f "$expected"
done
