#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A leg whose server does not advertise flush (nor FUA) is taken as
# write-through (nbdkit-replicate-plugin(1)): the volume starts with it,
# a client's flush and FUA writes succeed (answered for that leg at
# once), the metadata written to it reads back, and after a restart
# every leg holds what was written.
#
# Leg 1 is nbdkit's eval plugin over a file, with no flush script: it
# advertises neither flush nor FUA (checked first).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_plugin eval

ctl=$tmpdir/c.ctl
img=$tmpdir/e.img
truncate -s 32M "$img"

# Leg 1's server (server e, on $tmpdir/e.sock).
start_eval_leg ()
{
  _start_server e eval \
    get_size="stat -c %s $img" \
    pread="dd if=$img skip=\$4 count=\$3 iflag=skip_bytes,count_bytes status=none" \
    pwrite="dd of=$img seek=\$4 oflag=seek_bytes conv=notrunc status=none" \
    can_write='exit 0'
}
start_eval_leg
r1=$e_uri
"$NBDINFO" "$r1" | grep -q 'can_flush: false'
"$NBDINFO" "$r1" | grep -q 'can_fua: false'

start_replica 0 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1" control="$ctl" timeout=5 \
  init=assume-clean
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 1024 * 1024 ))
"$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom(65536)
h.pwrite(buf, 4 * 1024 * 1024, nbd.CMD_FLAG_FUA)
h.flush()
with open('$tmpdir/expected', 'r+b') as f:
    f.seek(4 * 1024 * 1024)
    f.write(buf)
"
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1"

stop_controller c
stop_server e
start_eval_leg
restart_controller c
wait_volume_state 30 "$ctl" healthy
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1"
