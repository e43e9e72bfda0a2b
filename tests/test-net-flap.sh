#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A flapping link (net-functions.sh): host h1's link drops every packet
# for 2 s, then carries them for 2 s, eight times, under a writer that
# never stops (every acknowledged write is recorded).  Leg 0 is local,
# leg 1 on h1 over TCP, timeout=2.  Then the link stays up:
#   - the writer saw no error;
#   - leg 1 comes back by itself, and the oracle holds on the volume
#     and both legs (no round of the flapping left it uptodate with a
#     chunk missing);
#   - no resync storm: leg 1 started at most one resync per time it
#     went down (the controller's log counts them), and none copied
#     more than the writer's 8 MiB (the bitmaps stay bounded).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/net-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
net_setup h1

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
len=$(( 64 * 1024 ))

start_replica 0
start_host_replica 1 h1 10809
CONTROLLER_NETNS=$net_ctl start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# The writer: one write at a time (recorded once acknowledged) at a
# random 64 KiB block of the first 8 MiB, until stop exists.
(
  while [ ! -e "$tmpdir/stop" ]; do
    write_random "$c_uri" "$expected" "$(( (RANDOM % 128) * len ))" "$len"
  done
) &
writer=$!

for (( round = 0; round < 8; round++ )); do
  partition h1
  sleep 2
  heal h1
  sleep 2
done
touch "$tmpdir/stop"
wait "$writer"

wait_volume_state 120 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
# Bounded: no resync copied more than the writer's 8 MiB (the bitmap
# holds what was written while the leg was away, and no more).
largest=$(sed -n 's/.*leg 1 .*: resync done, \([0-9]*\) bytes copied.*/\1/p' \
  "$tmpdir/c.log" | sort -n | tail -n 1)
echo "largest resync of leg 1: ${largest:-0} bytes"
[ "${largest:-0}" -le $(( 128 * len )) ]
downs=$(grep -c 'leg 1: [a-z]* -> failed' "$tmpdir/c.log" || :)
resyncs=$(grep -c 'leg 1: [a-z]* -> syncing' "$tmpdir/c.log" || :)
echo "leg 1 went down $downs times and started $resyncs resyncs"
[ "$downs" -ge 1 ]
[ "$resyncs" -le "$downs" ]
