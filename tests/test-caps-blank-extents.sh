#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A new volume is created without init= only if every leg reads as
# zeroes by block status, and block status is read as NBD defines it:
#
#  - a server may answer for only part of the range asked about: the
#    rest is asked for again, never taken for zeroes;
#  - NBD_STATE_HOLE without NBD_STATE_ZERO promises nothing about what
#    the range reads as: it is not zeroes.
#
# Leg 0 is nbdkit's eval plugin over a file holding old data (64 KiB at
# 2 MiB), answering block status truthfully but (a) for at most 256 KiB
# per request, or (b) as "hole" without the zero bit over the whole
# range; leg 1 is blank memory.  The controller must refuse to start
# (the legs do not all read as zeroes: "hold data") without writing to
# leg 0; with (c), the same leg answering 256 KiB at a time over a file
# of zeroes, the volume is created.  Before the fix, (a) and (b) created
# a volume whose two uptodate legs differed at 2 MiB.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_plugin eval
requires_plugin memory

img=$tmpdir/e.img
ext=$tmpdir/ext.sh
MiB=1048576

# ext.sh MODE DATA COUNT OFFSET: the eval plugin's extents: the file
# holds data in [DATA, DATA + 64K) (DATA=-1: none), zeroes elsewhere.
# MODE partial: one extent of at most 256 KiB from OFFSET, its true
# type; MODE hole: the whole range as "hole" (no zero bit).
cat >"$ext" <<'SHEOF'
#!/usr/bin/env bash
mode=$1 data=$2 count=$3 off=$4
if [ "$mode" = hole ]; then
  echo "$off $count hole"
  exit 0
fi
n=$(( count < 262144 ? count : 262144 ))
if [ "$data" -ge 0 ] && [ "$off" -ge "$data" ] && [ "$off" -lt $(( data + 65536 )) ]; then
  echo "$off $(( data + 65536 - off < n ? data + 65536 - off : n ))"
elif [ "$data" -ge 0 ] && [ "$off" -lt "$data" ] && [ $(( off + n )) -gt "$data" ]; then
  echo "$off $(( data - off )) hole,zero"
else
  echo "$off $n hole,zero"
fi
SHEOF
chmod +x "$ext"

# eval_leg MODE DATA: (re)start leg 0 (server e) over $img.
eval_leg ()
{
  if server_running e; then stop_server e; fi
  _start_server e eval \
    get_size="stat -c %s $img" \
    can_write='exit 0' can_flush='exit 0' flush='exit 0' \
    can_extents='exit 0' \
    pread="dd if=$img iflag=skip_bytes,count_bytes skip=\$4 count=\$3 status=none" \
    pwrite="dd of=$img oflag=seek_bytes conv=notrunc seek=\$4 status=none" \
    extents="$ext $1 $2 \$3 \$4"
}

# refused NAME: the controller over legs e and r1 refuses to start,
# saying the legs hold data, and leaves leg 0's file as it was
# (start_controller: the sanitizer builds' preload comes with it).
refused ()
{
  local before
  before=$(md5sum <"$img")
  if start_controller c "$PLUGIN" "$e_uri" "$r1_uri" \
       control="$tmpdir/c.ctl" timeout=5; then
    echo "$0: $1: the volume was created over a leg holding data"
    exit 1
  fi
  mv "$tmpdir/c.log" "$tmpdir/$1.log"
  grep -F 'hold data' "$tmpdir/$1.log"
  test "$(md5sum <"$img")" = "$before"
}

truncate -s 64M "$img"
head -c 65536 /dev/urandom |
  dd of="$img" bs=65536 seek=$(( 2 * MiB / 65536 )) conv=notrunc status=none
start_replica 1 --memory 64M

# (a) Partial answers: the first covers [0, 256K) only.
eval_leg partial $(( 2 * MiB ))
nbdsh --base-allocation -u "$e_uri" -c '
seen = []
h.block_status(16 << 20, 0, lambda m, o, e, err: seen.extend(e))
assert seen == [262144, 3], seen
'
refused partial

# (b) A hole without the zero bit over data.
eval_leg hole $(( 2 * MiB ))
refused hole

# (c) Partial answers over a leg of zeroes: blank, the volume is made.
truncate -s 0 "$img"
truncate -s 64M "$img"
eval_leg partial -1
start_controller c "$PLUGIN" "$e_uri" "$r1_uri" control="$tmpdir/c.ctl" \
  timeout=5
wait_volume_state 30 "$tmpdir/c.ctl" healthy
size=$(nbdrep_status_get "$tmpdir/c.ctl" 's["volume"]["size"]')
stop_controller c
compare_legs_equal "$size" "$e_uri" "$r1_uri"
