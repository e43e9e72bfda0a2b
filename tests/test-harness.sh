#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The test harness (functions.sh) tested against stock nbdkit only, so that
# a broken harness is found before it hides or invents a replication bug:
# skipping, cleanup order and exit status, replica start / kill / restart,
# the compare_legs oracle (it must catch one corrupted byte and say where),
# polling timeouts, a controller (here nbdkit's nbd plugin over a replica)
# and the readers of `nbdrep status --json` (here a fake nbdrep).

source ./functions.sh
set -e
set -x

requires_nbdsh
requires_plugin file
requires_plugin memory
requires_plugin nbd
requires_filter error

# Run CHILD-SCRIPT-BODY as a separate test sourcing this functions.sh,
# with stdout and stderr to $tmpdir/child.out; return its exit status.
run_child ()
{
  local rc=0
  printf 'source %q\n%s\n' "$PWD/functions.sh" "$1" >"$tmpdir/child.sh"
  bash "$tmpdir/child.sh" >"$tmpdir/child.out" 2>&1 || rc=$?
  cat "$tmpdir/child.out"
  return "$rc"
}

# --- requires skips with status 77 and says what is missing.
if (requires false) 2>"$tmpdir/requires.err"; then
  echo "requires false did not skip"
  exit 1
else
  rc=$?
fi
test "$rc" -eq 77
grep -q 'test prerequisite is missing or not working: false' \
  "$tmpdir/requires.err"

# --- Cleanups run in reverse order and the test's exit status survives.
rc=0
run_child 'cleanup_fn echo first
cleanup_fn echo second
exit 5' || rc=$?
test "$rc" -eq 5
test "$(cat "$tmpdir/child.out")" = "$(printf 'second\nfirst')"

# --- A server that dies on its own (here: killed behind the harness's
# back) fails an otherwise passing test, and its log is shown.
rc=0
run_child 'start_replica 0 --memory 1M
kill -KILL "$(server_pid r0)"
sleep 0.5
exit 0' || rc=$?
test "$rc" -eq 1
grep -q 'r0 (pid [0-9]*) died during the test with status 137' \
  "$tmpdir/child.out"
grep -q 'last 200 lines of .*/r0.log' "$tmpdir/child.out"

# --- KEEP_TMPDIR=1 keeps the child's directory and says where it is.
rc=0
KEEP_TMPDIR=1 run_child 'touch "$tmpdir/marker"' || rc=$?
test "$rc" -eq 0
kept=$(sed -n 's/.*test files kept in //p' "$tmpdir/child.out")
test -f "$kept/marker"
rm -rf "$kept"

# --- Two file replicas; write to r0, copy r0 to r1, both hold the data.
start_replica 0
start_replica 1
test -n "$r0_uri"
test "$r1_uri" = "nbd+unix:///?socket=$tmpdir/r1.sock"

head -c 1M /dev/urandom >"$tmpdir/data"
truncate -s 64M "$tmpdir/expected"
dd if="$tmpdir/data" of="$tmpdir/expected" bs=1M seek=3 conv=notrunc
nbdsh -u "$r0_uri" -c "
h.pwrite(open('$tmpdir/data', 'rb').read(), 3 * 1024 * 1024)
h.flush()
"
nbdcopy "$r0_uri" "$r1_uri"
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri"
compare_legs_equal 64M "$r0_uri" "$r1_uri"

# --- kill -9 r1: it is gone; restarted, its file still holds the data.
old_pid=$(server_pid r1)
kill_replica 1
if kill -0 "$old_pid" 2>/dev/null; then
  echo "replica 1 (pid $old_pid) survived kill_replica"
  exit 1
fi
if nbdsh -u "$r1_uri" -c 'pass'; then
  echo "replica 1 still answers after kill_replica"
  exit 1
fi
restart_replica 1
test "$(server_pid r1)" != "$old_pid"
compare_legs "$tmpdir/expected" "$r1_uri"

# --- One corrupted byte in r1's file: compare_legs fails, names r1 (only)
# and the offset.
offset=$(( 3 * 1024 * 1024 + 12345 ))
byte=$(od -An -tu1 -j "$offset" -N1 "$tmpdir/r1.img" | tr -d ' ')
printf "\\$(printf %03o $(( (byte + 1) % 256 )))" |
  dd of="$tmpdir/r1.img" bs=1 seek="$offset" conv=notrunc
