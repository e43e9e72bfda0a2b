#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg whose server refuses requests smaller than 8192 bytes (a legal
# NBD minimum block size: up to 64 KiB) cannot hold the metadata, which
# is written in 4096-byte records: it is refused by name at open, saying
# why, and nothing is written to the other leg.  Before the fix the
# controller created the volume on the stock leg, the new leg's first
# superblock write was refused (EINVAL), and the start failed with
# "cannot read back its superblock: ... Transport endpoint is not
# connected".  With metadata=none nothing is written in such records:
# the same legs serve, and what is written reads back.

source ./functions.sh
set -euo pipefail
set -x

requires_filter blocksize-policy

nbdkit_cmd=("$NBDKIT")
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" "$NBDKIT")
fi

start_replica 0
start_replica 1 -- --filter=blocksize-policy blocksize-error-policy=error \
  blocksize-minimum=8192 blocksize-preferred=8192
log=$tmpdir/refused.log
rc=0
timeout -k 5 60 "${nbdkit_cmd[@]}" -U "$tmpdir/refused.sock" "$PLUGIN" \
  "$r0_uri" "$r1_uri" wait=2 --run "touch $tmpdir/served" \
  </dev/null >"$log" 2>&1 || rc=$?
cat "$log"
test "$rc" -ne 0
test ! -e "$tmpdir/served"
grep -F 'minimum block size 8192 is above 4096' "$log"
stop_replica 0
stop_replica 1
# Leg 0 was not written: it reads as zeroes still.
cmp -n "$(stat -c %s "$tmpdir/r0.img")" "$tmpdir/r0.img" /dev/zero

# metadata=none: no records, the leg is taken.
start_replica 0
start_replica 1 -- --filter=blocksize-policy blocksize-error-policy=error \
  blocksize-minimum=8192 blocksize-preferred=8192
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" metadata=none
"$NBDSH" -u "$c_uri" -c "
h.pwrite(b'x' * 8192, 8192)
assert h.pread(8192, 8192) == b'x' * 8192
"
