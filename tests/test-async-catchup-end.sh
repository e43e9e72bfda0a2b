#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The end of an asynchronous leg's catch-up (a pull-ahead, then a resync
# of its bitmap) marks it consistent only once what it was sent has
# been flushed on it (nbdkit-replicate-plugin(1), ASYNCHRONOUS LEGS:
# "while catching up it is not consistent"; resync.c, finish_async:
# async_drain before the inconsistent flag is cleared).  During the
# catch-up the leg receives writes through its queue while the resync
# copies the volume's newest data over its bitmap's chunks: until every
# write queued before the end is flushed, the leg may hold a copy of a
# chunk newer than a queued write it lacks, which no crash state of the
# volume holds.  Declared consistent (its superblock, status, a
# failover's check) before that flush, a crash of its site lets a
# failover promote such a leg.
#
# Two file legs and an asynchronous one behind the faultinject filter:
#   1. The leg's server holds a write 2 s while 3M is written: the 1M
#      buffer overflows, the leg pulls ahead (the rest in its bitmap).
#   2. It catches up; the leg's server holds the copy of [1M, 2M) 2 s.
#      Meanwhile W (at 24M) and a client flush: W is queued for the leg,
#      which holds it 4.5 s, past the copy's end; every flush the leg gets
#      is held 0.5 s.
#   3. Status may say consistent only once W was applied and a flush
#      sent after it had completed (the faultinject log, read after
#      each status sample).
#   4. The leg replicates again and holds every write.

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
M=$(( 1024 * 1024 ))
K64=65536
w_off=$(( 24 * M ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
new_expected "$expected" "$c_uri"

# 1.
fault_arm "$rules" "id=stall op=write phase=hold secs=2 count=1"
"$NBDSH" -u "$c_uri" -c "
import os
with open('$expected', 'r+b') as f:
    for i in range(48):
        buf = os.urandom($K64)
        h.pwrite(buf, i * $K64)
        f.seek(i * $K64)
        f.write(buf)
    h.flush()
"
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] == 1'

# 2.  The catch-up's copy of [1M, 2M) held, W's rule, then one rule per
# flush (each its own id, in order), then the rest of the flushes.
flush_rules=()
for i in $(seq 1 40); do
  flush_rules+=("id=f$i op=flush phase=hold secs=0.5 count=1")
done
fault_arm "$rules" \
  "id=copy op=write range=$M-$(( 2 * M )) phase=hold secs=2 count=1" \
  "id=w op=write range=$w_off-$(( w_off + K64 )) phase=hold secs=4.5 count=1" \
  "${flush_rules[@]}" "id=fx op=flush phase=hold secs=0.5 count=0"
fault_wait "$faults" copy fire 30
status_check "$ctl" 'leg(2)["async"]["state"] == "catching-up"'
write_random "$c_uri" "$expected" "$w_off" $K64
fault_wait "$faults" w fire 10
if _fault_logged "$faults" done copy; then
  echo "$0: the copy came back before W was sent: too slow to tell"
  exit 1
fi

# 3.
catchup_end_seen ()
{
  python3 -c '
import sys
lines = [l.split() for l in open(sys.argv[1])]
def at(word, rid, start=0):
    return next((i for i in range(start, len(lines))
                 if lines[i][:2] == [word, rid]), None)
w_done = at("done", "w")
if w_done is None:
    sys.exit("the leg is consistent while W, queued for it during its "
             "catch-up, is not even applied")
for i in range(w_done + 1, len(lines)):
    l = lines[i]
    if l[0] == "fire" and l[3] == "flush" and at("done", l[1], i + 1):
        print("consistent after W and the flush %s" % l[1])
        sys.exit(0)
sys.exit("the leg is consistent while no flush sent after W (applied, "
         "queued for it during its catch-up) has completed")
' "$faults"
}
deadline=$(( $(now_us) + 30000000 ))
while :; do
  state=$(nbdrep_status_get "$ctl" \
    'next(str(l["async"]["consistent"]) + " " + l["async"]["state"] for l in s["legs"] if l["index"] == 2)')
  if [ "${state%% *}" = True ]; then
    catchup_end_seen
    break
  fi
  if [ "$(now_us)" -gt "$deadline" ]; then
    echo "$0: the catch-up did not end (status: $state)"
    exit 1
  fi
  sleep 0.1
done
cat "$faults"

# 4.
fault_clear "$rules"
wait_until 30 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