if out=$(compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" 2>&1); then
  echo "compare_legs missed the corrupted byte: $out"
  exit 1
fi
echo "$out"
grep -q "r1.sock differs from .*expected: first difference at offset $offset " \
  <<<"$out"
if grep -q 'r0.sock differs' <<<"$out"; then
  echo "compare_legs blamed the intact leg r0"
  exit 1
fi
if out=$(compare_legs_equal 64M "$r0_uri" "$r1_uri" 2>&1); then
  echo "compare_legs_equal missed the corrupted byte: $out"
  exit 1
fi
grep -q "first difference at offset $offset " <<<"$out"
# Only the data area counts: a difference past SIZE is ignored.
compare_legs_equal "$offset" "$r0_uri" "$r1_uri"

# --- A memory replica with a filter: reads fail, and so does compare_legs.
start_replica 2 --memory 1M -- --filter=error error-pread-rate=100%
if nbdsh -u "$r2_uri" -c 'h.pread(512, 0)'; then
  echo "the error filter did not reach replica 2"
  exit 1
fi
truncate -s 1M "$tmpdir/zero"
if compare_legs "$tmpdir/zero" "$r2_uri"; then
  echo "compare_legs passed an unreadable leg"
  exit 1
fi
# stop_replica: SIGTERM, exits with status 0; restarted with the same args.
stop_replica 2
restart_replica 2
if nbdsh -u "$r2_uri" -c 'h.pread(512, 0)'; then
  echo "replica 2 was not restarted with its filter"
  exit 1
fi

# --- stop_replica while a client stays connected, as a controller does:
# stock nbdkit waits for it after SIGTERM, so after 3 s the replica is
# killed, and that does not fail the test.
start_replica 3 --memory 1M
nbdsh -u "$r3_uri" -c 'import time; time.sleep(30)' &
client_pid=$!
wait_until 10 grep -q 'accepted connection' "$tmpdir/r3.log"
start=${EPOCHREALTIME/./}
stop_replica 3
elapsed=$(( ${EPOCHREALTIME/./} - start ))
test "$elapsed" -ge 3000000
test "$elapsed" -lt 10000000
kill "$client_pid"
wait "$client_pid" || :

# --- A controller (stock nbdkit nbd plugin in front of r0): NAME_uri, and
# under NBDKIT_VALGRIND=1 valgrind; a restart serves the same data.
start_controller c nbd uri="$r0_uri"
compare_legs "$tmpdir/expected" "$c_uri"
restart_controller c
compare_legs "$tmpdir/expected" "$c_uri"
if [ "${NBDKIT_VALGRIND:-0}" = 1 ]; then
  ls "$tmpdir"/vg.*.log
fi

# --- wait_until: succeeds once the command does; times out after SECS.
( sleep 0.5; touch "$tmpdir/flag" ) &
wait_until 10 test -e "$tmpdir/flag"
wait_for test -e "$tmpdir/flag"
start=${EPOCHREALTIME/./}
if wait_until 1 false; then
  echo "wait_until 1 false succeeded"
  exit 1
fi
elapsed=$(( ${EPOCHREALTIME/./} - start ))
test "$elapsed" -ge 1000000
test "$elapsed" -lt 5000000

# --- Status readers, against a fake nbdrep printing $tmpdir/status.json
# and exiting with the code in $tmpdir/status.rc.
cat >"$tmpdir/fake-nbdrep" <<EOF
#!/bin/sh
test "\$1 \$2" = "status --json" || exit 2
cat "$tmpdir/status.json"
exit "\$(cat "$tmpdir/status.rc")"
EOF
chmod +x "$tmpdir/fake-nbdrep"
NBDREP=$tmpdir/fake-nbdrep
cat >"$tmpdir/status.json" <<'EOF'
{"volume": {"uuid": "u", "size": 1048576, "state": "degraded",
            "generation": 7, "quorum": 1},
 "legs": [{"index": 1, "uri": "nbd://b", "state": "syncing"},
          {"index": 0, "uri": "nbd://a", "state": "uptodate"}]}
EOF
echo 3 >"$tmpdir/status.rc"
test "$(volume_state ctl)" = degraded
test "$(leg_state ctl 0)" = uptodate
test "$(leg_state ctl 1)" = syncing
test "$(nbdrep_status_get ctl 's["volume"]["generation"]')" = 7
wait_leg_state 2 ctl 0 uptodate
if wait_leg_state 1 ctl 1 uptodate; then
  echo "wait_leg_state did not time out"
  exit 1
fi
( sleep 0.5; sed -i 's/syncing/uptodate/; s/degraded/healthy/' \
    "$tmpdir/status.json"; echo 0 >"$tmpdir/status.rc" ) &
wait_leg_state 10 ctl 1 uptodate
wait_volume_state 10 ctl healthy
echo 1 >"$tmpdir/status.rc"
if nbdrep_status_json ctl; then
  echo "nbdrep_status_json accepted exit code 1"
  exit 1
fi
