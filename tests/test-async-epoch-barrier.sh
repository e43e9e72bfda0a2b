#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The epoch barrier of an asynchronous leg (nbdkit-replicate-plugin(1),
# ASYNCHRONOUS LEGS: "the leg is flushed before any write of the next
# epoch is sent"; async-sender.c, Epochs): the writes of epoch N+1 reach
# the leg only once the flush that ends epoch N has completed on it.
# Otherwise a crash of the leg's site while that flush is under way
# could keep a write made after a client's flush and lose one made
# before it: no crash state of the volume.
#
# Two file legs and an asynchronous one behind the faultinject filter,
# whose log gives the order in which the leg's server saw the requests
# ("fire" when one arrives, "done" once applied):
#   1. W1 (at 1M), a client flush (it ends the epoch: a marker), W2 (at
#      8M) at once, then a flush.  The leg's first flush, the one that
#      ends W1's epoch, is held 2 s.
#   2. In the log, a flush that arrived after W1 was applied completed
#      before W2 arrived.
#   3. Every acknowledged write is on every leg.

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
len=$(( 64 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  timeout=30 control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
new_expected "$expected" "$c_uri"

# 1.  The rules log W1, W2 and every flush (each its own id, in
# order); the first flush is held.
flush_rules=()
for i in $(seq 1 20); do
  flush_rules+=("id=f$i op=flush phase=hold secs=0 count=1")
done
fault_arm "$rules" \
  "id=w1 op=write range=$M-$(( M + len )) phase=hold secs=0 count=0" \
  "id=w2 op=write range=$(( 8 * M ))-$(( 8 * M + len )) phase=hold secs=0 count=0" \
  "id=held op=flush phase=hold secs=2 count=1" \
  "${flush_rules[@]}" "id=fx op=flush phase=hold secs=0 count=0"
"$NBDSH" -u "$c_uri" -c "
def put(seed, off):
    buf = bytes([seed]) * $len
    h.pwrite(buf, off)
    with open('$expected', 'r+b') as f:
        f.seek(off)
        f.write(buf)
put(0x41, $M)
h.flush()
put(0x42, 8 * $M)
h.flush()
"
wait_until 30 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
cat "$faults"

# 2.
python3 -c '
import sys
lines = [l.split() for l in open(sys.argv[1])]
def at(word, rid):
    return next((i for i, l in enumerate(lines) if l[:2] == [word, rid]),
                None)
w1_done, w2_fire = at("done", "w1"), at("fire", "w2")
assert w1_done is not None and w2_fire is not None, "W1 or W2 not logged"
assert w1_done < w2_fire, "W2 reached the leg before W1 was applied"
done = [(l[1], i) for i, l in enumerate(lines) if w1_done < i < w2_fire and
        l[0] == "fire" and l[3] == "flush" and
        any(m[:2] == ["done", l[1]] for m in lines[i + 1:w2_fire])]
if not done:
    sys.exit("W2 (epoch N+1) reached the asynchronous leg before a flush "
             "sent after W1 (epoch N) had completed on it")
print("W2 reached the leg after the flush %s ending the epoch of W1 completed"
      % done[0][0])
' "$faults"

# 3.
fault_clear "$rules"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
