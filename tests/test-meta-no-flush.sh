#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Clients that never flush do not stall the activity log (DESIGN.md
# section 5: "the engine flushes by itself above an AL high-water mark
# and every few seconds, so the AL drains even when clients never
# flush", as under nbdublk or nbdkit's fua filter).
#
# Two sparse 2 GiB file legs and a tight log: al-extents=64, i.e. 256
# MiB of the 2 GiB can be hot at once.  One client keeps 32 random 4 KiB
# writes in flight over the whole volume for 10 s (512 extents: the log
# is full all the time) and never flushes; it records when each write
# completes, and a thread samples volume.activity_log every 0.2 s.
# Asserted: capacity is 64; hot never exceeds it and does reach at
# least 3/4 of it (the test is tight); writes complete in every second:
# no gap between completions (nor from the start or to the end) is
# longer than 3 s; every write succeeds; and the engine did write its
# log many times (activity_log.writes grew).  Then both legs are equal.
# (About 10 s of the runtime are the removal of the two fragmented
# sparse files by the harness at the end.)

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import nbd, json'

ctl=$tmpdir/c.ctl
start_replica 0 --file 2G
start_replica 1 --file 2G
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  al-extents=64
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
test "$size" -gt $(( 2000 * 1024 * 1024 ))

python3 - "$c_uri" "$size" "$NBDREP" "$ctl" "$tmpdir/result.json" <<'EOF'
import json, nbd, os, random, subprocess, sys, threading, time
uri, size, nbdrep, ctl, out = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
SECS, DEPTH = 10, 32

samples = []
stop = threading.Event()
def sample():
    while not stop.is_set():
        s = json.loads(subprocess.run([nbdrep, "status", "--json", ctl],
                                      capture_output=True).stdout)
        samples.append(s["volume"]["activity_log"])
        stop.wait(0.2)
sampler = threading.Thread(target=sample)
sampler.start()

h = nbd.NBD()
h.connect_uri(uri)
buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(4096)))
rng = random.Random(7)
blocks = size // 4096
inflight = set()
done = []
start = time.monotonic()
end = start + SECS
while True:
    now = time.monotonic()
    if now < end:
        while len(inflight) < DEPTH:
            inflight.add(h.aio_pwrite(buf, rng.randrange(blocks) * 4096))
    elif not inflight:
        break
    if now > end + 30:
        sys.exit("%d writes still not completed 30 s after the end"
                 % len(inflight))
    h.poll(500)
    while inflight:
        cookie = h.aio_peek_command_completed()
        if cookie <= 0:
            break
        h.aio_command_completed(cookie)        # raises if it failed
        inflight.discard(cookie)
        done.append(time.monotonic())
stop.set()
sampler.join()
h.shutdown()

times = [start] + done + [max(end, done[-1] if done else end)]
gaps = [b - a for a, b in zip(times, times[1:])]
per_second = [0] * (SECS + 1)
for t in done:
    per_second[min(int(t - start), SECS)] += 1
json.dump({"writes": len(done), "max_gap": max(gaps),
           "per_second": per_second, "samples": samples},
          open(out, "w"))
print("writes %d, longest gap %.3f s, per second %r"
      % (len(done), max(gaps), per_second))
print("activity log samples: hot %r, log writes %d -> %d"
      % ([x["hot"] for x in samples], samples[0]["writes"],
         samples[-1]["writes"]))
EOF

python3 - "$tmpdir/result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
hot = [x["hot"] for x in r["samples"]]
assert len(hot) >= 20, "too few samples of the activity log: %d" % len(hot)
assert all(x["capacity"] == 64 for x in r["samples"]), r["samples"][0]
assert max(hot) <= 64, "the log held %d extents > its capacity" % max(hot)
assert max(hot) >= 48, "the log never got tight (max hot %d)" % max(hot)
assert r["max_gap"] < 3, "writes stalled for %.1f s" % r["max_gap"]
assert r["writes"] >= 1000, r["writes"]
writes = [x["writes"] for x in r["samples"]]
assert writes[-1] - writes[0] >= 10, "the log was written only %d times" \
    % (writes[-1] - writes[0])
EOF

# The volume is still healthy and the legs are equal (compared as files:
# reading 2 GiB twice through NBD would take longer than the test).
test "$(volume_state "$ctl")" = healthy
cmp -n "$size" "$tmpdir/r0.img" "$tmpdir/r1.img"
