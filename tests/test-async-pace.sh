#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg that falls behind catches up only once it keeps
# pace with the volume again (issue 20: "then catches up with a resync
# once the leg keeps pace again").
#
# The leg's server is slow (delay filter, 50 ms per write: with its 16
# threads about 1.3 MiB/s of 4K writes, so that even a client slowed
# down by a loaded machine writes several times that) and its buffer
# small (async-buffer=2M); a client writes 4K blocks at random, 16 in
# flight (several times 1.3 MiB/s), for 8 s.  The leg falls behind at
# once.  While the client keeps writing, a catch-up would only fill the
# buffer again and fall behind again: the leg must stay behind (no new
# pull-ahead, never catching-up, over the last two thirds of the load)
# for as long as the load lasts, then catch up on its own once the
# client stops.  Then the oracle: every acknowledged write reads back
# through the controller, and every leg, the asynchronous one included,
# equals the model.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter delay

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
samples=$tmpdir/samples

start_replica 0 64M
start_replica 1 64M
start_replica 2 64M -- --filter=delay delay-write=50ms delay-zero=50ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=2M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'

# The asynchronous leg's state and pull-aheads, every 0.3 s, while the
# client writes.
(
  while :; do
    "$NBDREP" status --json "$ctl" 2>/dev/null |
      python3 -c 'import json, sys, time
a = json.load(sys.stdin)["legs"][2]["async"]
print(time.time(), a["state"], a["pull_aheads"])' >>"$samples" || :
    sleep 0.3
  done
) &
sampler=$!
cleanup_fn kill "$sampler"

"$NBDSH" -u "$c_uri" -c "
import os, random, time
rng = random.Random(20)
model = bytearray(h.get_size())
inflight = {}
end = time.monotonic() + 8
n = 0
while time.monotonic() < end or inflight:
    while len(inflight) < 16 and time.monotonic() < end:
        off = rng.randrange(len(model) // 4096) * 4096
        if off in inflight:
            continue
        buf = os.urandom(4096)
        inflight[off] = (h.aio_pwrite(buf, off), buf)
    h.poll(-1)
    for off, (cookie, buf) in list(inflight.items()):
        if h.aio_command_completed(cookie):
            model[off:off + 4096] = buf
            del inflight[off]
            n += 1
open('$tmpdir/load-end', 'w').write(str(time.time()))
h.flush()
open('$expected', 'wb').write(model)
got = h.pread(len(model), 0)
assert got == model, 'a write does not read back'
print('%d writes of 4K in 8 s, all read back' % n)
"
kill "$sampler"
wait "$sampler" || :
cat "$samples"

# After its first pull-ahead, the leg stayed behind while the load
# lasted (the samples taken before the client's last write).
python3 - "$samples" "$tmpdir/load-end" <<'EOF'
import sys
end = float(open(sys.argv[2]).read())
rows = [l.split()[1:] for l in open(sys.argv[1])
        if l.strip() and float(l.split()[0]) < end]
after = [r for r in rows if int(r[1]) >= 1]
if len(after) < 3:
    sys.exit('the leg fell behind late or never: %r' % rows)
# A leg that fell behind before any batch of its was measured may
# start one catch-up for nothing; from then on it must stay behind: the
# last two thirds of the samples all behind, with no new pull-ahead,
# and at most 3 in all (without the rule: one every second or so).
last = after[len(after) // 3:]
final = after[-1]
if final[0] != 'behind' or int(final[1]) > 3 or any(r != final for r in last):
    sys.exit('the leg did not stay behind while the load lasted: %r' % after)
EOF

# The load is over: it catches up on its own.
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
