#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync's copies are durable on its target before their bits are
# cleared and the target is published uptodate, also when the target's
# server does not advertise multi-conn.  The copies go over the
# resync's private connections, and the NBD protocol lets such a server
# make durable on a flush only what was written on the same connection:
# the flush on the leg's shared connection is not enough.
#
# Leg 1 is served through tests/conncache.c: a volatile write cache
# flushed per connection, no multi-conn; kill -9 loses what it holds
# (checked first on a spare replica).  Leg 1 is down while 8 MiB is
# written; it comes back and is resynced (incremental, 8 MiB); the
# activity log cools; then leg 1 loses power, comes back and is resynced
# again (incremental: only what its bitmap and the hot extents name,
# nothing), and every leg must hold the data.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))

# The setup loses a write flushed on another connection only.
start_replica 9 --file 16M -- --filter="$CONNCACHE"
head -c 65536 /dev/urandom >"$tmpdir/probe"
"$NBDSH" -u "$r9_uri" -c "
assert not h.can_multi_conn()
b = nbd.NBD()
b.connect_uri('$r9_uri')
h.pwrite(open('$tmpdir/probe', 'rb').read(), 4096)
b.flush()
"
kill_replica 9
if cmp -s -n 65536 -i 0:4096 "$tmpdir/probe" "$tmpdir/r9.img"; then
  echo "$0: a write flushed on another connection only reached r9.img"
  exit 1
fi

# No block status through the filter: init=assume-clean (both blank).
start_replica 0 --file 64M
start_replica 1 --file 64M -- --filter="$CONNCACHE"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5 \
  init=assume-clean
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"

stop_replica 1
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))
wait_leg_state 10 "$ctl" 1 failed
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

# Leg 1 loses power.
kill_replica 1
"$NBDSH" -u "$c_uri" -c 'h.flush()' || :
wait_leg_state 10 "$ctl" 1 failed
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$c_uri"
