#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A write queued for an asynchronous leg keeps its activity-log extents
# hot until the flush that ends its epoch has completed on the leg
# (nbdkit-replicate-plugin(1), ASYNCHRONOUS LEGS; async.c, "Nothing is
# lost in a crash"), so after a controller crash the log on the
# synchronous legs names everything the leg may lack: the next start ORs
# it into the leg's bitmap and the leg resyncs it.  An extent cooled
# once the leg had answered the write, before its flush, would leave a
# write the leg's volatile cache loses in a crash out of every record.
#
# Legs 0 and 1 synchronous (0 behind the faultinject filter), leg 2
# asynchronous behind faultinject and nbdkit's cache filter with
# cache=writeback (written blocks reach its file only on a flush; kill -9
# loses them, test-safety-multiconn-flush.sh):
#   1. S (at 0) is written; leg 0 holds it 5 s, so its extent stays
#      referenced by the client write until then.  Leg 2 gets S and
#      flushes it (the sender's idle flush, 200 ms later).
#   2. W (at 16M, another extent) and a client flush: leg 2 gets W, then
#      the flush ending W's epoch, which it holds (30 s).
#   3. While S is held, the cooler (a pass every 2 s) may cool neither
#      extent: W's is referenced by leg 2's queue until its flush (a
#      build that let it go at the leg's answer cools it here).  Once S
#      is back, a pass cools S's extent; W's stays hot.
#   4. The controller, then leg 2's server, are killed (-9): the leg's
#      file lacks W (the cache lost it).
#   5. Restart: crash recovery ORs the log into leg 2's bitmap and it
#      resyncs incrementally; then every leg holds every write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter cache

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))
len=$(( 256 * 1024 ))
w_off=$(( 16 * M ))

start_replica 0 32M -- --filter="$FAULTINJECT" rules="$tmpdir/r0.rules" \
  log="$tmpdir/r0.faults"
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" --filter=cache \
  rules="$tmpdir/r2.rules" log="$tmpdir/r2.faults" cache=writeback
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
new_expected "$expected" "$c_uri"
head -c "$len" /dev/urandom >"$tmpdir/s.data"
head -c "$len" /dev/urandom >"$tmpdir/w.data"
wait_until 30 status_check "$ctl" 's["volume"]["activity_log"]["hot"] == 0'

# 1.
fault_arm "$tmpdir/r2.rules" \
  "id=s2 op=write range=0-$len phase=hold secs=0 count=1"
fault_arm "$tmpdir/r0.rules" \
  "id=s op=write range=0-$len phase=hold secs=5 count=1"
"$NBDSH" -u "$c_uri" -c "
h.pwrite(open('$tmpdir/s.data', 'rb').read(), 0)
h.flush()
" &
s_writer=$!
fault_wait "$tmpdir/r0.faults" s fire 10
fault_wait "$tmpdir/r2.faults" s2 done 10
wait_until 10 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'

# 2.
fault_arm "$tmpdir/r2.rules" "id=epoch op=flush phase=hold secs=30 count=1"
"$NBDSH" -u "$c_uri" -c "
h.pwrite(open('$tmpdir/w.data', 'rb').read(), $w_off)
h.flush()
"
fault_wait "$tmpdir/r2.faults" epoch fire 10
if _fault_logged "$tmpdir/r0.faults" done s; then
  echo "$0: S came back before leg 2's flush was held: too slow to tell"
  exit 1
fi

# 3.  Until S comes back its extent is referenced, and so is W's, by
# leg 2's queue: a sample of the log taken before S's "done" must show
# both hot (a pass cools W's in a broken build: the window is over 4 s,
# two passes).  Then a pass cools S's extent (a commit of the log), and
# W's stays.
commits=$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["writes"]')
while :; do
  hot=$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["hot"]')
  if _fault_logged "$tmpdir/r0.faults" done s; then
    break       # (this sample may postdate S's answer)
  fi
  if [ "$hot" -ne 2 ]; then
    echo "$0: $hot extents hot while S is held: W's extent was cooled" \
         "before leg 2 had flushed W"
    exit 1
  fi
  sleep 0.1
done
wait "$s_writer"
wait_until 20 status_check "$ctl" \
  "s['volume']['activity_log']['hot'] <= 1 and s['volume']['activity_log']['writes'] > $commits"
status_check "$ctl" \
  's["volume"]["activity_log"]["hot"] == 1 and leg(2)["async"]["lag_bytes"] > 0'
if _fault_logged "$tmpdir/r2.faults" done epoch; then
  echo "$0: leg 2's flush of W came back: the hold did not hold"
  exit 1
fi

# 4.
kill_controller c
kill_replica 2
if cmp -s -n "$len" -i 0:"$w_off" "$tmpdir/w.data" "$tmpdir/r2.img"; then
  echo "$0: W reached r2.img: the cache filter did not lose it"
  exit 1
fi

# 5.
fault_clear "$tmpdir/r0.rules"
fault_clear "$tmpdir/r2.rules"
python3 -c "
with open('$expected', 'r+b') as f:
    for off, name in ((0, 's'), ($w_off, 'w')):
        f.seek(off)
        f.write(open('$tmpdir/%s.data' % name, 'rb').read())
"
restart_replica 2
restart_controller c
wait_volume_state 30 "$ctl" healthy
server_run_log c | grep 'crash recovery:'
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" \
  'leg(2)["last_resync"]["kind"] == "incremental" and leg(2)["last_resync"]["bytes"] > 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
