#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The fault-injection filter of the tests (tests/faultinject.c) tested
# alone, in front of nbdkit's memory plugin (and file, for the exit
# phases), so that a broken filter is found before it fakes a
# replication bug: refuse leaves the data alone and returns its error;
# apply-error applies the write and still fails it; a hold outlives the
# client that disconnected and the write lands when the hold ends; drop
# (and apply-drop) kills the client's connection, not the server; exit
# and apply-exit end the server, torn-exit after applying half a write;
# skip=, count=, op=, range= (from the end too) and fua= select the
# requests; the rules are re-read when the file changes, with fresh
# counters; a bad line is reported in the server log and no rule of
# that file fires.

source ./functions.sh
set -e
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_plugin memory
requires_plugin file
test -f "$FAULTINJECT"

rules=$tmpdir/r0.rules
log=$tmpdir/r0.faults
start_replica 0 --memory 16M -- --filter="$FAULTINJECT" \
  rules="$rules" log="$log"

# nbdsh_ok PYTHON: run PYTHON in nbdsh connected to replica 0.
nbdsh_ok ()
{
  "$NBDSH" -u "$r0_uri" -c "$1"
}

# holds OFFSET BYTE LENGTH: do the LENGTH bytes at OFFSET all equal BYTE?
holds ()
{
  nbdsh_ok "assert h.pread($3, $1) == bytes([$2]) * $3"
}

# fails CMD...: succeed if CMD fails (a plain `! CMD` escapes set -e).
fails ()
{
  if "$@"; then
    echo "$0: unexpectedly succeeded: $*" >&2
    return 1
  fi
}

# conn_dies OFFSET BYTE: a write of 4096 BYTEs at OFFSET must fail and
# leave the connection dead.
conn_dies ()
{
  nbdsh_ok "
try:
    h.pwrite(bytes([$2]) * 4096, $1)
    raise AssertionError('the write succeeded')
except nbd.Error as e:
    print('write failed as expected: %s' % e)
try:
    h.pread(512, 0)
    raise AssertionError('the connection survived')
except nbd.Error as e:
    print('connection dead as expected: %s' % e)
"
}

# fires ID: the number of "fire ID" lines in the log.
fires ()
{
  grep -c "^fire $1 " "$log" || true
}

# --- No rules file: everything passes.
nbdsh_ok "h.pwrite(bytes([9]) * 4096, 0); h.flush()"
holds 0 9 4096

# --- refuse: nothing applied, the error returned; count=1 by default.
fault_arm "$rules" "id=ref op=write phase=refuse error=ENOSPC"
expect_error "$r0_uri" ENOSPC "h.pwrite(bytes([1]) * 4096, 0)"
holds 0 9 4096
fault_wait "$log" ref fire 5
grep -qx "fire ref refuse write 0 4096" "$log"
nbdsh_ok "h.pwrite(bytes([1]) * 4096, 0)"
holds 0 1 4096

# --- apply-error: the data is written, the client gets the error.
fault_arm "$rules" "id=ae op=write phase=apply-error"
expect_error "$r0_uri" EIO "h.pwrite(bytes([3]) * 4096, 8192)"
holds 8192 3 4096
grep -qx "done ae apply-error write 8192 4096" "$log"

# --- hold: the client disconnects after 0.5 s; the write lands ~3 s
# after it was sent, and the done line appears then.
fault_arm "$rules" "id=hold op=write phase=hold secs=3"
start=$(now_us)
nbdsh_ok "
import os, time
h.aio_pwrite(bytes([4]) * 4096, 16384)
time.sleep(0.5)
os._exit(0)
"
fault_wait "$log" hold fire 5
holds 16384 0 4096
fails _fault_logged "$log" done hold
fault_wait "$log" hold done 10
test $(( $(now_us) - start )) -ge 2500000
holds 16384 4 4096

# --- drop: the connection dies, nothing is applied, the server serves.
fault_arm "$rules" "id=drop op=write phase=drop"
conn_dies 20480 5
holds 20480 0 4096
nbdsh_ok "h.pwrite(bytes([5]) * 4096, 20480)"
holds 20480 5 4096

# --- apply-drop: applied, then the connection dies.
fault_arm "$rules" "id=adrop op=write phase=apply-drop"
conn_dies 24576 6
holds 24576 6 4096
grep -qx "done adrop apply-drop write 24576 4096" "$log"

# --- skip=2 count=2: writes 3 and 4 of five fail.
fault_arm "$rules" "id=sc op=write skip=2 count=2 phase=refuse"
nbdsh_ok "
results = []
for i in range(5):
    try:
        h.pwrite(bytes([7]) * 512, 32768 + 512 * i)
        results.append('ok')
    except nbd.Error:
        results.append('fail')
