#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep's command line without a real controller: --help and --version,
# usage errors (exit 2 with a hint, nothing sent), a missing socket
# (exit 1 with "no controller at CTL: No such file or directory"), and,
# against a fake controller written in Python, the other client errors
# (connection refused, timeout, unparsable reply, "ok": false) and the
# exact requests every subcommand sends (nbdrep(1), CONTROL PROTOCOL).

set -euo pipefail
source ./functions.sh
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires python3 -c 'import json, socket'

subcommands=(status watch add remove fail resync set verify metrics inspect)
ctl=$tmpdir/missing.ctl

# expect STATUS PATTERN CMD...: run nbdrep CMD..., which must exit with
# STATUS and print a line matching the grep PATTERN on stderr.
expect ()
{
  local status=$1 pattern=$2 rc=0
  shift 2
  "$NBDREP" "$@" >"$tmpdir/out" 2>"$tmpdir/err" || rc=$?
  cat "$tmpdir/err"
  if [ "$rc" -ne "$status" ]; then
    echo "$0: nbdrep $*: exit status $rc, expected $status" >&2
    return 1
  fi
  if ! grep -q -- "$pattern" "$tmpdir/err"; then
    echo "$0: nbdrep $*: stderr does not match: $pattern" >&2
    return 1
  fi
}

# expect_usage CMD...: a usage error: exit 2, a line saying what is
# wrong and the --help hint.
expect_usage ()
{
  expect 2 "^Try 'nbdrep.* --help' for more information\.$" "$@"
  test "$(wc -l <"$tmpdir/err")" -eq 2
}

# --- --help and --version.
"$NBDREP" --help >"$tmpdir/out"
grep -q '^Usage: nbdrep ' "$tmpdir/out"
for c in "${subcommands[@]}"; do
  grep -q "^  nbdrep $c " "$tmpdir/out"
done
for c in "${subcommands[@]}"; do
  "$NBDREP" "$c" --help >"$tmpdir/help"
  grep -q "^Usage: nbdrep $c " "$tmpdir/help"
  grep -q -- '--help' "$tmpdir/help"
  # --help wins wherever it is, even with bad operands.
  "$NBDREP" "$c" bogus --help >/dev/null
done
"$NBDREP" --version | grep -qx 'nbdrep [0-9][0-9.]*'

# --- Usage errors: exit 2 before anything is sent.
expect_usage
expect_usage bogus-subcommand
expect_usage --bogus-option
for c in "${subcommands[@]}"; do
  expect_usage "$c"
  expect_usage "$c" --bogus-option "$ctl"
done
expect_usage status "$ctl" extra
expect_usage add "$ctl"
expect_usage remove "$ctl" abc
expect_usage remove "$ctl" -1
expect_usage fail "$ctl" 1x
expect_usage resync "$ctl"
expect_usage set "$ctl" resync-rate
expect_usage set "$ctl" bogus-key 1M
expect_usage set "$ctl" resync-rate 12Q
expect_usage verify "$ctl" --rate=fast
expect_usage verify "$ctl" --repair-from=x
expect_usage verify "$ctl" --stop --repair
expect_usage watch "$ctl" --interval=0
expect_usage watch "$ctl" --interval=soon
expect_usage watch "$ctl" --count=0
expect_usage inspect nbd://a nbd://b

# --- No controller at CTL.
missing="^nbdrep: no controller at $ctl: No such file or directory$"
expect 1 "$missing" status "$ctl"
expect 1 "$missing" status --json "$ctl"
expect 1 "$missing" watch "$ctl" --count=1
expect 1 "$missing" metrics "$ctl"
expect 1 "$missing" add "$ctl" nbd://localhost
expect 1 "$missing" remove "$ctl" 0
expect 1 "$missing" fail "$ctl" 0
expect 1 "$missing" resync "$ctl" 0 --full
expect 1 "$missing" set "$ctl" resync-rate 10M
expect 1 "$missing" verify "$ctl" --wait
expect 1 "$missing" verify "$ctl" --stop

# --- A fake controller: MODE is how it answers every request.
#   record: log each request, answer "ok" (a status that suits --stop and
#           --wait, an index for add-leg); hang: never answer; garbage:
#   not JSON; refuse: "ok": false; stale: bind and close (the socket file
#   stays, nobody listens).
cat >"$tmpdir/fakectl.py" <<'EOF'
import json, os, socket, sys, time
path, mode, log = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path + ".tmp")
s.listen(8)
os.rename(path + ".tmp", path)
if mode == "stale":
    s.close()
    sys.exit(0)
