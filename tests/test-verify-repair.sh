#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep verify against live controllers (DESIGN.md section 8,
# nbdrep(1) verify).  Replica files are corrupted behind the
# controller's back (dd conv=notrunc into the .img a running replica
# serves) and verify must find exactly that, in 4 KiB blocks.
#
# Three 64 MiB file legs:
#  - 8 KiB at a 4 KiB-aligned offset and 6000 bytes at an unaligned one
#    are overwritten on leg 2: `verify --wait` exits 3 and lists exactly
#    the two ranges covering them (8192 and 12288 bytes) with legs [2];
#    `verify --repair --wait` repairs them (exit 0, 20480 bytes
#    mismatched and repaired) through the write path: the activity log
#    is written again and every leg gets the five 4 KiB writes; a second
#    verify is clean (exit 0, nothing mismatched); the oracle holds.
#  - zero against unmapped: written zeroes on leg 1 where the others
#    hold a hole are no mismatch; non-zero data on leg 0 in a hole of
#    the others is one (legs [0]) and is repaired to zeroes.
#  - a tie (one block different on all three legs): --repair reports it
#    with legs [0,1,2] and repairs nothing (exit 3); --repair-from=0
#    repairs it (legs [1,2]).
#  - verify while fio writes (randwrite with crc32c verify): no false
#    mismatch (each run is read under its chunk lock), the verify ends,
#    fio finds all its data, the legs are equal.
# Two 256 MiB file legs:
#  - one block corrupted on leg 1: `verify --repair` is refused (no
#    majority) with a message, a check lists legs [0,1], and
#    --repair-from=0 repairs it (legs [1]); --repair-from of a leg that
#    is not uptodate is refused; with leg 1 failed, verify is refused
#    (fewer than two uptodate legs).
#  - verify --rate=16M (256 MiB: about 16 s), waited for with --wait on
#    a pseudo-terminal (script): still running after 8 s, having done
#    no more than the rate allows; `verify --stop` stops it (state
#    stopped), the waiting nbdrep exits 1 after drawing its progress
#    bar; --stop with nothing running is refused; a second verify is
#    refused while one runs, and changes nothing (not the rate).
#  - a slow verify (128 KiB/s: 8 s a 1 MiB run) speeds up at once on
#    `nbdrep set verify-rate 0`, and stops at once on --stop.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires fio --enghelp=nbd
requires script --version
requires python3 -c 'import json'

KiB=1024
MiB=1048576

# corrupt FILE OFFSET LENGTH: overwrite LENGTH bytes of FILE at OFFSET
# with random bytes, behind the controller's back.
corrupt ()
{
  head -c "$3" /dev/urandom >"$tmpdir/junk"
  dd if="$tmpdir/junk" of="$1" bs=4096 seek="$2" oflag=seek_bytes \
    conv=notrunc status=none
}

# run_verify CTL ARGS...: run `nbdrep verify CTL --wait ARGS...` into
# $tmpdir/verify and print its exit status.
run_verify ()
{
  local ctl=$1 rc=0
  shift
  "$NBDREP" verify "$ctl" --wait "$@" >"$tmpdir/verify" || rc=$?
  cat "$tmpdir/verify" >&2
  echo "$rc"
}

# verify_is CTL EXPR: the Python expression EXPR holds for v, the last
# verify in the status of CTL (its mismatches as (offset, length,
# legs) tuples in m).
verify_is ()
{
  status_check "$1" "(lambda v, m: $2)(s['volume']['verify'],
    [(x['offset'], x['length'], x['legs'])
     for x in s['volume']['verify']['mismatches']])"
}

# === Three legs.
ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" 64M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5 verify-rate=0
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 24 * MiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 32 * MiB )) $(( 8 * MiB ))
# [48M, end) stays a hole on every leg.

# A clean volume verifies clean.
test "$(run_verify "$ctl")" -eq 0
verify_is "$ctl" "v['state'] == 'done' and v['repair'] is False and
  v['done'] == v['total'] == s['volume']['size'] and
  v['mismatched_bytes'] == 0 and m == [] and v['error'] is None"

