#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg failed while its sender holds answered but
# unflushed writes (an epoch still open) must come back: stale, then
# catching up, then replicating.  Found by the fault campaign
# (torture.py with its asynchronous leg: TORTURE_SEED=3003
# TORTURE_SHAPE=filter TORTURE_ASYNC_KNOWN=failed-write,old-gen, round
# 18: the async leg's resync gave up, "no uptodate source", and the leg
# stayed stale, async state behind, lag_bytes 67231744, buffer_used 0,
# for 120 s, nbdrep resync accepted and doing nothing).
#
# As I read async.c: the sender drops what is unflushed only when its
# own request fails (sender_failed_locked) or, dropping, flushes it
# (flush_due_locked); a failure recorded by someone else
# (member_fail_leg from give_up, nbdrep fail ...) while the sender
# waits for the marker that ends the open epoch leaves it waiting:
# markers are queued only for legs that receive writes
# (async_cut_epochs), so none comes, `unflushed` stays, async_idle is
# never true, and the monitor never starts the catch-up (monitor.c,
# next_action: LEG_STALE needs async_idle).
#
# Two synchronous legs and an asynchronous one: 1M is written with no
# flush, the leg is failed at once with nbdrep fail (before the
# activity log's own flush ends the epoch), and must replicate again
# and equal the synchronous legs.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# Writes, no flush; the leg answers them at once (nothing delays it);
# then nbdrep fail before anything ends the epoch.
"$NBDSH" -u "$c_uri" -c "
import os, subprocess, time
buf = os.urandom(1048576)
for i in range(16):
    h.pwrite(buf[i * 65536:(i + 1) * 65536], 4194304 + i * 65536)
with open('$expected', 'r+b') as f:
    f.seek(4194304)
    f.write(buf)
time.sleep(0.05)
subprocess.run(['$NBDREP', 'status', '--json', '$ctl'], check=False)
subprocess.run(['$NBDREP', 'fail', '$ctl', '2'], check=True)
"
"$NBDREP" status "$ctl" || :

wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["resync"] is None'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