status = {"ok": True,
          "volume": {"state": "healthy", "generation": 1, "uptodate": 1,
                     "legs": 1,
                     "verify": {"state": "done", "repair": True,
                                "done": 4096, "total": 4096,
                                "mismatched_bytes": 8192,
                                "repaired_bytes": 8192,
                                "mismatches": [{"offset": 0, "length": 8192,
                                                "legs": [1]}],
                                "error": None}},
          "legs": []}
while True:
    c, _ = s.accept()
    f = c.makefile("rwb")
    for line in f:
        if mode == "hang":
            time.sleep(3600)
        if mode == "garbage":
            f.write(b"this is not JSON\n")
        elif mode == "refuse":
            f.write(b'{"ok": false, "error": "leg 7 does not exist"}\n')
        else:
            req = json.loads(line)
            with open(log, "a") as l:
                l.write(line.decode())
            reply = status if req.get("cmd") == "status" else \
                {"ok": True, "index": 5}
            f.write(json.dumps(reply).encode() + b"\n")
        f.flush()
    c.close()
EOF

fake_pid=
# start_fake MODE: start the fake controller on $tmpdir/fake.ctl.
start_fake ()
{
  stop_fake
  rm -f "$tmpdir/fake.ctl" "$tmpdir/requests"
  python3 "$tmpdir/fakectl.py" "$tmpdir/fake.ctl" "$1" "$tmpdir/requests" &
  fake_pid=$!
  wait_until 30 test -S "$tmpdir/fake.ctl"
}
# stop_fake: stop the fake controller if it runs.
stop_fake ()
{
  if [ -n "$fake_pid" ]; then
    kill "$fake_pid" 2>/dev/null || :
    wait "$fake_pid" 2>/dev/null || :
    fake_pid=
  fi
}
cleanup_fn stop_fake

fake=$tmpdir/fake.ctl

start_fake stale
expect 1 "^nbdrep: no controller at $fake: Connection refused" status "$fake"

start_fake hang
NBDREP_TIMEOUT=1 expect 1 \
  "^nbdrep: the controller at $fake did not answer within 1 s" \
  status "$fake"

start_fake garbage
expect 1 "^nbdrep: cannot parse the reply of the controller at $fake" \
  metrics "$fake"

start_fake refuse
expect 1 '^nbdrep: fail-leg: leg 7 does not exist$' fail "$fake" 7
expect 1 '^nbdrep: status: leg 7 does not exist$' status "$fake"

# --- The requests every subcommand sends.
start_fake record
test "$("$NBDREP" add "$fake" 'nbd+unix:///?socket=/x.sock')" = 5
"$NBDREP" remove "$fake" 3
"$NBDREP" fail "$fake" 1
"$NBDREP" resync "$fake" 2
"$NBDREP" resync --full "$fake" 2
"$NBDREP" resync "$fake" 2 --server-restarted
"$NBDREP" set "$fake" resync-rate 10M
"$NBDREP" verify "$fake"
"$NBDREP" verify "$fake" --repair-from=1 --rate=1M
"$NBDREP" verify "$fake" --stop
python3 - "$tmpdir/requests" <<'EOF'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
want = [
    {"cmd": "add-leg", "uri": "nbd+unix:///?socket=/x.sock"},
    {"cmd": "remove-leg", "index": 3},
    {"cmd": "fail-leg", "index": 1},
    {"cmd": "resync", "index": 2, "full": False},
    {"cmd": "resync", "index": 2, "full": True},
    {"cmd": "resync", "index": 2, "full": False, "server_restarted": True},
    {"cmd": "set", "key": "resync-rate", "value": "10M"},
    {"cmd": "verify", "action": "start", "repair": False,
     "repair_from": None, "rate": None},
    {"cmd": "verify", "action": "start", "repair": True,
     "repair_from": 1, "rate": 1048576},
    {"cmd": "verify", "action": "stop"},
    {"cmd": "status"},   # --stop waits until the verify is not running
]
for i, (g, w) in enumerate(zip(got, want)):
    assert g == w, "request %d: got %r, want %r" % (i, g, w)
assert len(got) == len(want), "%d requests, want %d" % (len(got), len(want))
EOF

# verify --wait prints the ranges and the totals; everything was repaired.
"$NBDREP" verify "$fake" --repair --wait >"$tmpdir/out"
cat "$tmpdir/out"
grep -Eq '^0 +8192 +1$' "$tmpdir/out"
grep -q '^verify done: .* 8.0 KiB mismatched, 8.0 KiB repaired$' "$tmpdir/out"
