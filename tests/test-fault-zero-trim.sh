#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Write-zeroes and trim while a leg is away reach it by resync: three
# file legs full of data, leg 1 killed, then zero and trim through the
# controller over ranges aligned and not aligned to the 64 KiB chunk
# (with FUA, across chunks, mixed with a write in the same chunk, and
# trims that punch holes in the other legs' files).  After leg 1 has
# resynced, every leg reads zeroes there (nbdsh reads of each leg) and
# every leg equals what the client wrote.  The resync covers exactly the
# chunks touched while the leg was away.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0
start_replica 1
start_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
nbdsh -u "$c_uri" -c 'assert h.can_zero() and h.can_trim()'
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 16777216
write_random "$c_uri" "$expected" 33554432 8388608

# Leg 1 goes while no activity-log extent is hot, and a flush (which
# makes nothing hot) finds it gone: its bitmap then holds exactly the
# chunks zeroed, trimmed and written while it is away.
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"
kill_replica 1
nbdsh -u "$c_uri" -c 'h.flush()'
status_check "$ctl" "leg(1)['state'] == 'failed'"
# Ranges zeroed (z) or trimmed (t) while leg 1 is away: OFFSET:LENGTH:OP.
ranges=(
  1048576:1048576:z        # whole chunks
  3149824:204800:z         # 3 MiB + 12 KiB, over four chunks, unaligned
  5242880:65536:z          # one chunk, then a write inside it (below)
  8388608:2097152:t        # whole chunks
  12587008:135168:t        # 12 MiB + 8 KiB, unaligned at both ends
  14680064:4096:t          # 4 KiB inside a chunk
  33554432:6291456:t       # 6 MiB over two AL extents
)
for r in "${ranges[@]}"; do
  IFS=: read -r off len op <<<"$r"
  if [ "$op" = t ]; then
    zero_range "$c_uri" "$expected" "$off" "$len" trim
  else
    zero_range "$c_uri" "$expected" "$off" "$len"
  fi
done
# With FUA.
nbdsh -u "$c_uri" -c "
h.zero(65536, 6291456, nbd.CMD_FLAG_FUA)
with open('$expected', 'r+b') as f:
    f.seek(6291456)
    f.write(bytes(65536))
"
ranges+=(6291456:65536:z)
# Data inside the zeroed chunk at 5 MiB.
write_random "$c_uri" "$expected" $(( 5242880 + 16384 )) 8192
status_check "$ctl" "leg(1)['state'] == 'failed' and
  leg(0)['zeroes'] > 0 and leg(2)['zeroes'] > 0"

# read_zeroes URI: every range in $ranges reads as zeroes from URI
# (except the 8 KiB written inside the chunk at 5 MiB).
read_zeroes ()
{
  "$NBDSH" -u "$1" -c "
for r in '${ranges[*]}'.split():
    off, length, op = r.split(':')
    off, length = int(off), int(length)
    buf = h.pread(length, off)
    if off == 5242880:
        buf = buf[:16384] + buf[16384 + 8192:]
    assert buf == bytes(len(buf)), 'not zeroes at %s' % r
"
}

read_zeroes "$c_uri"
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 30 "$ctl" healthy
# Chunks (64 KiB) touched while leg 1 was away: the ranges, and the
# write at 5 MiB + 16 KiB falls in the chunk of the range at 5 MiB.
chunks=$(python3 -c "
chunks = set()
for r in '${ranges[*]}'.split():
    off, length, op = r.split(':')
    off, length = int(off), int(length)
    chunks.update(range(off // 65536, (off + length - 1) // 65536 + 1))
print(len(chunks))
")
# The resync copied (bytes) or zeroed (zeroed: where the source holds
# holes or zeroes) exactly those chunks: a resync of whole 4 MiB extents
# would do more, one that missed a range less.  At least the 8 KiB
# written were copied.
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'incremental' and
  leg(1)['last_resync']['bytes'] + leg(1)['last_resync']['zeroed']
    == $chunks * 65536 and
  leg(1)['last_resync']['bytes'] >= 8192"
for uri in "$r0_uri" "$r1_uri" "$r2_uri"; do
  read_zeroes "$uri"
done
compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"
