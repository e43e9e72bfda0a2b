#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep metrics against a live three-leg controller in every state
# (nbdrep(1) metrics): healthy; verify running, then stopped; leg 1
# syncing (a slow full resync); degraded (replica 1 killed, leg 1
# failed); healthy again, with a verify done; leg 2 removed.  In each
# state the output passes `promtool check metrics` (format and lint),
# exits 0, and agrees with the status JSON taken just before (s1) and
# just after (s2) it: every state family has exactly one 1 per object
# and it is the state word of the status (which the test also names,
# so a wrong word in both fails); counters and growing gauges lie
# between s1 and s2 (equal when nothing moves); fixed gauges equal the
# status; the resync and verify gauges are those of the running resync
# or last verify, 0 when there is none; the leg_info labels carry the
# URI and UUID; the latency histogram is cumulative, its +Inf bucket
# equals _count, and _count and _sum lie between the status' count and
# sum_us of s1 and s2.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires python3 -c 'import json'
requires promtool --version

MiB=1048576
ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" 64M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
"$NBDSH" -u "$c_uri" -c '
import os
h.pwrite(os.urandom(8 * 1024 * 1024), 0)
h.zero(1024 * 1024, 16 * 1024 * 1024)
h.flush()
for i in range(20):
    h.pread(65536, i * 65536)
'

cat >"$tmpdir/check.py" <<'EOF'
import json, re, sys

s1 = json.load(open(sys.argv[1]))
s2 = json.load(open(sys.argv[2]))
text = open(sys.argv[3]).read()
want_volume, want_legs, want_verify = sys.argv[4], sys.argv[5].split(","), sys.argv[6]
P = "nbdkit_replicate_"

samples = {}                       # (name, frozenset(labels)) -> value
types = {}
for line in text.splitlines():
    m = re.match(r"# TYPE (\S+) (\S+)$", line)
    if m:
        types[m.group(1)] = m.group(2)
        continue
    if line.startswith("#"):
        continue
    m = re.match(r'([a-z_]+)(?:\{(.*)\})? (\S+)$', line)
    assert m, "bad sample line %r" % line
    labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
    key = (m.group(1), labels)
    assert key not in samples, "duplicate sample %r" % line
    samples[key] = float(m.group(3))

def get(name, **labels):
    key = (P + name, frozenset((k, str(v)) for k, v in labels.items()))
    assert key in samples, "no sample %s%r" % (name, labels)
    return samples[key]

def between(what, a, m, b):
    assert a <= m <= b, "%s: metric %r not between status %r and %r" % (what, m, a, b)

def equal(what, m, v):
    assert m == v, "%s: metric %r, status %r" % (what, m, v)

def states(name, words, current, **labels):
    got = {w: get(name, state=w, **labels) for w in words}
    ones = [w for w, x in got.items() if x == 1]
    assert all(x in (0, 1) for x in got.values()), (name, labels, got)
    if current is None:
        assert ones == [], "%s%r: %r, want all 0" % (name, labels, got)
    else:
        assert ones == [current], "%s%r: %r, want %s" % (name, labels, got, current)

v1, v2 = s1["volume"], s2["volume"]

# --- The volume.
assert v1["state"] == v2["state"] == want_volume, (v1["state"], v2["state"], want_volume)
states("volume_state", ["healthy", "degraded", "readonly", "failed"], want_volume)
equal("volume_info", get("volume_info", uuid=v2["uuid"], metadata=v2["metadata"],
                         read=v2["read"]), 1)
for name, field in [("volume_size_bytes", "size"), ("volume_legs", "legs"),
                    ("volume_quorum_legs", "quorum"), ("volume_chunk_bytes", "chunk"),
                    ("resync_rate_limit_bytes_per_second", "resync_rate"),
                    ("resync_min_rate_bytes_per_second", "resync_min_rate"),
                    ("verify_rate_limit_bytes_per_second", "verify_rate")]:
    assert v1[field] == v2[field], field
    equal(name, get(name), v2[field])
for name, field in [("volume_generation", "generation"),
                    ("volume_uptodate_legs", "uptodate")]:
    between(name, min(v1[field], v2[field]), get(name), max(v1[field], v2[field]))
al1, al2 = v1["activity_log"], v2["activity_log"]
equal("activity_log_capacity_extents", get("activity_log_capacity_extents"), al2["capacity"])
between("activity_log_writes_total", al1["writes"], get("activity_log_writes_total"), al2["writes"])
between("activity_log_hot_extents", 0, get("activity_log_hot_extents"), al2["capacity"])
assert types[P + "activity_log_writes_total"] == "counter"

