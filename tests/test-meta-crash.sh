#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A controller crash (SIGKILL) under parallel writes loses no
# acknowledged write and is repaired from the activity log alone
# (DESIGN.md section 5, invariants 1 and 3).  Three file legs; six
# clients (meta-writers.py) write random-length (4-128 KiB) blocks of
# deterministic pseudo-random data at random places of their own 8 MiB
# region, one write at a time, and log every write once it is
# acknowledged ("A") and the one in flight when the controller died
# ("U").  The controller is killed with SIGKILL while they run, with
# leg 2's replica stopped so that the writes in flight are on legs 0
# and 1 only (that replica is then killed and restarted).  Then:
#  - before the restart: wherever the legs differ, the difference lies
#    in an extent of the activity logs found on the legs (the union of
#    their `nbdrep inspect` ranges): only the AL can differ after a crash;
#  - the restarted controller logs a crash recovery of between 1 and 12
#    activity-log extents (the clients' regions span at most 12 extents
#    of 4 MiB)
#    and starts healthy with no resync of any leg (no full copy);
#  - through the controller and on every leg, each client's region is
#    exactly its acknowledged writes replayed in order, each 4 KiB block
#    of the one in flight old or new (meta-writers.py check); all legs
#    are identical.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires python3 -c 'import nbd, random; random.Random(1).randbytes(1)'

ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" --file 64M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy

clients=6
region=$(( 2 * 1024 * 1024 ))
writers=$abs_top_srcdir/tests/meta-writers.py
ids=()            # every client id of every attempt (for the final check)

# crash_once ATTEMPT: run six clients (ids ATTEMPT*6 ..), stop leg 2's
# replica and kill the controller under them (see below), restart the
# replica.  Returns 3 if the legs came out identical (every write in
# flight was still waiting for its activity-log commit, which the stopped
# leg held up: nothing to recover), 0 if they differ only inside the
# activity log; any other failure fails the test.
crash_once ()
{
  local first=$(( $1 * clients )) cid i pids=() rc=0
  for (( cid = first; cid < first + clients; cid++ )); do
    ids+=("$cid")
    python3 "$writers" write "$cid" "$c_uri" "$tmpdir/log$cid" "$region" &
    pids+=($!)
  done
  enough_writes ()
  {
    local c
    for (( c = first; c < first + clients; c++ )); do
      [ "$(grep -c '^A' "$tmpdir/log$c" 2>/dev/null)" -ge 40 ] || return 1
    done
  }
  wait_until 30 enough_writes
  # Make sure the legs differ when the controller dies: leg 2's replica
  # is stopped (SIGSTOP), so every client's next write lands on legs 0
  # and 1 and waits for leg 2; once all six are waiting, the controller
  # is killed, and then leg 2's replica, whose unread requests die with
  # it.  (A delay filter would do the same, but stock nbdkit 1.32
  # sometimes aborts when a client disconnects during its sleep.)
  kill -STOP "$(server_pid r2)"
  leg2_waits ()
  {
    [ "$(nbdrep_status_get "$ctl" 's["legs"][2]["inflight"]')" -ge "$clients" ]
  }
  wait_until 10 leg2_waits
  kill_controller c
  kill_replica 2
  restart_replica 2
  for pid in "${pids[@]}"; do
    wait "$pid"
  done
  for (( cid = first; cid < first + clients; cid++ )); do
    tail -n1 "$tmpdir/log$cid"
    grep -c '^A' "$tmpdir/log$cid"
    test "$(grep -c '^U' "$tmpdir/log$cid")" -eq 1
  done

  # Before recovery: the legs differ only inside the activity log.
  for i in 0 1 2; do
    uri_var=r${i}_uri
    "$NBDREP" inspect --json "${!uri_var}" >"$tmpdir/inspect$i.json"
    "$NBDCOPY" --no-extents "${!uri_var}" "$tmpdir/leg$i.img"
  done
  python3 - "$tmpdir" <<'PYEOF' || rc=$?
import json, sys
d = sys.argv[1]
ranges = []
for i in range(3):
    ins = json.load(open("%s/inspect%d.json" % (d, i)))
    ranges += [(r["offset"], r["offset"] + r["length"])
               for r in ins["activity_log"]["ranges"]]
    size = ins["superblock"]["volume_size"]
assert ranges, "no activity log on any leg after a crash under writes"
legs = [open("%s/leg%d.img" % (d, i), "rb").read()[:size] for i in range(3)]
diff = 0
for off in range(0, size, 4096):
    blocks = [l[off:off + 4096] for l in legs]
    if blocks[0] == blocks[1] == blocks[2]:
        continue
    diff += 1
    assert any(a <= off < b for a, b in ranges), \
        "legs differ at %d, outside the activity log %r" % (off, ranges)
print("activity log %r; %d 4K blocks differ between the legs, all in it"
      % (sorted(set(ranges)), diff))
sys.exit(0 if diff > 0 else 3)
PYEOF
  return "$rc"
}

# Up to three attempts at a crash with writes in flight on two legs only
# (on a loaded machine every write in flight may still be waiting for
# its activity-log commit: then the controller is restarted and the
# crash tried again; the acknowledged writes of every attempt are
# checked at the end).
for attempt in 0 1 2; do
  rc=0
  crash_once "$attempt" || rc=$?
  [ "$rc" -eq 3 ] || break
  [ "$attempt" -lt 2 ] || { echo "$0: the legs never differed"; exit 1; }
  restart_controller c
  wait_volume_state 30 "$ctl" healthy
done
test "$rc" -eq 0

# --- Restart: crash recovery of the AL extents only, no resync.
lines_before=$(wc -l <"$tmpdir/c.log")
restart_controller c
wait_for test -S "$ctl"
tail -n +"$(( lines_before + 1 ))" "$tmpdir/c.log" >"$tmpdir/c-restart.log"
recovery=$(grep -o 'crash recovery: [0-9]* activity-log extent(s), [0-9]* bytes' \
             "$tmpdir/c-restart.log")
extents=$(awk '{print $3}' <<<"$recovery")
bytes=$(awk '{print $6}' <<<"$recovery")
test "$extents" -ge 1
test "$extents" -le 12
test "$bytes" -le $(( extents * 4 * 1024 * 1024 ))
if grep -E 'is stale|resync of' "$tmpdir/c-restart.log"; then
  echo "$0: a leg was resynced after the crash"
  exit 1
fi
nbdrep_status_json "$ctl" >"$tmpdir/status.json"
python3 - "$tmpdir/status.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["volume"]["state"] == "healthy", s["volume"]
for leg in s["legs"]:
    assert leg["state"] == "uptodate", leg
    assert leg["resync"] is None and leg["last_resync"] is None, leg
EOF

# --- Every acknowledged write is there, through the controller and on
# every leg, and the legs are identical.
"$NBDCOPY" --no-extents "$c_uri" "$tmpdir/c.img"
python3 "$writers" check "$tmpdir/c.img" "${#ids[@]}" "$region" "$tmpdir/log"
for i in 0 1 2; do
  uri_var=r${i}_uri
  "$NBDCOPY" --no-extents "${!uri_var}" "$tmpdir/leg$i.img"
  python3 "$writers" check "$tmpdir/leg$i.img" "${#ids[@]}" "$region" \
    "$tmpdir/log"
done
compare_legs "$tmpdir/c.img" "$r0_uri" "$r1_uri" "$r2_uri"
