#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# backup-begin while a client write is in flight: the held leg is a
# point-in-time source (nbdrep(1), BACKUPS; nbdkit-replicate-plugin(1),
# "Point in time": it holds the volume as it was at one moment), so
# the write is in it wholly or not at all, and it does not change while
# the backup runs; once the backup ends the leg has every write
# (backup.c: begin keeps every client write out with a range lock over
# the whole volume, so a write in flight is finished on every leg,
# the one to be held included, before the leg is flushed and held).
#
# Driven: three file legs, leg 2 (the one backup-begin holds) behind
# the faultinject filter.  W (1 MiB at 4 MiB) is written while leg 2's
# server holds W's write for 3 s before applying it; with the write
# held there, backup-begin is sent.  Right after its reply, leg 2's
# data area is read directly (A); once W is acknowledged and W2 (1 MiB
# at 12 MiB, after the begin: not in the backup) written, it is read
# again (B).  A must equal B and equal the volume either without W or
# with W.  A begin that did not wait for W would hold leg 2 with W
# still to land in it: A without W, B with it.  Then backup-end (done)
# and the oracle: every leg equals what the client wrote, W and W2.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

MiB=$(( 1024 * 1024 ))
W=$(( 4 * MiB ))
ctl=$tmpdir/c.ctl
rules=$tmpdir/r2.rules
faults=$tmpdir/r2.faults
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 $(( 8 * MiB ))
cp "$expected" "$tmpdir/before"            # the volume without W
head -c "$MiB" /dev/urandom >"$tmpdir/W"
cp "$expected" "$tmpdir/after"             # ... and with it
dd if="$tmpdir/W" of="$tmpdir/after" bs="$MiB" seek=$(( W / MiB )) \
  conv=notrunc status=none

# W, held on leg 2 for 3 s before it is applied there.
fault_arm "$rules" \
  "id=w op=write range=$W-$(( W + MiB )) phase=hold secs=3 count=1"
"$NBDSH" -u "$c_uri" -c "
h.pwrite(open('$tmpdir/W', 'rb').read(), $W)
h.flush()
print('W acknowledged', flush=True)
" >"$tmpdir/w.out" 2>&1 &
writer=$!
_stop_writer () { kill "$writer" 2>/dev/null || :; wait "$writer" 2>/dev/null || :; }
cleanup_fn _stop_writer
fault_wait "$faults" w fire 10

session_open
r=$(session_ask '{"cmd":"backup-begin","base":null}')
"$NBDCOPY" --no-extents "$r2_uri" "$tmpdir/A"
reply_check "$r" "r['ok'] and r['consistency'] == 'point-in-time' and
  r['leg'] == 2"
t=$(reply_get "$r" token)
cat "$faults"

wait "$writer"
cat "$tmpdir/w.out"
grep -q 'W acknowledged' "$tmpdir/w.out"
cp "$tmpdir/after" "$expected"
write_random "$c_uri" "$expected" $(( 12 * MiB )) "$MiB"       # W2
_fault_logged "$faults" done w
"$NBDCOPY" --no-extents "$r2_uri" "$tmpdir/B"

# The point in time: A is the volume without W or with it, and B is A.
if cmp -s -n "$size" "$tmpdir/A" "$tmpdir/before"; then
  echo "the backup holds the volume before W"
elif cmp -s -n "$size" "$tmpdir/A" "$tmpdir/after"; then
  echo "the backup holds the volume after W"
else
  cmp -n "$size" "$tmpdir/A" "$tmpdir/after" || :
  echo "$0: the held leg at the begin is neither before nor after W" >&2
  exit 1
fi
if ! cmp -n "$size" "$tmpdir/A" "$tmpdir/B"; then
  echo "$0: the held leg changed while the backup ran (W landed in it" \
       "after backup-begin)" >&2
  exit 1
fi

r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$t\",\"result\":\"done\"}")
reply_check "$r" "r['ok']"
session_close
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
