#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync copies a source hole that lacks the zero flag: only ranges
# the source's block status flags as zero become write-zeroes on the
# target (nbdkit-replicate-plugin(1), RESYNC; datapath/copy.c).
# NBD_STATE_HOLE without NBD_STATE_ZERO promises nothing about what the
# range reads as.
#
# Leg 0 is nbdkit's eval plugin over a file holding data, answering
# every block status request with one extent of type "hole" (no zero
# bit) over the whole range asked about, data included; leg 1 is a
# blank file.
#  1. init=copy: leg 1 gets a full resync from leg 0.
#  2. Leg 1's replica is killed, data is written through the controller
#     (leg 0 only), leg 1 comes back: an incremental resync from leg 0.
# After each, leg 1 (and the controller) equal leg 0 byte for byte.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_plugin eval

img=$tmpdir/e.img
ext=$tmpdir/ext.sh
ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))

# The eval plugin's extents: the whole range asked about as a hole
# without the zero bit.
cat >"$ext" <<'SHEOF'
#!/usr/bin/env bash
echo "$2 $1 hole"
SHEOF
chmod +x "$ext"

# Leg 0's file: 64 MiB, data in [2 MiB, 3 MiB) and at 10 MiB + 4096.
truncate -s 64M "$img"
head -c "$MiB" /dev/urandom |
  dd of="$img" bs="$MiB" seek=2 conv=notrunc status=none
head -c 65536 /dev/urandom |
  dd of="$img" oflag=seek_bytes seek=$(( 10 * MiB + 4096 )) conv=notrunc \
     status=none
cp "$img" "$tmpdir/expected"

_start_server e eval \
  get_size="stat -c %s $img" \
  can_write='exit 0' can_flush='exit 0' flush='exit 0' \
  can_extents='exit 0' \
  pread="dd if=$img iflag=skip_bytes,count_bytes skip=\$4 count=\$3 status=none" \
  pwrite="dd of=$img oflag=seek_bytes conv=notrunc seek=\$4 status=none" \
  extents="$ext \$3 \$4"
# The setup: block status says "hole" (no zero bit) over the data.
"$NBDSH" --base-allocation -u "$e_uri" -c "
seen = []
h.block_status(4 * $MiB, 0, lambda m, o, e, err: seen.extend(e))
assert seen == [4 * $MiB, nbd.STATE_HOLE], seen
"
start_replica 1 --file 64M

# 1. init=copy: a full resync of leg 1 from leg 0.
start_controller c "$PLUGIN" "$e_uri" "$r1_uri" control="$ctl" \
  timeout=5 init=copy
wait_volume_state 30 "$ctl" healthy
size=$(nbdrep_status_get "$ctl" 's["volume"]["size"]')
truncate -s "$size" "$tmpdir/expected"
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'full'"
compare_legs "$tmpdir/expected" "$e_uri" "$r1_uri" "$c_uri"

# 2. Leg 1 away while data is written, back: an incremental resync.
kill_replica 1
write_random "$c_uri" "$tmpdir/expected" $(( 20 * MiB )) "$MiB"
write_random "$c_uri" "$tmpdir/expected" $(( 33 * MiB + 512 )) 65536
wait_leg_state 10 "$ctl" 1 failed
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'incremental'"
compare_legs "$tmpdir/expected" "$e_uri" "$r1_uri" "$c_uri"
stop_controller c
