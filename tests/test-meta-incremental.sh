#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A leg that comes back after missing a little gets only that little
# (incremental resync from its slot's out-of-sync bitmap, DESIGN.md
# sections 5 and 7).  Three 160 MiB file legs; 128 MiB of random data
# written and flushed; wait until the activity log is cold
# (volume.activity_log.hot == 0); then, twice:
#
#  1. leg 2 is killed and the controller notices it on a flush (no
#     extent is hot, so nothing is ORed into its bitmap); four unaligned
#     256 KiB writes (each spans 5 chunks of 64 KiB) change 1 MiB in four
#     AL extents; leg 2 returns.  Its resync must be incremental and copy
#     exactly the chunks written while it was away: 4 * 5 * 64 KiB =
#     1310720 bytes (the bitmap is chunk-granular; nothing else was
#     written, and the log was cold when it failed).
#  2. after the log is cold again, leg 1 is killed and three such
#     writes follow.  If the controller notices the death on the first
#     of them, that write's 4 MiB extent is hot at that moment and is
#     ORed whole into its bitmap (by design: its last writes may not have
#     been flushed), and exactly that extent plus the 5 chunks of each of
#     the two other writes, 4 MiB + 640 KiB = 4849664 bytes, must be
#     copied.  If it notices first that the idle leg's socket closed,
#     nothing is hot and exactly the 15 chunks are copied.  Either way
#     far below the 128 MiB a full resync copies.
#
# After each: all legs uptodate, and the oracle (every leg and the
# controller hold exactly what was written).

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" --file 160M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
test "$size" -gt $(( 128 * 1024 * 1024 ))

# 128 MiB of data (the rest of the volume stays zero).
truncate -s "$size" "$tmpdir/expected"
head -c 128M /dev/urandom |
  dd of="$tmpdir/expected" conv=notrunc iflag=fullblock bs=1M status=none
"$NBDCOPY" "$tmpdir/expected" "$c_uri"

# al_hot: the number of hot activity-log extents.
al_hot ()
{
  nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["hot"]'
}
# al_is_cold: is the activity log empty?
al_is_cold ()
{
  [ "$(al_hot)" -eq 0 ]
}
# write_at OFFSET...: write 256 KiB of fresh random data at each OFFSET
# through the controller and into the expected image (no flush).
write_at ()
{
  local off
  for off in "$@"; do
    head -c 256K /dev/urandom >"$tmpdir/piece"
    dd if="$tmpdir/piece" of="$tmpdir/expected" bs=64K oflag=seek_bytes \
       seek="$off" conv=notrunc status=none
    "$NBDSH" -u "$c_uri" -c "h.pwrite(open('$tmpdir/piece', 'rb').read(), $off)"
  done
}
# last_resync I FIELD: print legs[I].last_resync[FIELD].
last_resync ()
{
  nbdrep_status_get "$ctl" "s['legs'][$1]['last_resync']['$2']"
}

MiB=$(( 1024 * 1024 ))

# --- Round 1: leg 2 fails with a cold log.
wait_until 30 al_is_cold
kill_replica 2
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_leg_state 10 "$ctl" 2 failed
test "$(nbdrep_status_get "$ctl" 's["legs"][2]["last_resync"]')" = None
# Four writes in extents 2, 9, 17 and 30, each 256 KiB starting 12345
# bytes into a chunk: 5 chunks each.
write_at $(( 10 * MiB + 12345 )) $(( 37 * MiB + 4096 + 12345 )) \
         $(( 70 * MiB + 12345 )) $(( 121 * MiB + 65536 + 12345 ))
restart_replica 2
wait_leg_state 30 "$ctl" 2 uptodate
wait_volume_state 10 "$ctl" healthy
test "$(last_resync 2 kind)" = incremental
test "$(last_resync 2 bytes)" -eq $(( 4 * 5 * 65536 ))
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri" "$c_uri"

# --- Round 2: leg 1 fails under a write; that write's extent (hot at
# the failure) comes back whole.
wait_until 30 al_is_cold
kill_replica 1
write_at $(( 50 * MiB + 12345 )) $(( 90 * MiB + 12345 )) \
         $(( 110 * MiB + 12345 ))
wait_leg_state 10 "$ctl" 1 failed
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
test "$(last_resync 1 kind)" = incremental
bytes=$(last_resync 1 bytes)
# Either the first write found leg 1 dead (extent 12, 48-52 MiB, hot at
# the failure, comes back whole, plus 5 chunks in each of extents 22 and
# 27), or the engine noticed the server's socket close before the first
# write arrived (the leg was idle: 5 chunks in each of the three extents).
test "$bytes" -eq $(( 4 * MiB + 2 * 5 * 65536 )) ||
  test "$bytes" -eq $(( 3 * 5 * 65536 ))
# (The bound that holds whatever the moment of the failure: the touched
# AL extents plus the chunks; far below the 128 MiB of data.)
test "$bytes" -le $(( 3 * 4 * MiB + 3 * 5 * 65536 ))
# Leg 2's earlier resync is still the one it had.
test "$(last_resync 2 bytes)" -eq $(( 4 * 5 * 65536 ))
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri" "$c_uri"
