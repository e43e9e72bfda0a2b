#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Overlapping concurrent writes from several connections reach every leg
# in the same order (DESIGN.md section 4: the range lock serialises
# them; NBD itself orders nothing).  A three-leg controller takes, in
# each round, 4 concurrent clients (separate processes and connections)
# that each keep 8 requests in flight, all inside the SAME 64 KiB region:
# writes of 4K..64K of fresh random bytes, a third of them unaligned,
# and some write-zeroes, overlapping one another without any ordering.
# After each round all three legs, and the controller, must be byte-
# identical, whatever the final content is.  The region moves between
# rounds (the start, across a 64K chunk and a 4M activity-log boundary,
# the end).  At least 20 rounds and at least 15 s (at most 40 s), since
# races are probabilistic; no client may see an error and at the end the
# volume is healthy with no leg error.

source ./functions.sh
set -euo pipefail
set -x

requires_plugin memory
requires_nbdinfo
requires python3 -c 'import nbd'

KIB=1024
MIB=$(( 1024 * KIB ))
REGION=$(( 64 * KIB ))

cat >"$tmpdir/client.py" <<'PYEOF'
import os, random, sys
import nbd

uri, seed, region, writes, depth = sys.argv[1:]
region, writes, depth = int(region), int(writes), int(depth)
rnd = random.Random(int(seed))
h = nbd.NBD()
h.connect_uri(uri)
inflight = {}
issued = 0
while issued < writes or inflight:
    while issued < writes and len(inflight) < depth:
        length = rnd.randint(4096, 64 * 1024)
        if rnd.random() < 0.67:
            length &= ~4095
        offset = region + rnd.randint(0, 64 * 1024 - length)
        if rnd.random() < 0.67:
            offset = region + (offset - region) // 4096 * 4096
        if rnd.random() < 0.1:
            cookie = h.aio_zero(length, offset)
            buf = None
        else:
            buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(length)))
            cookie = h.aio_pwrite(buf, offset)
        inflight[cookie] = buf
        issued += 1
    h.poll(-1)
    for cookie in list(inflight):
        if h.aio_command_completed(cookie):
            del inflight[cookie]
h.flush()
h.shutdown()
PYEOF

start_replica 0 --memory 8M
start_replica 1 --memory 8M
start_replica 2 --memory 8M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$tmpdir/c.ctl"
size=$(nbdinfo --size "$c_uri")
test "$size" -gt $(( 4 * MIB + REGION ))

regions=(0 $(( 64 * KIB - 32 * KIB )) $(( 4 * MIB - 20 * KIB ))
         $(( 2 * MIB + 512 )) $(( size - REGION )))
seed=${SEED:-$RANDOM}
echo "$0: seed $seed"

# more_rounds: go on until at least 20 rounds and 15 s are done, but
# stop after 40 s (a loaded machine); sets elapsed.
more_rounds ()
{
  elapsed=$(( (${EPOCHREALTIME/./} - ${start/./}) / 1000000 ))
  [ "$elapsed" -lt 40 ] && { [ "$round" -lt 20 ] || [ "$elapsed" -lt 15 ]; }
}

start=$EPOCHREALTIME
round=0
while more_rounds; do
  region=${regions[round % ${#regions[@]}]}
  pids=()
  for client in 0 1 2 3; do
    python3 "$tmpdir/client.py" "$c_uri" $(( seed + round * 4 + client )) \
      "$region" 100 8 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid"
  done
  compare_legs_equal "$size" "$r0_uri" "$r1_uri" "$r2_uri" "$c_uri"
  round=$(( round + 1 ))
done
echo "$0: $round rounds in $elapsed s"
test "$round" -ge 10

test "$(volume_state "$tmpdir/c.ctl")" = healthy
test "$(nbdrep_status_get "$tmpdir/c.ctl" \
          'sum(l["errors"] for l in s["legs"])')" -eq 0