assert results == ['ok', 'ok', 'fail', 'fail', 'ok'], results
"
test "$(fires sc)" -eq 2

# --- op=, range= from the end (the last 1 MiB of 16 MiB), count=0.
fault_arm "$rules" "id=tail op=write,zero range=-1M- count=0 phase=refuse"
nbdsh_ok "
M = 1024 * 1024
def fails(f):
    try:
        f()
    except nbd.Error:
        return True
    return False
assert not fails(lambda: h.pwrite(bytes(4096), 15 * M - 4096))
assert fails(lambda: h.pwrite(bytes(4096), 15 * M - 2048))
assert fails(lambda: h.pwrite(bytes(4096), 16 * M - 4096))
assert fails(lambda: h.zero(4096, 15 * M))
assert not fails(lambda: h.zero(4096, 14 * M))
assert not fails(lambda: h.pread(4096, 15 * M))
assert not fails(lambda: h.trim(4096, 15 * M))
assert not fails(lambda: h.flush())
"
test "$(fires tail)" -eq 3

# --- fua=yes only FUA writes; op=flush whatever the range.
fault_arm "$rules" "id=fua op=write fua=yes count=0 phase=refuse" \
  "id=fl op=flush range=0-1 phase=refuse error=EPERM"
nbdsh_ok "h.pwrite(bytes(512), 0)"
expect_error "$r0_uri" EIO "h.pwrite(bytes(512), 0, nbd.CMD_FLAG_FUA)"
expect_error "$r0_uri" EPERM "h.flush()"
nbdsh_ok "h.flush()"

# --- Reload: a new file replaces the rules; the same file again starts
# the counters afresh; an empty file means no rules.
fault_arm "$rules" "id=rd op=read phase=refuse"
nbdsh_ok "h.pwrite(bytes(512), 0)"
expect_error "$r0_uri" EIO "h.pread(512, 0)"
nbdsh_ok "h.pread(512, 0)"
fault_arm "$rules" "id=rd op=read phase=refuse"
expect_error "$r0_uri" EIO "h.pread(512, 0)"
test "$(fires rd)" -eq 2
fault_arm "$rules" "id=rd op=read count=0 phase=refuse"
fault_clear "$rules"
nbdsh_ok "h.pread(512, 0)"
test "$(fires rd)" -eq 2

# --- A bad line: an error naming the line and the word in the server
# log, and no rule of that file fires.
fault_arm "$rules" "id=good op=write count=0 phase=refuse" \
  "id=bad op=write phase=explode"
nbdsh_ok "h.pwrite(bytes(512), 0); h.pread(512, 0)"
grep -q "r0.rules line 2: word 'phase=explode'" "$tmpdir/r0.log"
test "$(fires good)" -eq 0
fault_arm "$rules" "id=good op=write count=0 phase=refuse"
expect_error "$r0_uri" EIO "h.pwrite(bytes(512), 0)"

# --- exit: the server dies before applying; apply-exit after.
rules1=$tmpdir/r1.rules
log1=$tmpdir/r1.faults
start_replica 1 --file 16M -- --filter="$FAULTINJECT" \
  rules="$rules1" log="$log1"

# r1_gone: has replica 1 exited?
r1_gone ()
{
  ! _pid_alive "$(server_pid r1)"
}

fault_arm "$rules1" "id=ex op=write phase=exit"
fails "$NBDSH" -u "$r1_uri" -c "h.pwrite(bytes([8]) * 4096, 0)"
wait_until 10 r1_gone
fault_wait "$log1" ex
fault_arm "$rules1" "id=aex op=write phase=apply-exit"
restart_replica 1
"$NBDSH" -u "$r1_uri" -c "assert h.pread(4096, 0) == bytes(4096)"
fails "$NBDSH" -u "$r1_uri" -c "h.pwrite(bytes([8]) * 4096, 0)"
wait_until 10 r1_gone
fault_wait "$log1" aex done
fault_clear "$rules1"
restart_replica 1
"$NBDSH" -u "$r1_uri" -c "assert h.pread(4096, 0) == bytes([8]) * 4096"

# --- torn-exit: the first half of the write (rounded down to 4 KiB)
# lands, the server ends.
fault_arm "$rules1" "id=tex op=write phase=torn-exit"
restart_replica 1
fails "$NBDSH" -u "$r1_uri" -c "h.pwrite(bytes([6]) * 20480, 0)"
wait_until 10 r1_gone
fault_wait "$log1" tex done
grep '^done tex torn-exit write 0 8192$' "$log1"
fault_clear "$rules1"
restart_replica 1
"$NBDSH" -u "$r1_uri" -c "
assert h.pread(8192, 0) == bytes([6]) * 8192
assert h.pread(4096, 8192) == bytes(4096)"
