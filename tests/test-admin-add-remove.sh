#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Online leg changes under load (DESIGN.md sections 7 and 9, nbdrep(1)
# add and remove).  fio (nbd engine, two jobs of random 4k..64k writes,
# 32 MiB each at 3.5 MiB/s, about 9 s, then a crc32c verify pass) runs
# against a two-leg controller of 256 MiB file legs with
# read=round-robin.  While it writes:
#
#  - `nbdrep add` of a third, blank and sparse 256 MiB file prints its
#    index 2; the leg syncs fully (seen by `nbdrep watch` as plain
#    "leg 2 resync full" lines, and on a terminal, tmux, as a header
#    and one bar redrawn in place, then "idle"), then is uptodate:
#    last_resync.kind is full and its bytes copied plus zeroed are
#    exactly the volume size, while the leg's file stays sparse (its
#    allocated size is about the data written, far below 256 MiB); it
#    then serves reads (its reads counter grows under round-robin);
#  - `nbdrep remove CTL 0`: leg 0 is removed and gets no more writes,
#    the volume stays healthy with legs 1 and 2, and `nbdrep inspect`
#    of legs 1 and 2 shows leg 0's slot free and a higher generation
#    than before the removal.
#
# fio finishes without an error and verifies all it wrote; legs 1 and 2
# hold what the controller serves.  Errors: add of a URI that names a
# leg already there (exit 1); add of a leg of another volume (refused by
# its UUID, not written to); remove of a removed leg, of an
# out-of-range index (exit 1: the controller refuses it, nbdrep(1) EXIT
# STATUS) and of the last uptodate leg (exit 1); a failed leg may be
# removed; the removed leg 0 added back joins as a new member (index 3,
# full resync); add of an unreachable URI (exit 1, a message naming it,
# no new leg); add to a volume with no free metadata slot (max-legs=2):
# refused at once, no new leg.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires fio --enghelp=nbd
requires python3 -c 'import json'
requires du --version
requires tmux -V

MiB=1048576
ctl=$tmpdir/c.ctl
start_replica 0 256M
start_replica 1 256M
# resync-rate=1M: the new leg syncs the data written so far (sparse
# regions cost nothing) slowly enough to be watched; resync-min-rate=0:
# under fio's load it runs at resync-rate, not at the default floor.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
  read=round-robin timeout=5 resync-rate=1M resync-min-rate=0
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
test "$size" -ge $(( 64 * MiB ))

# --- Errors of add before the load: nothing changes.  A URI naming
# leg 1 again; a leg of another volume (made by a controller of its
# own, then stopped): refused by its volume UUID and never written to.
expect_refusal 1 "^nbdrep: add-leg: leg 1 (.*r1\.sock) is the same leg$" \
  add "$ctl" "$r1_uri"
expect_refusal 1 "^nbdrep: add-leg: leg 1 (.*r1\.sock) is the same leg$" \
  add "$ctl" "nbd+unix://?socket=$tmpdir/r1.sock"
start_replica 3 256M
start_controller d "$PLUGIN" "$r3_uri" control="$tmpdir/d.ctl"
wait_volume_state 30 "$tmpdir/d.ctl" healthy
other=$(nbdrep_status_get "$tmpdir/d.ctl" 's["volume"]["uuid"]')
stop_controller d
uuid=$(nbdrep_status_get "$ctl" 's["volume"]["uuid"]')
sum3=$(md5sum <"$tmpdir/r3.img")
expect_refusal 1 "^nbdrep: add-leg: .*r3\.sock: belongs to another volume ($other, this is $uuid): never written to$" \
  add "$ctl" "$r3_uri"
test "$(md5sum <"$tmpdir/r3.img")" = "$sum3"
status_check "$ctl" "s['volume']['legs'] == 2 and len(s['legs']) == 2 and
  s['volume']['state'] == 'healthy'"

# The third leg: blank, sparse.
start_replica 2 256M
test "$(du -B1 "$tmpdir/r2.img" | cut -f1)" -eq 0

