#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A failover right after a pull-ahead: the asynchronous leg is stale
# (behind) but must still hold a crash state of the volume (its last
# flushed epoch plus part of the next), and prefer=2 force=true must
# promote it with exactly that data (DESIGN.md section 14; claims 1, 3
# and 5).
#   1. Random writes and flushes through the controller for 3 s, logged
#      for the model (async-model.py); a flush; the leg catches up.
#   2. The leg's server is paused; a burst of logged writes, with
#      flushes among them, overflows the 1M buffer: the leg pulls
#      ahead while a batch of its writes waits in the paused server.
#   3. The controller is killed (SIGKILL), the server resumed (the
#      batch lands), and the leg's data area must be a crash state of
#      the logged writes.
#   4. Both synchronous legs are lost: prefer=2 force=true promotes the
#      leg and the volume reads exactly what the leg held.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
log=$tmpdir/writes.log
model="$abs_top_srcdir/tests/async-model.py"

start_replica 0 32M
start_replica 1 32M
# -t 1: see test-async-stop-behind.sh (nbdkit 1.32 aborts when a client
# hangs up while two threads send replies, as when the pause ends after
# the controller was killed).
start_replica 2 32M -- -t 1 --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
size=$("$NBDINFO" --size "$c_uri")

# writes SEQ SECONDS|COUNT: logged writes (async-model.py's content and
# log format), numbered from SEQ, a flush after about one in seven;
# for SECONDS s (a float) or COUNT writes (an integer).
writes ()
{
  "$NBDSH" -u "$c_uri" -c "
import importlib.util, json, random, time
spec = importlib.util.spec_from_file_location('model', '$model')
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
limit = '$2'
deadline = time.monotonic() + float(limit) if '.' in limit else None
left = None if deadline else int(limit)
blocks = h.get_size() // m.BLOCK
rng = random.Random($1)
seq = $1
with open('$log', 'a') as f:
    while (time.monotonic() < deadline) if deadline else left > 0:
        if left is not None:
            left -= 1
        seq += 1
        n = rng.choice([1, 2, 4, 16])
        start = rng.randrange(64) * 4 if rng.random() < 0.5 else rng.randrange(blocks - n)
        h.pwrite(m.content(seq, n * m.BLOCK), start * m.BLOCK)
        f.write(json.dumps({'w': [start * m.BLOCK, n * m.BLOCK, seq]}) + '\n')
        if rng.random() < 0.15:
            h.flush()
            f.write(json.dumps({'f': seq}) + '\n')
        f.flush()
    h.flush()
    f.write(json.dumps({'f': seq}) + '\n')
"
}

# 1.
: >"$log"
writes 1 3.0
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
# (On a loaded machine the leg may have pulled ahead already.)
n=$(nbdrep_status_get "$ctl" 'next(l for l in s["legs"] if l["index"] == 2)["async"]["pull_aheads"]')

# 2.
pause_replica "$pause"
writes 100000 300
status_check "$ctl" \
  "leg(2)['async']['pull_aheads'] == $n + 1 and leg(2)['async']['state'] == 'behind'"

# 3.
kill_controller c
resume_replica "$pause"
# The paused batch lands, then the server closes the dead connection.
wait_until 30 "$NBDINFO" --size "$r2_uri"
sleep 1
head -c "$size" "$tmpdir/r2.img" >"$tmpdir/leg2.img"
python3 "$model" check "$log" "$tmpdir/leg2.img"

# 4.
stop_replica 0
stop_replica 1
rm -f "$tmpdir/r0.img" "$tmpdir/r1.img"
start_replica 0 --memory 32M
start_replica 1 --memory 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl" prefer=2 force=true
grep 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
wait_volume_state 60 "$ctl" healthy
truncate -s "$size" "$tmpdir/leg2.img"
compare_legs "$tmpdir/leg2.img" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