# --- Corrupt leg 2 at two known places.
a=$(( 1 * MiB + 8 * KiB ))           # 8 KiB, aligned: one 8 KiB range
b=$(( 36 * MiB + 3000 ))             # 6000 bytes: blocks 36M..36M+12K
corrupt "$tmpdir/r2.img" "$a" $(( 8 * KiB ))
corrupt "$tmpdir/r2.img" "$b" 6000
b_block=$(( 36 * MiB ))

test "$(run_verify "$ctl")" -eq 3
grep -Eq '^OFFSET +LENGTH +LEGS$' "$tmpdir/verify"
grep -Eq "^$a +8192 +2$" "$tmpdir/verify"
grep -Eq "^$b_block +12288 +2$" "$tmpdir/verify"
test "$(grep -Ec '^[0-9]+ +[0-9]+ +[0-9,]+$' "$tmpdir/verify")" -eq 2
grep -Eq '^verify done: .* 20\.0 KiB mismatched, 0 B repaired$' "$tmpdir/verify"
verify_is "$ctl" "v['state'] == 'done' and v['repair'] is False and
  m == [($a, 8192, [2]), ($b_block, 12288, [2])] and
  v['mismatched_bytes'] == 20480 and v['repaired_bytes'] == 0"
# A check changes nothing.
test "$(run_verify "$ctl")" -eq 3

# --- Repair from the majority, through the write path.
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"
al_writes=$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["writes"]')
for i in 0 1 2; do
  declare "writes$i=$(nbdrep_status_get "$ctl" "s['legs'][$i]['writes']")"
  declare "bytes$i=$(nbdrep_status_get "$ctl" "s['legs'][$i]['bytes_written']")"
done
test "$(run_verify "$ctl" --repair)" -eq 0
grep -Eq "^$a +8192 +2$" "$tmpdir/verify"
grep -Eq "^$b_block +12288 +2$" "$tmpdir/verify"
grep -Eq '^verify done: .* 20\.0 KiB mismatched, 20\.0 KiB repaired$' \
  "$tmpdir/verify"
verify_is "$ctl" "v['state'] == 'done' and v['repair'] is True and
  m == [($a, 8192, [2]), ($b_block, 12288, [2])] and
  v['mismatched_bytes'] == 20480 and v['repaired_bytes'] == 20480"
status_check "$ctl" "s['volume']['activity_log']['writes'] > $al_writes and
  s['volume']['state'] == 'healthy' and
  all(leg(i)['errors'] == 0 for i in range(3))"
# Every leg took the five 4 KiB block writes (plus activity-log writes).
status_check "$ctl" "leg(0)['writes'] >= $writes0 + 5 and
  leg(1)['writes'] >= $writes1 + 5 and leg(2)['writes'] >= $writes2 + 5 and
  leg(0)['bytes_written'] >= $bytes0 + 20480 and
  leg(2)['bytes_written'] - $bytes2 == leg(0)['bytes_written'] - $bytes0"
test "$(run_verify "$ctl")" -eq 0
verify_is "$ctl" "v['state'] == 'done' and v['mismatched_bytes'] == 0 and
  m == []"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- Zero against unmapped.  [50M, 51M) is a hole on every leg; leg 1
# gets written (allocated) zeroes there: no mismatch.  [54M+4K, 54M+8K)
# gets data on leg 0: a mismatch against the others' hole.
du1=$(du -B1 "$tmpdir/r1.img" | cut -f1)
dd if=/dev/zero of="$tmpdir/r1.img" bs=64K seek=$(( 50 * MiB )) \
  count=$(( 1 * MiB )) oflag=seek_bytes iflag=count_bytes conv=notrunc \
  status=none