# Each job writes [i * 32M, (i + 1) * 32M) once, in random order, then
# reads it all back and checks every block.
fio_args=(--name=addremove --ioengine=nbd "--uri=$c_uri" --rw=randwrite
          --bsrange=4k-64k --size=32M --offset_increment=32M --numjobs=2
          --verify=crc32c --verify_state_save=0 --output-format=json)

# check_fio JSON: both jobs finished without error, wrote 32 MiB each
# and read 32 MiB each to verify it.
check_fio ()
{
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["jobs"]) == 2, j["jobs"]
for job in j["jobs"]:
    print("fio job: error %d, wrote %d, verified %d"
          % (job["error"], job["write"]["io_bytes"], job["read"]["io_bytes"]))
    assert job["error"] == 0, job["error"]
    assert job["write"]["io_bytes"] == 32 << 20, job["write"]["io_bytes"]
    assert job["read"]["io_bytes"] == 32 << 20, job["read"]["io_bytes"]
' "$1"
}

# screen: print what the tmux terminal shows (non-empty lines).
screen ()
{
  tmux -S "$tmpdir/tmux.sock" capture-pane -p | grep -v '^ *$'
}

# screen_has REGEXP: does a line of the tmux terminal match REGEXP?
screen_has ()
{
  screen | grep -Eq "$1"
}

# stop_fio: kill fio if it still runs (the test failed half-way).
stop_fio ()
{
  local pid
  for pid in $(jobs -p); do
    [ "$pid" != "$fio_pid" ] || kill "$pid"
  done
}

fio "${fio_args[@]}" --do_verify=1 --rate=,3500k \
  --output="$tmpdir/fio.json" &
fio_pid=$!
fio_start=$(now_us)
cleanup_fn stop_fio

# --- Add leg 2 while fio writes.
wait_until 20 status_check "$ctl" "leg(0)['bytes_written'] >= 4 * $MiB"
test "$("$NBDREP" add "$ctl" "$r2_uri")" = 2
status_check "$ctl" "s['volume']['legs'] == 3 and
  leg(2)['state'] in ('stale', 'syncing') and leg(2)['uri'] == '$r2_uri'"
wait_until 10 status_check "$ctl" "leg(2)['state'] == 'syncing' and
  leg(2)['resync'] is not None and leg(2)['resync']['total'] > 0"
status_check "$ctl" "leg(2)['resync']['kind'] == 'full' and
  leg(2)['resync']['total'] == $size and
  leg(2)['resync']['done'] < leg(2)['resync']['total'] and
  s['volume']['state'] == 'degraded'"
# nbdrep watch as plain lines shows the full resync of leg 2.
"$NBDREP" watch "$ctl" --count=2 --interval=0.3 >"$tmpdir/watch"
cat "$tmpdir/watch"
grep -Ecx "leg 2 resync full [0-9]+\.[0-9]% [0-9]+/$size bytes .*/s eta ([0-9]+s|\?)" \
  "$tmpdir/watch" | grep -qx 2
# nbdrep watch on a terminal (tmux, our own server): the screen shows
# the header and one bar for leg 2, redrawn in place.
tmux -S "$tmpdir/tmux.sock" new-session -d -x 150 -y 12 \
  "$(printf '%q ' "$NBDREP" watch "$ctl" --interval=0.2)"
cleanup_fn tmux -S "$tmpdir/tmux.sock" kill-server
wait_until 10 screen_has 'leg 2 resync full +\[[#.]+\] +[0-9]+\.[0-9]%'
sleep 1                         # a few redraws
screen >"$tmpdir/screen"
cat "$tmpdir/screen"
grep -Eqx 'volume degraded  generation [0-9]+  2/3 legs uptodate  [0-9:]+' \
  "$tmpdir/screen"
test "$(grep -c 'resync' "$tmpdir/screen")" -eq 1
test "$(grep -c . "$tmpdir/screen")" -eq 2

