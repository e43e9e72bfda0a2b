#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A running controller never re-elects: a leg that reconnects is
# uptodate only if it holds exactly the controller's current generation
# (DESIGN.md section 6, last rule; invariant 4: a stale or syncing leg
# is never read from).  Two file legs, read=first, in four parts:
#
#  A. `nbdrep fail` leg 1 and write 3 MiB at once (one client, within a
#     few ms, well before the 1 s reconnection): when leg 1 comes back
#     it must be seen syncing (resync-rate=1M keeps it there for ~2 s)
#     and its last resync must be incremental, of exactly the 3 MiB.
#  B. Leg 1's replica dies, then a write, then leg 0's replica dies: the
#     volume is failed.  Leg 0 was the last uptodate leg and holds the
#     current generation: it must come back uptodate directly (no
#     resync; the write readable), and leg 1 then resyncs.
#  C. A stale copy of leg 0's image (saved at a clean stop before all
#     this) is put in place while its replica is down.  With read=first
#     leg 0 would serve every read if it were taken as uptodate, so a
#     client reads the first 8 MiB in a loop from before leg 0 returns
#     until it is uptodate again: every read must return the new data.
#     Leg 0 must be seen syncing and get a full resync.
#  D. Both replicas die at the same moment under a running controller
#     and come back: the legs hold the last generation that was
#     recorded, and the volume must come back (healthy, data intact),
#     not stay failed with both legs stale forever.
# The oracle after each part.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import nbd, json'

ctl=$tmpdir/c.ctl
MiB=$(( 1024 * 1024 ))
start_replica 0 --file 32M
start_replica 1 --file 32M
start_volume ()
{
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
    read=first timeout=2
  wait_for test -S "$ctl"
}
start_volume
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
truncate -s "$size" "$tmpdir/expected"

# put FILE OFFSET [FLUSH]: write FILE at OFFSET through the controller
# and into the expected image.
put ()
{
  dd if="$1" of="$tmpdir/expected" oflag=seek_bytes seek="$2" \
     conv=notrunc status=none
  "$NBDSH" -u "$c_uri" -c "
h.pwrite(open('$1', 'rb').read(), $2)
if '${3-}': h.flush()
"
}
al_is_cold ()
{
  [ "$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["hot"]')" -eq 0 ]
}
# last_resync I: leg I's last_resync as "kind bytes", or None.
last_resync ()
{
  nbdrep_status_get "$ctl" "(lambda r: r and '%s %d' % (r['kind'], r['bytes']))(s['legs'][$1]['last_resync'])"
}
# flush_may_fail: a flush that may fail (the legs are dead).
flush_may_fail ()
{
  "$NBDSH" -u "$c_uri" -c 'h.flush()' || :
}

# --- The old data, and a copy of leg 0 at a clean stop.
head -c 8M /dev/urandom >"$tmpdir/old"
put "$tmpdir/old" 0 flush
stop_controller c
cp --sparse=always "$tmpdir/r0.img" "$tmpdir/stale0.img"
cp "$tmpdir/expected" "$tmpdir/expected-old"
start_volume
wait_volume_state 30 "$ctl" healthy

# --- A: nbdrep fail, write at once, leg 1 must resync.
"$NBDREP" set "$ctl" resync-rate 1M
wait_until 30 al_is_cold
head -c 3M /dev/urandom >"$tmpdir/a"
for k in 0 1 2; do
  dd if="$tmpdir/a" of="$tmpdir/expected" bs=1M skip="$k" count=1 \
     seek=$(( 9 + 4 * k )) conv=notrunc status=none
done
"$NBDSH" -u "$c_uri" -c "
import subprocess
subprocess.run(['$NBDREP', 'fail', '$ctl', '1'], check=True)
data = open('$tmpdir/a', 'rb').read()
for k in range(3):
    h.pwrite(data[k * $MiB:(k + 1) * $MiB], (9 + 4 * k) * $MiB)