sync "$tmpdir/r1.img"
test "$(du -B1 "$tmpdir/r1.img" | cut -f1)" -ge $(( du1 + MiB ))
z=$(( 54 * MiB + 4 * KiB ))
corrupt "$tmpdir/r0.img" "$z" $(( 4 * KiB ))
test "$(run_verify "$ctl")" -eq 3
verify_is "$ctl" "m == [($z, 4096, [0])] and v['mismatched_bytes'] == 4096"
test "$(run_verify "$ctl" --repair)" -eq 0
verify_is "$ctl" "m == [($z, 4096, [0])] and v['repaired_bytes'] == 4096"
test "$(run_verify "$ctl")" -eq 0
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- A tie: one block differs on every leg.
t=$(( 10 * MiB + 64 * KiB ))
corrupt "$tmpdir/r1.img" "$t" $(( 4 * KiB ))
corrupt "$tmpdir/r2.img" "$t" $(( 4 * KiB ))
test "$(run_verify "$ctl" --repair)" -eq 3
grep -Eq "^$t +4096 +0,1,2$" "$tmpdir/verify"
verify_is "$ctl" "m == [($t, 4096, [0, 1, 2])] and
  v['mismatched_bytes'] == 4096 and v['repaired_bytes'] == 0"
test "$(run_verify "$ctl" --repair-from=0)" -eq 0
verify_is "$ctl" "v['repair'] is True and m == [($t, 4096, [1, 2])] and
  v['repaired_bytes'] == 4096"
test "$(run_verify "$ctl")" -eq 0
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"

# --- Verify while fio writes: no false mismatch.
fio_args=(--name=verifyload --ioengine=nbd "--uri=$c_uri" --rw=randwrite
          --bsrange=4k-64k --size=4M --offset_increment=16M --numjobs=2
          --verify=crc32c --verify_state_save=0 --output-format=json)
w0=$(nbdrep_status_get "$ctl" 's["legs"][0]["writes"]')
fio "${fio_args[@]}" --do_verify=1 --rate=,1m --output="$tmpdir/fio.json" &
fio_pid=$!
wait_until 20 status_check "$ctl" "leg(0)['writes'] > $w0 + 50"
w1=$(nbdrep_status_get "$ctl" 's["legs"][0]["writes"]')
test "$(run_verify "$ctl" --rate=32M)" -eq 0
verify_is "$ctl" "v['state'] == 'done' and v['mismatched_bytes'] == 0 and
  v['done'] == v['total']"
# fio wrote while the verify ran (about 2 s at 2 MiB/s of 4k-64k).
status_check "$ctl" "leg(0)['writes'] >= $w1 + 50"
fio_rc=0
wait "$fio_pid" || fio_rc=$?
cat "$tmpdir/fio.json"
test "$fio_rc" -eq 0
python3 -c '
import json, sys
for job in json.load(open(sys.argv[1]))["jobs"]:
    assert job["error"] == 0, job["error"]
    assert job["write"]["io_bytes"] == 4 << 20, job["write"]
    assert job["read"]["io_bytes"] == 4 << 20, job["read"]
' "$tmpdir/fio.json"
"$NBDCOPY" --no-extents "$c_uri" "$tmpdir/disk.img"
compare_legs "$tmpdir/disk.img" "$r0_uri" "$r1_uri" "$r2_uri"

# === Two legs: no majority.
ctl2=$tmpdir/d.ctl
start_replica 3 256M
start_replica 4 256M
start_controller d "$PLUGIN" "$r3_uri" "$r4_uri" control="$ctl2" timeout=5
wait_volume_state 30 "$ctl2" healthy
new_expected "$tmpdir/expected2" "$d_uri"
write_random "$d_uri" "$tmpdir/expected2" 0 $(( 8 * MiB ))
c2=$(( 2 * MiB + 4 * KiB ))
corrupt "$tmpdir/r4.img" "$c2" $(( 4 * KiB ))

msg='^nbdrep: verify: with two legs there is no majority to repair from: name the leg to repair from$'
expect_refusal 1 "$msg" verify "$ctl2" --repair
expect_refusal 1 "$msg" verify "$ctl2" --repair --wait
expect_refusal 1 '^nbdrep: verify: repair-from=5: not an uptodate leg$' \
  verify "$ctl2" --repair-from=5
test "$(run_verify "$ctl2" --rate=0)" -eq 3
verify_is "$ctl2" "m == [($c2, 4096, [0, 1])] and v['repair'] is False"
test "$(run_verify "$ctl2" --repair-from=0)" -eq 0
verify_is "$ctl2" "m == [($c2, 4096, [1])] and v['repaired_bytes'] == 4096"
test "$(run_verify "$ctl2")" -eq 0
compare_legs "$tmpdir/expected2" "$r3_uri" "$r4_uri"
# With one uptodate leg (leg 1 failed; it comes back by itself in a
# second) there is nothing to compare.
"$NBDREP" fail "$ctl2" 1
expect_refusal 1 '^nbdrep: verify: fewer than two uptodate legs: nothing to compare$' \
  verify "$ctl2" --wait
