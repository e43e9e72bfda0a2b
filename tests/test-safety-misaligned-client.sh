#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A client request that breaks the minimum block size the controller
# advertises fails no leg.  Leg 1's server advertises a minimum of 4096
# and refuses smaller or unaligned requests with EINVAL, as the NBD
# protocol allows (nbdkit's blocksize-policy filter); leg 0 takes
# anything.  The controller tells its clients 4096; a client ignoring
# it (libnbd, strict mode off) gets EINVAL for its 512-byte write and
# reads, every time, and both legs stay uptodate and equal.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter blocksize-policy

ctl=$tmpdir/c.ctl

start_replica 0 32M
start_replica 1 32M -- --filter=blocksize-policy blocksize-minimum=4096 \
  blocksize-error-policy=error
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5 \
  read=round-robin
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 65536

"$NBDSH" -u "$c_uri" -c "
assert h.get_block_size(nbd.SIZE_MINIMUM) == 4096
h.set_strict_mode(0)
import errno
def refused(f):
    try:
        f()
    except nbd.Error as e:
        assert e.errnum == errno.EINVAL, e
        return True
    return False
assert refused(lambda: h.pwrite(b'a' * 512, 512)), 'unaligned write taken'
assert refused(lambda: h.pwrite(b'a' * 4096, 512)), 'unaligned write taken'
assert refused(lambda: h.zero(512, 4096)), 'unaligned zero taken'
for i in range(4):
    assert refused(lambda: h.pread(512, 512)), 'unaligned read answered'
h.flush()
"
status_check "$ctl" 'leg(0)["state"] == "uptodate" and leg(1)["state"] == "uptodate"'
write_random "$c_uri" "$tmpdir/expected" 65536 65536
compare_legs "$tmpdir/expected" "$c_uri" "$r0_uri" "$r1_uri"