"$NBDREP" set "$ctl" resync-rate 0
timeout 30 "$NBDREP" watch "$ctl" --until-idle --interval=0.2 \
  >"$tmpdir/until"
test "$(tail -n 1 "$tmpdir/until")" = idle
test "$(leg_state "$ctl" 2)" = uptodate
# The terminal's bar gave way to "idle" in place.
wait_until 10 screen_has '^idle$'
screen >"$tmpdir/screen"
cat "$tmpdir/screen"
grep -Eqx 'volume healthy  generation [0-9]+  3/3 legs uptodate  [0-9:]+' \
  "$tmpdir/screen"
test "$(grep -c . "$tmpdir/screen")" -eq 2
tmux -S "$tmpdir/tmux.sock" kill-server
status_check "$ctl" "s['volume']['state'] == 'healthy' and
  s['volume']['uptodate'] == 3 and leg(2)['slot'] is not None and
  leg(2)['slot'] not in (leg(0)['slot'], leg(1)['slot']) and
  leg(2)['last_resync']['kind'] == 'full' and
  leg(2)['last_resync']['bytes'] + leg(2)['last_resync']['zeroed'] == $size and
  leg(2)['last_resync']['zeroed'] >= $size // 2"
# Sparse: leg 2's file holds about what fio wrote so far (at most the
# 64 MiB fio writes, plus metadata and partial blocks), not 256 MiB.
used2=$(du -B1 "$tmpdir/r2.img" | cut -f1)
used1=$(du -B1 "$tmpdir/r1.img" | cut -f1)
echo "allocated: leg 1 $used1, leg 2 $used2"
test "$used2" -le $(( 80 * MiB ))
test "$used2" -ge $(( 4 * MiB ))
test "$used2" -le $(( used1 + 16 * MiB ))

# Leg 2 serves reads (round-robin spreads them over the three legs).
reads2=$(nbdrep_status_get "$ctl" 'next(l["reads"] for l in s["legs"] if l["index"] == 2)')
"$NBDSH" -u "$c_uri" -c '
for i in range(30):
    h.pread(4096, i * 65536)
'
status_check "$ctl" "leg(2)['reads'] >= $reads2 + 10 and
  leg(2)['state'] == 'uptodate'"

# --- Remove leg 0 while fio still writes.
gen=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
slot0=$(nbdrep_status_get "$ctl" 's["legs"][0]["slot"]')
"$NBDREP" inspect --json "$r1_uri" >"$tmpdir/inspect-before.json"
python3 - "$tmpdir/inspect-before.json" "$slot0" <<'EOF'
import json, sys
ins = json.load(open(sys.argv[1]))
slot = ins["slots"][int(sys.argv[2])]
assert slot["assigned"] and slot["member"], slot
EOF
"$NBDREP" remove "$ctl" 0
kill -0 "$fio_pid"              # fio still writes
written0=$(nbdrep_status_get "$ctl" 's["legs"][0]["writes"]')
status_check "$ctl" "leg(0)['state'] == 'removed' and
  s['volume']['state'] == 'healthy' and s['volume']['uptodate'] == 2 and
  s['volume']['generation'] > $gen and leg(0)['slot'] is None and
  leg(1)['state'] == 'uptodate' and leg(2)['state'] == 'uptodate'"
"$NBDREP" status "$ctl" >"$tmpdir/status"
cat "$tmpdir/status"
grep -Eq '^0 +removed ' "$tmpdir/status"
for uri in "$r1_uri" "$r2_uri"; do
  "$NBDREP" inspect --json "$uri" >"$tmpdir/inspect.json"
  python3 - "$tmpdir/inspect.json" "$slot0" "$gen" <<'EOF'
import json, sys
ins = json.load(open(sys.argv[1]))
slot, gen = int(sys.argv[2]), int(sys.argv[3])
s = ins["slots"][slot]
assert not s["assigned"] and not s["member"], s
assert ins["superblock"]["generation"]["counter"] > gen, ins["superblock"]
members = [x for x in ins["slots"] if x["member"]]
assert len(members) == 2, members
assert ins["out_of_sync"] == [], ins["out_of_sync"]
EOF
done

