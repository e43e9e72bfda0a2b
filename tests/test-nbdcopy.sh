#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# nbdcopy keeps a sparse image sparse through the controller (DESIGN.md
# section 4: holes and zeroes pass through).  A sparse image of the
# export's size with data at a few places (the start, inside an
# extent, across a 4M activity-log boundary, the end) and holes
# elsewhere is copied with nbdcopy into a two-leg controller and back
# out: the data comes back byte for byte, both legs hold it, and
# nbdinfo --map shows holes exactly where the image has them and data
# where it has data, on the controller (block status passes through)
# and on each leg; the legs' files stay sparse (du).  Then the whole
# volume is overwritten with data and the image copied in again: the
# zeroes nbdcopy writes for the holes must punch them on the legs
# again, and the maps and the data must be as before.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdinfo
requires_plugin file
requires python3 -c 'import json'

MIB=$(( 1024 * 1024 ))
KIB=1024

start_replica 0 64M
start_replica 1 64M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$tmpdir/c.ctl"
size=$(nbdinfo --size "$c_uri")

# The data ranges (offset:length, 4K aligned), and the image.
ranges="0:$MIB $(( 5 * MIB + 64 * KIB )):$(( 128 * KIB ))"
ranges+=" $(( 19 * MIB )):$(( 3 * MIB )) $(( size - 64 * KIB )):$(( 64 * KIB ))"
src=$tmpdir/src.img
truncate -s "$size" "$src"
for r in $ranges; do
  head -c "${r#*:}" /dev/urandom |
    dd of="$src" bs=4096 seek=$(( ${r%:*} / 4096 )) conv=notrunc status=none
done

# check_map URI LIMIT: nbdinfo --map of URI, over its first LIMIT bytes,
# shows data (type 0) over every range in $ranges and zero (hole or
# zero bit set) everywhere else.
check_map ()
{
  nbdinfo --map --json "$1" >"$tmpdir/map.json"
  python3 - "$tmpdir/map.json" "$2" $ranges <<'PYEOF'
import json, sys
path, limit = sys.argv[1], int(sys.argv[2])
data = sorted(tuple(map(int, r.split(":"))) for r in sys.argv[3:])
extents = json.load(open(path))

def expected_at(off):
    """(is data, end of that kind) at offset off of the image."""
    for start, length in data:
        if start <= off < start + length:
            return True, start + length
        if off < start:
            return False, start
    return False, limit

bad = []
for e in extents:
    off, end = e["offset"], min(e["offset"] + e["length"], limit)
    while off < end:
        is_data, kind_end = expected_at(off)
        upto = min(end, kind_end)
        if is_data and e["type"] != 0:
            bad.append("[%d, %d) is %s, expected data"
                       % (off, upto, e["description"]))
        if not is_data and not e["type"] & 2:
            bad.append("[%d, %d) is %s, expected a hole or zero"
                       % (off, upto, e["description"]))
        off = upto
covered = max(e["offset"] + e["length"] for e in extents)
if covered < limit:
    bad.append("the map ends at %d, before %d" % (covered, limit))
if bad:
    sys.exit("nbdinfo --map: " + "; ".join(bad[:10]))
PYEOF
}

# check_sparse IMG: the leg's file allocates little more than the data
# (5.2M) and the metadata: under 8M of its 64M.
check_sparse ()
{
  test "$(du -B1 "$1" | cut -f1)" -lt $(( 8 * MIB ))
}

# copy_and_check: the image into the controller and back; every check.
copy_and_check ()
{
  nbdcopy "$src" "$c_uri"
  rm -f "$tmpdir/out.img"
  nbdcopy "$c_uri" "$tmpdir/out.img"
  cmp "$src" "$tmpdir/out.img"
  compare_legs "$src" "$r0_uri" "$r1_uri"
  check_map "$c_uri" "$size"
  check_map "$r0_uri" "$size"
  check_map "$r1_uri" "$size"
  check_sparse "$tmpdir/r0.img"
  check_sparse "$tmpdir/r1.img"
  # The copy out is sparse too, so the holes were reported as such.
  test "$(du -B1 "$tmpdir/out.img" | cut -f1)" -lt $(( 8 * MIB ))
}

copy_and_check

# Fill the whole volume with data, then copy the sparse image in again.
head -c "$size" /dev/urandom >"$tmpdir/full.img"
nbdcopy "$tmpdir/full.img" "$c_uri"
rm -f "$tmpdir/full.img"
test "$(du -B1 "$tmpdir/r0.img" | cut -f1)" -ge "$size"
copy_and_check

test "$(volume_state "$tmpdir/c.ctl")" = healthy