"
wait_leg_state 10 "$ctl" 1 syncing
wait_leg_state 30 "$ctl" 1 uptodate
test "$(last_resync 1)" = "incremental $(( 3 * MiB ))"
test "$(last_resync 0)" = None
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$c_uri"
"$NBDREP" set "$ctl" resync-rate 0

# --- B: the last uptodate leg comes back uptodate directly.
kill_replica 1
flush_may_fail
wait_leg_state 10 "$ctl" 1 failed
head -c 1M /dev/urandom >"$tmpdir/b"
put "$tmpdir/b" $(( 21 * MiB )) flush
kill_replica 0
flush_may_fail
wait_volume_state 10 "$ctl" failed
lines=$(wc -l <"$tmpdir/c.log")
restart_replica 0
wait_leg_state 15 "$ctl" 0 uptodate
test "$(leg_state "$ctl" 1)" = failed
test "$(last_resync 0)" = None
tail -n +"$(( lines + 1 ))" "$tmpdir/c.log" | grep 'leg 0 .* is back, up to date'
compare_legs "$tmpdir/expected" "$c_uri"
restart_replica 1
wait_volume_state 30 "$ctl" healthy
test "$(last_resync 1 | cut -d' ' -f1)" = incremental
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$c_uri"

# --- C: a stale image of leg 0 is never read from.
head -c 8M /dev/urandom >"$tmpdir/new"
put "$tmpdir/new" 0 flush
kill_replica 0
flush_may_fail
wait_leg_state 10 "$ctl" 0 failed
cp --sparse=always "$tmpdir/stale0.img" "$tmpdir/r0.img"
# The stale image really is different where the reader looks.
if cmp -s -n $(( 8 * MiB )) "$tmpdir/r0.img" "$tmpdir/new"; then
  echo "$0: the stale image holds the new data"
  exit 1
fi
# Slow enough that the reader sees leg 0 syncing for ~2 s (the rate
# counts the zeroes of a full resync too; while clients read, resync
# yields down to resync-min-rate, so both are set).
"$NBDREP" set "$ctl" resync-rate 16M
"$NBDREP" set "$ctl" resync-min-rate 16M
python3 - "$c_uri" "$tmpdir/new" "$tmpdir/reader" <<'EOF' &
import nbd, os, sys
uri, expected, out = sys.argv[1:]
want = open(expected, "rb").read()
h = nbd.NBD()
h.connect_uri(uri)
reads = bad = 0
while not os.path.exists(out + ".stop"):
    for off in range(0, len(want), 1024 * 1024):
        if h.pread(1024 * 1024, off) != want[off:off + 1024 * 1024]:
            bad += 1
        reads += 1
open(out, "w").write("%d %d\n" % (reads, bad))
EOF
reader=$!
restart_replica 0
wait_leg_state 10 "$ctl" 0 syncing
wait_leg_state 30 "$ctl" 0 uptodate
touch "$tmpdir/reader.stop"
wait "$reader"
read -r reads bad <"$tmpdir/reader"
test "$bad" -eq 0
test "$reads" -ge 8
test "$(last_resync 0 | cut -d' ' -f1)" = full
"$NBDREP" set "$ctl" resync-rate 0
"$NBDREP" set "$ctl" resync-min-rate 4M
wait_volume_state 10 "$ctl" healthy
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$c_uri"

# --- D: both legs die at once and come back to the running controller.
wait_until 30 al_is_cold
kill -KILL "$(server_pid r0)" "$(server_pid r1)"
# (kill_replica only reaps them here: its own kill(1) of the dead
# process fails, which is why it runs as a condition.)
for i in 0 1; do
  if ! kill_replica "$i"; then echo "$0: cannot reap replica $i"; exit 1; fi
done
flush_may_fail
wait_volume_state 10 "$ctl" failed
restart_replica 0
restart_replica 1
wait_volume_state 20 "$ctl" healthy
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$c_uri"