# --- The verify.
f1, f2 = v1["verify"], v2["verify"]
if want_verify == "none":
    assert f1 is None and f2 is None, (f1, f2)
    states("verify_state", ["running", "done", "stopped", "failed"], None)
    for name in ["done", "total", "mismatched", "repaired"]:
        equal("verify_%s_bytes" % name, get("verify_%s_bytes" % name), 0)
else:
    assert f1["state"] == f2["state"] == want_verify, (f1["state"], f2["state"])
    states("verify_state", ["running", "done", "stopped", "failed"], want_verify)
    between("verify_done_bytes", f1["done"], get("verify_done_bytes"), f2["done"])
    equal("verify_total_bytes", get("verify_total_bytes"), f2["total"])
    between("verify_mismatched_bytes", f1["mismatched_bytes"],
            get("verify_mismatched_bytes"), f2["mismatched_bytes"])
    between("verify_repaired_bytes", f1["repaired_bytes"],
            get("verify_repaired_bytes"), f2["repaired_bytes"])

# --- The legs.
assert [l["index"] for l in s1["legs"]] == [l["index"] for l in s2["legs"]]
assert len(s2["legs"]) == len(want_legs), (len(s2["legs"]), want_legs)
for l1, l2, want in zip(s1["legs"], s2["legs"], want_legs):
    i = l2["index"]
    assert l1["state"] == l2["state"] == want, (i, l1["state"], l2["state"], want)
    states("leg_state", ["uptodate", "syncing", "failed", "stale", "removed"], want, leg=i)
    equal("leg_info", get("leg_info", leg=i, uri=l2["uri"], uuid=l2["uuid"] or ""), 1)
    for name, field in [("reads_total", "reads"), ("writes_total", "writes"),
                        ("zeroes_total", "zeroes"), ("flushes_total", "flushes"),
                        ("errors_total", "errors"), ("read_bytes_total", "bytes_read"),
                        ("written_bytes_total", "bytes_written")]:
        assert types[P + "leg_" + name] == "counter", name
        between("leg %d %s" % (i, name), l1[field], get("leg_" + name, leg=i), l2[field])
    equal("leg %d size" % i, get("leg_size_bytes", leg=i), l2["size"])
    if l1["connections"] == l2["connections"]:
        equal("leg %d connections" % i, get("leg_connections", leg=i), l2["connections"])
    r1, r2 = l1["resync"], l2["resync"]
    if want == "syncing":
        assert r1 is not None and r2 is not None, (r1, r2)
        between("leg %d resync done" % i, r1["done"], get("leg_resync_done_bytes", leg=i), r2["done"])
        equal("leg %d resync total" % i, get("leg_resync_total_bytes", leg=i), r2["total"])
        assert get("leg_resync_total_bytes", leg=i) > 0
    else:
        assert r1 is None and r2 is None, (r1, r2)
        for name in ["done_bytes", "total_bytes", "rate_bytes_per_second"]:
            equal("leg %d resync %s" % (i, name), get("leg_resync_" + name, leg=i), 0)
    # The latency histogram.
    h1, h2 = l1["latency"], l2["latency"]
    base = "leg_request_duration_seconds"
    assert types[P + base] == "histogram"
    bounds = [("%.6f" % (b / 1e6)).rstrip("0").rstrip(".") for b in h2["bounds_us"]] + ["+Inf"]
    cum = [get(base + "_bucket", leg=i, le=b) for b in bounds]
    assert cum == sorted(cum), (i, cum)
    count = get(base + "_count", leg=i)
    equal("leg %d histogram +Inf" % i, cum[-1], count)
    between("leg %d histogram count" % i, h1["count"], count, h2["count"])
    between("leg %d histogram sum" % i, h1["sum_us"] / 1e6 - 1e-6,
            get(base + "_sum", leg=i), h2["sum_us"] / 1e6 + 1e-6)
    if h1["count"] == h2["count"]:
        equal("leg %d buckets" % i, cum,
              [float(sum(h2["counts"][:k + 1])) for k in range(len(bounds))])
print("metrics agree with the status: volume %s, legs %s, verify %s"
      % (want_volume, ",".join(want_legs), want_verify))
EOF

