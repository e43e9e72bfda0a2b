#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A resync flushes its target before a checkpoint clears copied chunks
# from the target's bitmap (and writes it), and before its end clears
# the target's inconsistent flag and records it as uptodate (resync.c,
# steps 3 and 4; resync_checkpoint in resync-copy.c): what the metadata
# says is in sync must be durable on the target.
#
# Two 64 MiB file legs.  Leg 1, the resync target, is served through
# nbdkit's cache filter with cache=writeback, which keeps written blocks
# in its own (unlinked, temporary) cache file and writes them to the
# file only on flush (a FUA write: that request only); kill -9 of the
# replica throws the cache away, like a disk losing its volatile write
# cache (first checked on a spare replica alone: an unflushed write is
# lost).  Leg 0, the source, is served through the faultinject filter.
#
# 1. A checkpoint.  Leg 1 killed; A (2 MiB at 0, two runs of the copy)
#    and B (1 MiB at 8 MiB) written to leg 0 alone; the log cold; leg 1
#    back: its incremental resync copies A and B, but the source holds
#    the read of A's second run 3 s (longer than a checkpoint's 2 s
#    interval) and B's read for good.  A's second run, once copied,
#    makes a checkpoint: leg 0's bitmap for leg 1's slot (nbdrep
#    inspect) drops to B alone.  Then kill -9 of leg 1, the controller
#    and leg 0 (whose hold would outlast the test).  Leg 1's file must
#    hold A (its bits are cleared on disk).  All restarted: the resync
#    resumes, copies B alone and ends; every leg reads back every
#    acknowledged write.
# 2. The end.  Once that resync has ended (recorded: leg 1 a member,
#    not inconsistent; its final line logged after the generation bump)
#    and before any other flush (reads only, the log cold), kill -9 of
#    leg 1 and the controller.  Leg 1's file must hold B; restarted,
#    with no resync of leg 1, every leg reads back every acknowledged
#    write.
# A checkpoint (or end) that did not flush its target would leave A (B)
# only in leg 1's lost cache while its metadata calls leg 1 in sync
# there: nothing would repair it.  Driven: with resync_checkpoint's
# flush skipped in the copiers' (mid-pass) checkpoints, case 1 fails;
# skipped in the resync thread's (after the pass, and finish's), case 2
# fails (leg 1's file lacks B, and after the restart the legs differ).

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter cache
requires python3 -c 'import json'

MiB=$(( 1024 * 1024 ))
ctl=$tmpdir/c.ctl
rules=$tmpdir/r0.rules
faults=$tmpdir/r0.faults
expected=$tmpdir/expected
log=$tmpdir/c.log

# The setup loses unflushed writes: a spare replica alone (no
# controller, so nobody else flushes it), written and not flushed,
# killed.
start_replica 9 --file 16M -- --filter=cache cache=writeback
head -c 65536 /dev/urandom >"$tmpdir/probe"
"$NBDSH" -u "$r9_uri" -c "h.pwrite(open('$tmpdir/probe', 'rb').read(), 4096)"
kill_replica 9
if cmp -s -n 65536 -i 0:4096 "$tmpdir/probe" "$tmpdir/r9.img"; then
  echo "$0: an unflushed write reached r9.img: the cache filter does not lose it"
  exit 1
fi

start_replica 0 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_replica 1 -- --filter=cache cache=writeback
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# _cold: is no activity-log extent hot?  (A cooling pass with hot
# extents flushes every leg, the target too: none may come during the
# resyncs.)
_cold ()
{
  [ "$(nbdrep_status_get "$ctl" "s['volume']['activity_log']['hot']")" -eq 0 ]
}
# _oos_is BYTES: does leg 0's disk say leg 1's slot is out of sync over
# BYTES (its bitmap as written, without the activity log)?
_oos_is ()
{
  [ "$("$NBDREP" inspect "$r0_uri" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(sum(o["bytes"] for o in j["out_of_sync"] if o["slot"] == 1))')" -eq "$1" ]
}
# _holds FILE OFFSET LEN: does r1.img hold FILE's LEN bytes at OFFSET
# (FILE: the expected image)?
_holds ()
{
  cmp -s -n "$3" -i "$2:$2" "$1" "$tmpdir/r1.img"
}
# _resyncs_done: how many resyncs the controller has ended since its
# start, the target recorded uptodate: "resync done, N bytes copied" is
# logged once finish returned, after the generation bump (not the
# state change's "-> uptodate (resync done)", before it).
_resyncs_done ()
{
  server_run_log c | grep -c 'resync done, .* bytes copied' || :
}
# _resynced_after N: has a resync ended after the first N?
_resynced_after ()
{
  [ "$(_resyncs_done)" -gt "$1" ]
}
# _kill_all NAME...: kill -9 the servers NAME... at once, from one
# process (nothing can come in between), then reap them.
_kill_all ()
{
  local name pids=
  for name in "$@"; do pids+="$(server_pid "$name"), "; done
  python3 -c "
import os, signal
for pid in ($pids):
    os.kill(pid, signal.SIGKILL)
"
  for name in "$@"; do
    if ! kill_server "$name"; then
      echo "$0: $name could not be reaped"
      return 1
    fi
  done
}

# 1. A checkpoint.
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" 0 $(( 2 * MiB ))              # A
write_random "$c_uri" "$expected" $(( 8 * MiB )) "$MiB"         # B
wait_until 30 _cold
wait_until 10 _oos_is $(( 3 * MiB ))
fault_arm "$rules" \
  "id=late op=read range=1M-2M phase=hold secs=3 count=1" \
  "id=park op=read range=8M-9M phase=hold secs=60 count=1"
restart_replica 1
fault_wait "$faults" park fire 30
fault_wait "$faults" late done 30
# The checkpoint after A's second run, on disk: B's bits alone left.
wait_until 20 _oos_is "$MiB"
_kill_all r1 c r0
cat "$faults"
if ! _holds "$expected" 0 $(( 2 * MiB )); then
  echo "$0: leg 1's file does not hold A, whose bits a checkpoint" \
       "cleared on disk: the checkpoint did not flush the target" >&2
  exit 1
fi
fault_clear "$rules"
restart_replica 0
restart_replica 1
restart_controller c
wait_until 30 _resynced_after 0
wait_volume_state 30 "$ctl" healthy
# The resync resumed from the checkpoint: B alone was copied again.
if ! server_run_log c | grep "incremental resync of $MiB bytes started"; then
  echo "$0: after the restart leg 1's resync did not copy B alone" >&2
  exit 1
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"

# 2. The end: that resync ended (leg 1 recorded uptodate) and nothing
# flushed leg 1 since (reads only).
_kill_all r1 c
if ! _holds "$expected" $(( 8 * MiB )) "$MiB"; then
  echo "$0: leg 1's file does not hold B, though the resync that copied" \
       "it ended (leg 1 recorded uptodate): the end did not flush the" \
       "target" >&2
  exit 1
fi
restart_replica 1
restart_controller c
wait_volume_state 30 "$ctl" healthy
if server_run_log c | grep 'resync of .* started'; then
  echo "$0: leg 1 was resynced after the restart: it was not recorded" \
       "uptodate" >&2
  exit 1
fi
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
