#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep status, fail, set and metrics against a live two-leg controller:
# the table and --json of a healthy volume (exit 0); a leg failed with
# `nbdrep fail` (its replica then stopped, so it stays failed) shows as
# failed and status exits 3; the controller's refusals exit 1 with its
# message; the metrics are valid Prometheus text (checked with promtool
# when it is installed) and carry the states; the leg comes back.

set -euo pipefail
source ./functions.sh
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
start_replica 0
start_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_for test -S "$ctl"
wait_volume_state 60 "$ctl" healthy

# status_rc ARGS...: run nbdrep status ARGS... into $tmpdir/status and
# print its exit status.
status_rc ()
{
  local rc=0
  "$NBDREP" status "$@" >"$tmpdir/status" || rc=$?
  cat "$tmpdir/status" >&2
  echo "$rc"
}

# --- Healthy: the table and the JSON, exit 0.
test "$(status_rc "$ctl")" -eq 0
uuid=$(nbdrep_status_get "$ctl" 's["volume"]["uuid"]')
grep -Eq "^volume $uuid  size [0-9.]+ MiB  state healthy  generation [0-9]+  quorum 1$" \
  "$tmpdir/status"
grep -Eq '^LEG +STATE +RESYNC +READS +WRITES +ERRORS +LAST ERROR +URI$' \
  "$tmpdir/status"
grep -Eq "^0 +uptodate +- +[0-9]+ +[0-9]+ +0 +- +nbd\+unix:///\?socket=$tmpdir/r0\.sock$" \
  "$tmpdir/status"
grep -Eq "^1 +uptodate +- .*r1\.sock$" "$tmpdir/status"

test "$(status_rc --json "$ctl")" -eq 0
python3 - "$tmpdir/status" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["ok"] is True
v = s["volume"]
assert v["state"] == "healthy" and v["uptodate"] == 2 and v["legs"] == 2, v
assert [l["index"] for l in s["legs"]] == [0, 1]
assert all(l["state"] == "uptodate" for l in s["legs"])
EOF

# --- set changes a rate.
"$NBDREP" set "$ctl" resync-rate 10M
test "$(nbdrep_status_get "$ctl" 's["volume"]["resync_rate"]')" -eq 10485760
"$NBDREP" set "$ctl" resync-rate 0

# --- Fail leg 1 and keep it down: status exits 3 and shows it failed.
"$NBDREP" fail "$ctl" 1
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
test "$(status_rc "$ctl")" -eq 3
grep -Eq "^volume $uuid  .*  state degraded  " "$tmpdir/status"
grep -Eq '^1 +failed +- ' "$tmpdir/status"
grep -Eq '^0 +uptodate +- ' "$tmpdir/status"
test "$(status_rc --json "$ctl")" -eq 3
python3 - "$tmpdir/status" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["volume"]["state"] == "degraded", s["volume"]
assert s["legs"][1]["state"] == "failed", s["legs"][1]
assert s["legs"][1]["last_error"], s["legs"][1]
EOF

# --- The controller's refusals: exit 1 with its message.
rc=0
"$NBDREP" fail "$ctl" 1 2>"$tmpdir/err" || rc=$?
cat "$tmpdir/err"
test "$rc" -eq 1
grep -q '^nbdrep: fail-leg: leg 1 is failed' "$tmpdir/err"
rc=0
"$NBDREP" remove "$ctl" 7 2>"$tmpdir/err" || rc=$?
cat "$tmpdir/err"
test "$rc" -eq 1
grep -q '^nbdrep: remove-leg: no leg 7' "$tmpdir/err"

# --- Metrics.
"$NBDREP" metrics "$ctl" >"$tmpdir/metrics"
cat "$tmpdir/metrics"
if promtool --version >/dev/null 2>&1; then
  promtool check metrics <"$tmpdir/metrics"
else
  echo "$0: promtool is not installed: skipping the Prometheus format check"
fi
# Every sample's family has HELP and TYPE; names carry our prefix.
python3 - "$tmpdir/metrics" <<'EOF'
import re, sys
helps, types, samples = set(), {}, []
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    m = re.match(r"# HELP (\S+) .+", line)
    if m:
        helps.add(m.group(1)); continue
    m = re.match(r"# TYPE (\S+) (gauge|counter|histogram)$", line)
    if m:
        types[m.group(1)] = m.group(2); continue
    m = re.match(r"([a-z_]+)(\{[^}]*\})? (\S+)$", line)
    assert m, "bad line: %r" % line
    float(m.group(3))
    samples.append(m.group(1))
for name in samples:
    family = re.sub(r"_(bucket|sum|count)$", "", name)
    if family not in types:
        family = name
    assert name.startswith("nbdkit_replicate_"), name
    assert family in helps and family in types, "no HELP/TYPE for " + name
assert "nbdkit_replicate_leg_request_duration_seconds" in types
EOF
grep -qx 'nbdkit_replicate_volume_state{state="degraded"} 1' "$tmpdir/metrics"
grep -qx 'nbdkit_replicate_volume_state{state="healthy"} 0' "$tmpdir/metrics"
grep -qx 'nbdkit_replicate_leg_state{leg="1",state="failed"} 1' "$tmpdir/metrics"
grep -qx 'nbdkit_replicate_leg_state{leg="0",state="uptodate"} 1' "$tmpdir/metrics"
grep -qx 'nbdkit_replicate_volume_uptodate_legs 1' "$tmpdir/metrics"
grep -q "^nbdkit_replicate_leg_info{leg=\"0\",uri=\"$r0_uri\",uuid=\"[0-9a-f-]*\"} 1$" \
  "$tmpdir/metrics"
grep -q '^nbdkit_replicate_leg_request_duration_seconds_bucket{leg="0",le="+Inf"} [0-9]*$' \
  "$tmpdir/metrics"

# --- The leg comes back and the volume is healthy again.
restart_replica 1
"$NBDREP" resync "$ctl" 1
wait_volume_state 60 "$ctl" healthy
test "$(status_rc "$ctl")" -eq 0