# check_metrics VOLUME LEGS VERIFY: the metrics pass promtool and agree
# with the status taken around them; the volume is in state VOLUME, the
# legs in the comma-separated states LEGS, the last verify in state
# VERIFY ("none" if none ran).
check_metrics ()
{
  local rc=0
  nbdrep_status_json "$ctl" >"$tmpdir/s1.json"
  "$NBDREP" metrics "$ctl" >"$tmpdir/metrics" || rc=$?
  nbdrep_status_json "$ctl" >"$tmpdir/s2.json"
  if [ "$rc" -ne 0 ]; then
    echo "$0: nbdrep metrics exited with status $rc" >&2
    return 1
  fi
  if ! promtool check metrics <"$tmpdir/metrics"; then
    cat "$tmpdir/metrics"
    echo "$0: promtool check metrics failed" >&2
    return 1
  fi
  python3 "$tmpdir/check.py" "$tmpdir/s1.json" "$tmpdir/s2.json" \
    "$tmpdir/metrics" "$@"
}

# --- Healthy, no verify yet.
check_metrics healthy uptodate,uptodate,uptodate none
grep -qx 'nbdkit_replicate_volume_state{state="healthy"} 1' "$tmpdir/metrics"

# --- Verify running (8 MiB/s over 64 MiB), then stopped.
"$NBDREP" verify "$ctl" --rate=8M
wait_until 10 status_check "$ctl" "s['volume']['verify']['done'] > 0"
check_metrics healthy uptodate,uptodate,uptodate running
grep -qx 'nbdkit_replicate_verify_state{state="running"} 1' "$tmpdir/metrics"
"$NBDREP" verify "$ctl" --stop
check_metrics healthy uptodate,uptodate,uptodate stopped

# --- Leg 1 syncing (a slow full resync).
"$NBDREP" set "$ctl" resync-rate 4M
"$NBDREP" resync "$ctl" 1 --full
wait_until 10 status_check "$ctl" "leg(1)['state'] == 'syncing' and
  leg(1)['resync'] is not None and leg(1)['resync']['done'] > 0"
check_metrics degraded uptodate,syncing,uptodate stopped
grep -qx 'nbdkit_replicate_leg_state{leg="1",state="syncing"} 1' "$tmpdir/metrics"
grep -q '^nbdkit_replicate_leg_resync_done_bytes{leg="1"} [1-9][0-9]*$' "$tmpdir/metrics"
"$NBDREP" set "$ctl" resync-rate 0
wait_volume_state 30 "$ctl" healthy

# --- Degraded: replica 1 killed, leg 1 failed on the next write.
kill_replica 1
"$NBDSH" -u "$c_uri" -c 'h.pwrite(b"\x55" * 65536, 0); h.flush()'
wait_leg_state 20 "$ctl" 1 failed
check_metrics degraded uptodate,failed,uptodate stopped
grep -qx 'nbdkit_replicate_volume_state{state="degraded"} 1' "$tmpdir/metrics"
grep -qx 'nbdkit_replicate_volume_uptodate_legs 2' "$tmpdir/metrics"

# --- Healthy again once it is back.
restart_replica 1
"$NBDREP" resync "$ctl" 1
wait_volume_state 30 "$ctl" healthy
check_metrics healthy uptodate,uptodate,uptodate stopped
"$NBDREP" verify "$ctl" --rate=0 --wait
check_metrics healthy uptodate,uptodate,uptodate done
grep -qx 'nbdkit_replicate_verify_state{state="done"} 1' "$tmpdir/metrics"

# --- Leg 2 removed.
"$NBDREP" remove "$ctl" 2
check_metrics healthy uptodate,uptodate,removed done
grep -qx 'nbdkit_replicate_leg_state{leg="2",state="removed"} 1' "$tmpdir/metrics"

"$NBDREP" metrics "$ctl" >"$tmpdir/plain"
# No asynchronous leg, no async family.
if grep -q '_async_' "$tmpdir/plain"; then
  echo "$0: async metrics without an asynchronous leg"; exit 1
fi

# --- --volume=NAME: the label first on every sample (escaped), the
# rest unchanged (nothing moves here); given twice, the last one counts.
"$NBDREP" metrics --volume=old --volume='v"1\' "$ctl" >"$tmpdir/labelled"
promtool check metrics <"$tmpdir/labelled"
test "$(grep -c '^nbdkit' "$tmpdir/plain")" = \
     "$(grep '^nbdkit' "$tmpdir/labelled" | grep -cF '{volume="v\"1\\"')"
sed -e 's/{volume="v\\"1\\\\",/{/' -e 's/{volume="v\\"1\\\\"}//' \
  "$tmpdir/labelled" >"$tmpdir/stripped"
diff "$tmpdir/plain" "$tmpdir/stripped"
