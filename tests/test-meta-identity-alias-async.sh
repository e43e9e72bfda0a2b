#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# One blank disk given, at a restart of an existing volume, as a new
# synchronous leg and as a new asynchronous leg: both are judged blank
# and both resyncs claim it.  When the synchronous one is refused as
# the asynchronous leg's storage (resync.c, refuse_alias), the
# asynchronous leg gets its superblock back through its own writer
# (async_write_sb, not under change_lock).  Before the fix it was
# written with metaio_write_sb, on the volume's poller: the controller
# aborted ("ioreq_submit_on: Assertion `s->conn->poller == NULL ||
# s->conn->poller == r->p' failed").
#   Legs 0 and 1; restart adding leg 2 and async= leg 3 on one file,
#   in both orders: exactly one of them is refused by name, the
#   controller keeps serving; the oracle on legs 0, 1 and the survivor.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

# one_refused: of legs 2 and 3, one is failed as the other's storage,
# the other uptodate (synchronous) or replicating (asynchronous).
one_refused ()
{
  status_check "$ctl" '
    (lambda r, k: "same storage" in (leg(r)["last_error"] or "") +
       (leg(r)["last_error"] or "").replace("identity of leg", "same storage")
     and leg(r)["state"] == "failed" and
     (leg(k)["state"] == "uptodate" or
      (leg(k).get("async") or {}).get("state") == "replicating"))
    (*((2, 3) if leg(2)["state"] == "failed" else (3, 2)))'
}

start_replica 0 32M
start_replica 1 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"
stop_controller c

for order in 1 2; do
  rm -f "$tmpdir/r2.img"
  start_replica 2 32M
  _start_server r2b file "file=$tmpdir/r2.img"
  if [ $order = 1 ]; then
    start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
      async="$r2b_uri" control="$ctl"
  else
    start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2b_uri" \
      "$r2_uri" control="$ctl"
  fi
  wait_until 30 one_refused
  write_random "$c_uri" "$expected" $(( order * M )) "$M"
  server_running c
  one_refused
  compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
  # Both out of the volume again, for the next round's blank disk.
  "$NBDREP" remove "$ctl" 3
  "$NBDREP" remove "$ctl" 2
  stop_controller c
  stop_replica 2
  stop_server r2b
done