wait_volume_state 30 "$ctl2" healthy

# --- The verify rate: 16 MiB/s over 256 MiB, waited for on a terminal.
expect_refusal 1 '^nbdrep: verify: no verify is running$' verify "$ctl2" --stop
start=$(now_us)
script -qec "$(printf '%q ' "$NBDREP" verify "$ctl2" --rate=16M --wait)" \
  /dev/null >"$tmpdir/tty" </dev/null &
script_pid=$!
wait_until 10 status_check "$ctl2" "s['volume']['verify']['state'] == 'running'
  and s['volume']['verify_rate'] == 16 * $MiB"
sleep 8
nbdrep_status_json "$ctl2" >"$tmpdir/status.json"
elapsed=$(( $(now_us) - start ))
# Still running after 8 s; done at most what 16 MiB/s allows since the
# start (plus the 1 MiB run under way and one more), and some progress.
python3 - "$tmpdir/status.json" "$elapsed" <<'PY'
import json, sys
vf = json.load(open(sys.argv[1]))["volume"]["verify"]
limit = 16 * 2**20 * int(sys.argv[2]) / 1e6 + 2 * 2**20
print("verify: %d of %d bytes done, limit %d" % (vf["done"], vf["total"], limit))
assert vf["state"] == "running", vf
assert 32 * 2**20 <= vf["done"] <= limit, vf
assert vf["done"] < vf["total"], vf
PY
"$NBDREP" verify "$ctl2" --stop
verify_is "$ctl2" "v['state'] == 'stopped' and v['done'] < v['total'] and
  v['mismatched_bytes'] == 0"
script_rc=0
wait "$script_pid" || script_rc=$?
cat -v "$tmpdir/tty"
test "$script_rc" -eq 1
grep -Eq 'verify check +\[[#.]+\] +[0-9]+\.[0-9]%' "$tmpdir/tty"
grep -q $'\033\\[2K' "$tmpdir/tty"
grep -q 'verify stopped: ' "$tmpdir/tty"
grep -q 'the verify did not finish (stopped)' "$tmpdir/tty"

# --- A second verify is refused while one runs, and the refused
# request changes nothing (not the running verify's rate).
"$NBDREP" verify "$ctl2" --rate=16M
expect_refusal 1 '^nbdrep: verify: a verify is already running$' \
  verify "$ctl2" --rate=0
status_check "$ctl2" "s['volume']['verify_rate'] == 16 * $MiB and
  s['volume']['verify']['state'] == 'running'"
sleep 2
status_check "$ctl2" "s['volume']['verify']['state'] == 'running' and
  s['volume']['verify']['done'] <= 96 * $MiB"
"$NBDREP" verify "$ctl2" --stop
verify_is "$ctl2" "v['state'] == 'stopped'"

# --- A slow verify obeys at once: at 128 KiB/s a 1 MiB run is 8 s.
# `set verify-rate 0` speeds it up, and --stop stops it, without
# waiting for the pause of the old rate.
"$NBDREP" verify "$ctl2" --rate=128K
wait_until 10 status_check "$ctl2" "s['volume']['verify']['done'] > 0"
"$NBDREP" set "$ctl2" verify-rate 0
t0=$(now_us)
wait_until 30 status_check "$ctl2" "s['volume']['verify']['state'] == 'done'"
echo "verify after set verify-rate 0: done $(( $(now_us) - t0 )) us later"
test $(( $(now_us) - t0 )) -lt 5000000
"$NBDREP" verify "$ctl2" --rate=128K
wait_until 10 status_check "$ctl2" "s['volume']['verify']['done'] > 0"
t0=$(now_us)
NBDREP_TIMEOUT=30 "$NBDREP" verify "$ctl2" --stop
echo "verify --stop took $(( $(now_us) - t0 )) us"
test $(( $(now_us) - t0 )) -lt 3000000
verify_is "$ctl2" "v['state'] == 'stopped'"
