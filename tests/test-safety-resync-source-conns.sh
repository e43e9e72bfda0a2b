#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync copies from its source what the clients wrote to it, also
# when the source's server does not advertise multi-conn.  The client
# writes go to the source's shared connection; the NBD protocol lets
# such a server keep them from reads on another connection until they
# are flushed ("clients must presume that separate connections can
# cache writes independently"), so a copy read over a private lane
# may see the data from before an acknowledged write, and the target,
# which received the write, is overwritten with the older data.
#
# Leg 0 (the source) is served through tests/conncache.c reads=own:
# a write cache per connection that other connections do not read.
# Leg 1 is down while 8 MiB is written (flushed); it comes back and its
# resync is held after its first run (resync-rate 64K); a client writes
# W at 4 MiB, in the bitmap, not flushed; the resync goes on at full
# rate; once leg 1 is uptodate and a flush went through, both legs must
# hold W.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))

# The setup hides a write, unflushed, from reads on another connection.
start_replica 9 --file 16M -- --filter="$CONNCACHE" reads=own
"$NBDSH" -u "$r9_uri" -c "
assert not h.can_multi_conn()
b = nbd.NBD()
b.connect_uri('$r9_uri')
h.pwrite(b'x' * 4096, 4096)
assert h.pread(4096, 4096) == b'x' * 4096
assert b.pread(4096, 4096) == bytes(4096)
h.flush()
assert b.pread(4096, 4096) == b'x' * 4096
"
stop_replica 9

start_replica 0 --file 64M -- --filter="$CONNCACHE" reads=own
start_replica 1 --file 64M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5 \
  init=assume-clean resync-min-rate=0
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"

stop_replica 1
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))
wait_leg_state 10 "$ctl" 1 failed
"$NBDREP" set "$ctl" resync-rate 64K
restart_replica 1
wait_leg_state 30 "$ctl" 1 syncing
sleep 0.5

# W: acknowledged, not flushed.
"$NBDSH" -u "$c_uri" -c "
import os
buf = os.urandom(65536)
h.pwrite(buf, $(( 4 * MiB )))
with open('$tmpdir/expected', 'r+b') as f:
    f.seek($(( 4 * MiB )))
    f.write(buf)
"
"$NBDREP" set "$ctl" resync-rate 0
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
"$NBDSH" -u "$c_uri" -c 'h.flush()'
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri"
