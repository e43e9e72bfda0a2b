#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# One blank disk given as two legs (two nbdkit processes serving one
# file, or one server under two host names).  A blank disk carries no
# identity for the election or the monitor to compare, so before the
# fix both legs were resynced, both counted uptodate (status: N/N with
# one disk fewer), and an asynchronous leg on an uptodate leg's disk
# replayed older writes over newer acknowledged ones.  Now a resync's
# claim reads its target's new superblock back, and every other leg's
# (resync.c, same_storage): the second claim is refused by name.
#   1. An existing volume on legs 0 and 1; a restart adds replica 2
#      twice (r2 and r2b, one file): one of them is refused.
#   2. A new volume, init=copy, leg 1 = leg 0 under another host name:
#      leg 1 is refused, leg 0 keeps its identity.
#   3. A new volume whose asynchronous leg is leg 1's disk: refused.
#   The oracle: what was written reads back from the volume and every
#   uptodate leg; status counts only distinct disks.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
M=$(( 1024 * 1024 ))
one_refused='sorted(l["state"] for l in s["legs"]) == ["failed", "uptodate", "uptodate", "uptodate"]'

# 1.
start_replica 0 32M
start_replica 1 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"
stop_controller c
start_replica 2 32M
_start_server r2b file "file=$tmpdir/r2.img"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" "$r2b_uri" \
  control="$ctl"
wait_until 30 status_check "$ctl" "$one_refused"
grep 'are the same storage reached by two URIs' "$log"
write_random "$c_uri" "$expected" $(( 4 * M )) "$M"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
sleep 1
status_check "$ctl" "$one_refused"
stop_controller c
stop_replica 0
stop_replica 1
stop_replica 2
stop_server r2b
rm -f "$tmpdir"/r[012].img

# 2.
port=$(free_port)
start_replica 0 32M --port "$port"
printf 'data' | dd of="$tmpdir/r0.img" conv=notrunc status=none
start_controller c "$PLUGIN" "nbd://localhost:$port" "nbd://127.0.0.1:$port" \
  init=copy control="$ctl"
wait_until 30 status_check "$ctl" \
  'leg(0)["state"] == "uptodate" and leg(1)["state"] == "failed" and "same storage" in (leg(1)["last_error"] or "") + open("'"$log"'").read()'
status_check "$ctl" 'leg(1)["state"] == "failed"'
stop_controller c
"$NBDREP" inspect "nbd://localhost:$port" | grep -i 'leg.*uuid\|slot'
stop_replica 0
rm -f "$tmpdir/r0.img"

# 3.
start_replica 0 32M
start_replica 1 32M
_start_server r1b file "file=$tmpdir/r1.img"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r1b_uri" \
  control="$ctl"
wait_until 30 status_check "$ctl" 'leg(2)["state"] == "failed"'
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"
write_random "$c_uri" "$expected" 0 "$M"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
status_check "$ctl" 'leg(2)["state"] == "failed" and leg(1)["state"] == "uptodate"'
