#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A failing asynchronous leg never fails a client request, and comes
# back equal to the synchronous legs (DESIGN.md section 14; claim 4).
# Two file legs and an asynchronous one behind the faultinject filter;
# in each phase a client writes and flushes for 2 s (every request must
# succeed) while the leg's server:
#   1. refuses a write with EIO;
#   2. applies a write and then fails it with ENOSPC;
#   3. refuses a flush with EIO;
#   4. holds a write for 6 s, past timeout=2;
#   5. is killed (SIGKILL) and started again.
# After each phase the rules are cleared, and once the leg reports
# replicating with lag_bytes 0 after a flush it must equal the
# synchronous legs, which must equal every acknowledged write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  timeout=2 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# client SEED: writes and flushes for 2 s, all of which must succeed,
# mirrored into $expected.
client ()
{
  "$NBDSH" -u "$c_uri" -c "
import os, random, time
rng = random.Random($1)
end = time.monotonic() + 2
with open('$expected', 'r+b') as f:
    while time.monotonic() < end:
        off = rng.randrange(1024) * 16384
        buf = os.urandom(16384)
        h.pwrite(buf, off)
        f.seek(off)
        f.write(buf)
        if rng.random() < 0.2:
            h.flush()
    h.flush()
"
}

# caught_up: the leg replicates again, holding every write.
caught_up ()
{
  wait_until 60 status_check "$ctl" \
    'leg(2)["async"]["state"] == "replicating" and leg(2)["state"] == "syncing"'
  "$NBDSH" -u "$c_uri" -c 'h.flush()'
  wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
  compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
}

# phase ID RULE: the client runs while RULE (id=ID) is armed; it must
# have fired.
phase ()
{
  fault_arm "$rules" "id=$1 $2"
  client "$RANDOM"
  fault_wait "$faults" "$1" fire 10
  fault_clear "$rules"
  caught_up
}

phase werr "op=write range=0-16M phase=refuse error=EIO count=1"
phase wapply "op=write range=0-16M phase=apply-error error=ENOSPC count=1"
phase ferr "op=flush phase=refuse error=EIO count=1"
phase hold "op=write range=0-16M phase=hold secs=6 count=1"
status_check "$ctl" 'leg(2)["errors"] >= 4'

# 5.
"$NBDSH" -u "$c_uri" -c 'h.flush()'
client "$RANDOM" &
writer=$!
sleep 1
kill_replica 2
restart_replica 2
wait "$writer"
caught_up
