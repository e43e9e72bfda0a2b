#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep backup-delete never sweeps a block that a backup still needs
# (nbdrep(1): "It holds the volume's delete lock meanwhile, so that no
# backup of the volume runs and counts on a block being swept; it
# sweeps nothing when a remaining manifest cannot be read").  A WebDAV
# store (nginx), a controller with two legs, 64 KiB blocks; backups
# one (full: 16 blocks), two (incremental: blocks 0-3 rewritten), three
# (incremental: block 0 rewritten and 8 new blocks, read at 256 KiB/s
# so that it runs ~2 s; it keeps two's entries for blocks 1-3 and
# one's for 4-15, but not two's block 0).
#   1. While three runs (it has stored a block, no manifest yet):
#      deleting three is refused (no such backup), deleting two is
#      refused (a backup is running): two's manifest is still there and
#      no block has gone.  Three then completes.
#   2. Two's manifest truncated in the store: deleting one removes one's
#      manifest and sweeps nothing (exit 1, saying why, naming the
#      manifest); every block is still there, and with two's manifest
#      put back, two restores byte for byte (its block 0, which no
#      readable manifest names, was not swept).
#   3. Two's manifest garbled again: deleting two itself (its manifest
#      is not needed for that) sweeps exactly the 5 blocks no
#      remaining backup names: one's old blocks 0-3, two's block 0.
# After each step every remaining backup restores byte for byte
# through nbdkit-backup-plugin.

source ./functions.sh
source "$abs_top_srcdir/tests/backup-functions.sh"
set -euo pipefail
set -x

requires_nbdsh
requires_webdav

start_nginx
start_replica 0 --file 16M
start_replica 1 --file 16M
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
K=1024
M=$(( 1024 * K ))
T=$DAV_URL/backups
bs=(--block-size 64K)

# write OFFSET LEN: random data through the controller, flushed.
write () {
  $NBDSH -u "$c_uri" -c "
import os
h.pwrite(os.urandom($2), $1)
h.flush()"
}
# blocks: the block files in the store, sorted.
blocks () { (cd "$blockdir" && find . -name '*.zst' | sort); }
more_blocks_than () { [ "$(blocks | wc -l)" -gt "$1" ]; }
# refused NAME PATTERN: backup-delete NAME exits 1 saying PATTERN.
refused () {
  local rc=0
  "$NBDREP" backup-delete "$T" "$1" >"$tmpdir/out" 2>&1 || rc=$?
  cat "$tmpdir/out"
  [ "$rc" -eq 1 ]
  grep -q -- "$2" "$tmpdir/out"
}

write 0 "$M"
backup one
write 0 $(( 256 * K ))
backup two
[ "$(backups_get 'b["two"]["counts"]["read_blocks"]' "$T")" -eq 4 ]
volume=$(backups_get 'b["one"]["volume"]' "$T")
blockdir=$DAV_ROOT/backups/volumes/$volume/blocks
manifests=$DAV_ROOT/backups/volumes/$volume/backups
[ "$(blocks | wc -l)" -eq 20 ]

# --- 1. A delete while a backup runs.
write 0 $(( 64 * K ))
write $(( 2 * M )) $(( 512 * K ))
"$NBDCOPY" "$c_uri" "$tmpdir/three.img"
"$NBDREP" backup "$ctl" "$T" "${bs[@]}" --name three --rate 256K \
  >"$tmpdir/three.out" 2>&1 &
three=$!
wait_until 10 more_blocks_than 20
blocks >"$tmpdir/before"
refused three 'no backup named three'
refused two "volume $volume in $T: a backup is running"
test -s "$manifests/two.json"
blocks >"$tmpdir/after"
[ -z "$(comm -23 "$tmpdir/before" "$tmpdir/after")" ]
kill -0 "$three" || {
  echo "$0: backup three ended before the deletes were tried" >&2
  exit 1
}
rc=0
wait "$three" || rc=$?
cat "$tmpdir/three.out"
[ "$rc" -eq 0 ]
wait_leg_state 30 "$ctl" 1 uptodate
[ "$(backups_get 'b["three"]["base"]' "$T")" = two ]
[ "$(backups_get 'b["three"]["counts"]["uploaded_blocks"]' "$T")" -eq 9 ]
restores one two three

# --- 2. A remaining manifest that cannot be read: nothing is swept.
cp "$manifests/two.json" "$tmpdir/two.json"
head -c 100 "$tmpdir/two.json" >"$manifests/two.json"
blocks >"$tmpdir/before"
refused one "no block was swept: the remaining manifests of volume $volume could not all be read"
grep -q "backups/two.json" "$tmpdir/out"
test ! -e "$manifests/one.json"
blocks >"$tmpdir/after"
cmp "$tmpdir/before" "$tmpdir/after"
cp "$tmpdir/two.json" "$manifests/two.json"
restores two three

# --- 3. The unreadable backup itself: deleted, and only what no
# remaining backup names is swept.
echo 'not a manifest' >"$manifests/two.json"
"$NBDREP" backup-delete "$T" two | tee "$tmpdir/out"
grep -q '^swept 5 unreferenced blocks' "$tmpdir/out"
[ "$(backups_get 'sorted(b)' "$T")" = "['three']" ]
[ "$(blocks | wc -l)" -eq 24 ]
restores three