fio_rc=0
wait "$fio_pid" || fio_rc=$?
cat "$tmpdir/fio.json"
test "$fio_rc" -eq 0
check_fio "$tmpdir/fio.json"
echo "fio ran $(( ($(now_us) - fio_start) / 1000 )) ms"
# The removed leg got no write after its removal.
status_check "$ctl" "leg(0)['writes'] == $written0 and
  s['volume']['state'] == 'healthy'"

# --- The oracle: legs 1 and 2 hold what the controller serves, and fio
# finds all its data again.
"$NBDCOPY" --no-extents "$c_uri" "$tmpdir/disk.img"
compare_legs "$tmpdir/disk.img" "$r1_uri" "$r2_uri"
fio "${fio_args[@]}" --verify_only --output="$tmpdir/fio-verify.json"
check_fio "$tmpdir/fio-verify.json"

# --- Errors of remove.
expect_refusal 1 "^nbdrep: remove-leg: leg 0 cannot be removed: already removed$" \
  remove "$ctl" 0
expect_refusal 1 "^nbdrep: remove-leg: no leg 3 (the volume has 3 legs)$" \
  remove "$ctl" 3
# With leg 2 down, leg 1 is the last uptodate leg.
kill_replica 2
"$NBDSH" -u "$c_uri" -c 'h.pwrite(b"\x11" * 4096, 0); h.flush()'
wait_leg_state 20 "$ctl" 2 failed
expect_refusal 1 "^nbdrep: remove-leg: leg 1 cannot be removed: it is the last uptodate leg$" \
  remove "$ctl" 1
status_check "$ctl" "leg(1)['state'] == 'uptodate' and
  s['volume']['state'] == 'degraded'"
# A failed leg may be removed.
"$NBDREP" remove "$ctl" 2
status_check "$ctl" "leg(2)['state'] == 'removed' and
  leg(1)['state'] == 'uptodate' and s['volume']['uptodate'] == 1"

# --- A removed leg added back joins as a new member (a new index, its
# old metadata ignored): a full resync, then uptodate and equal.
test "$("$NBDREP" add "$ctl" "$r0_uri")" = 3
wait_leg_state 30 "$ctl" 3 uptodate
wait_volume_state 10 "$ctl" healthy
status_check "$ctl" "leg(3)['last_resync']['kind'] == 'full' and
  leg(3)['last_resync']['bytes'] + leg(3)['last_resync']['zeroed'] == $size and
  leg(0)['state'] == 'removed' and leg(3)['slot'] is not None and
  s['volume']['uptodate'] == 2 and s['volume']['legs'] == 4"
compare_legs_equal "$size" "$r1_uri" "$r0_uri"

# --- Add of an unreachable URI: exit 1, a message naming it, no new leg.
expect_refusal 1 "^nbdrep: add-leg: .*nowhere\.sock.*: No such file or directory$" \
  add "$ctl" "nbd+unix:///?socket=$tmpdir/nowhere.sock"
status_check "$ctl" "s['volume']['legs'] == 4 and len(s['legs']) == 4"

# --- Add to a volume whose metadata slots are all taken (max-legs=2):
# the leg can never join, so the add is refused at once (exit 1) and no
# leg is added.
start_replica 4 64M
start_replica 5 64M
start_replica 6 64M
start_controller e "$PLUGIN" "$r4_uri" "$r5_uri" control="$tmpdir/e.ctl" \
  max-legs=2
wait_volume_state 30 "$tmpdir/e.ctl" healthy
expect_refusal 1 '^nbdrep: add-leg: .*max-legs=2' add "$tmpdir/e.ctl" "$r6_uri"
status_check "$tmpdir/e.ctl" "s['volume']['legs'] == 2 and
  s['volume']['state'] == 'healthy'"
