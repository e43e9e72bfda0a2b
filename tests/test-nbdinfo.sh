#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What a controller advertises is the truth (DESIGN.md section 4):
# nbdinfo --json on it shows multi-conn, FUA, flush, zero, trim (when
# every leg zeroes natively, as nbdkit's file and memory plugins do; not
# when one leg cannot, here a leg behind nbdkit's nozero filter), no
# fast zero, the base:allocation context and a preferred block size of
# 4096; the size is the volume's size (nbdrep status), smaller than the
# legs by the metadata area, or with metadata=none the smallest leg's
# size rounded down to 4K.  Checked for the plugin over file legs, over
# memory legs, with metadata=none, and for the filter shape.  Also:
# nbdkit --dump-plugin lists replicate_libnbd_version (the libnbd we
# run with) and replicate_libnbd_tls, and `nbdkit PLUGIN --help` lists
# every parameter of DESIGN.md section 10 and the TLS ones of section 15.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdinfo
requires_plugin file
requires_plugin memory
requires_filter nozero
requires python3 -c 'import json'

MIB=$(( 1024 * 1024 ))

# check_info URI SIZE TRIM: nbdinfo --json URI shows exactly these flags,
# an export of SIZE bytes and can_trim TRIM (true or false).
check_info ()
{
  nbdinfo --json "$1" >"$tmpdir/info.json"
  python3 - "$tmpdir/info.json" "$2" "$3" <<'PYEOF'
import json, sys
path, size, trim = sys.argv[1:]
info = json.load(open(path))
e = info["exports"][0]
want = {
    "is_read_only": False,
    "can_multi_conn": True,
    "can_fua": True,
    "can_flush": True,
    "can_zero": True,
    "can_trim": trim == "true",
    "can_fast_zero": False,
    "block_size_preferred": 4096,
    "export-size": int(size),
}
bad = ["%s is %r, expected %r" % (k, e.get(k), v)
       for k, v in want.items() if e.get(k) != v]
if "base:allocation" not in e.get("contexts", []):
    bad.append("no base:allocation in contexts %r" % e.get("contexts"))
if not (e["block_size_minimum"] <= e["block_size_preferred"]
        <= e["block_size_maximum"]):
    bad.append("block sizes out of order: %r" % e)
if bad:
    sys.exit("nbdinfo --json: " + "; ".join(bad))
PYEOF
}

# volume_size CTL: the volume's size from nbdrep status.
volume_size ()
{
  nbdrep_status_get "$1" 's["volume"]["size"]'
}

# check_metadata_size SIZE LEG_SIZE: SIZE leaves room for metadata on
# a leg of LEG_SIZE bytes: smaller, by less than 1M, and 4K aligned.
check_metadata_size ()
{
  test "$1" -lt "$2"
  test "$1" -gt $(( $2 - MIB ))
  test $(( $1 % 4096 )) -eq 0
}

# --- The plugin over two file legs.
start_replica 0 64M
start_replica 1 64M
start_controller cf "$PLUGIN" "$r0_uri" "$r1_uri" control="$tmpdir/cf.ctl"
size=$(volume_size "$tmpdir/cf.ctl")
check_metadata_size "$size" $(( 64 * MIB ))
check_info "$cf_uri" "$size" true
stop_controller cf

# --- The plugin over two memory legs.
start_replica 2 --memory 64M
start_replica 3 --memory 64M
start_controller cm "$PLUGIN" "$r2_uri" "$r3_uri" control="$tmpdir/cm.ctl"
size=$(volume_size "$tmpdir/cm.ctl")
check_metadata_size "$size" $(( 64 * MIB ))
check_info "$cm_uri" "$size" true
stop_controller cm

# --- One leg cannot zero natively: zero is still offered (emulated),
# trim is not.
start_replica 4 64M
start_replica 5 64M -- --filter=nozero zeromode=none
start_controller cz "$PLUGIN" "$r4_uri" "$r5_uri" control="$tmpdir/cz.ctl"
size=$(volume_size "$tmpdir/cz.ctl")
check_metadata_size "$size" $(( 64 * MIB ))
check_info "$cz_uri" "$size" false
stop_controller cz

# --- metadata=none over legs of sizes that are not multiples of 4K:
# the smallest one rounded down.
truncate -s $(( 64 * MIB + 12345 )) "$tmpdir/r6.img"
truncate -s $(( 64 * MIB + 20000 )) "$tmpdir/r7.img"
start_replica 6
start_replica 7
start_controller cn "$PLUGIN" "$r6_uri" "$r7_uri" metadata=none \
  control="$tmpdir/cn.ctl"
check_info "$cn_uri" $(( 64 * MIB + 12288 )) true
test "$(volume_size "$tmpdir/cn.ctl")" -eq $(( 64 * MIB + 12288 ))
stop_controller cn

# --- The filter over a file (leg 0) with one NBD replica.
truncate -s 64M "$tmpdir/local.img"
start_replica 8 64M
start_controller cl --filter="$FILTER" file "$tmpdir/local.img" \
  replica="$r8_uri" control="$tmpdir/cl.ctl"
size=$(volume_size "$tmpdir/cl.ctl")
check_metadata_size "$size" $(( 64 * MIB ))
check_info "$cl_uri" "$size" true
stop_controller cl

# nbdkit with our plugin loaded outside the harness: the sanitizer
# runtime must come first, as for the controllers.
nbdkit_cmd=(nbdkit)
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" nbdkit)
fi

# --- --dump-plugin: the libnbd we run with.
"${nbdkit_cmd[@]}" "$PLUGIN" --dump-plugin >"$tmpdir/dump"
libnbd_version=$(nbdinfo --version | sed -n 's/^libnbd \([0-9.]*\).*/\1/p')
test -n "$libnbd_version"
grep -Fx "replicate_libnbd_version=$libnbd_version" "$tmpdir/dump"
grep -Ex "replicate_libnbd_tls=[01]" "$tmpdir/dump"

# --- --help: every parameter of DESIGN.md section 10.
"${nbdkit_cmd[@]}" "$PLUGIN" --help >"$tmpdir/help"
for key in replica connections quorum read timeout control chunk \
           max-legs al-extent al-extents resync-rate resync-min-rate \
           init wait force prefer metadata ublk ublk-queues ublk-depth \
           tls tls-certificates tls-verify tls-username tls-psk; do
  grep -Eq "(^|[ ,])$key=" "$tmpdir/help" || {
    echo "$0: nbdkit PLUGIN --help does not show $key="
    exit 1
  }
done
