#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The alert rules of contrib/prometheus against the metrics of a live
# volume.  promtool check rules accepts them and promtool test rules
# passes their unit tests (nbdkit-replicate.tests.yml).  Every metric
# the rules and those tests name is in the output of a live `nbdrep
# metrics` (so a renamed metric fails here).  Then the metrics of a live
# volume of three legs and an asynchronous one, healthy and then with a
# replica killed (leg 1 failed, the volume degraded), are
# captured as `nbdrep metrics --volume=vol` prints them and fed to
# promtool as input series: healthy, no alert; degraded for 12 minutes,
# NbdkitReplicateVolumeDegraded (after 10) and NbdkitReplicateLegFailed
# for leg 1 (after 5), with those labels, and nothing else.

source ./functions.sh
set -euo pipefail
set -x

requires promtool --version
requires python3 --version

rules_dir=$abs_top_srcdir/contrib/prometheus
rules=$rules_dir/nbdkit-replicate.rules.yml

promtool check rules "$rules"
promtool test rules "$rules_dir/nbdkit-replicate.tests.yml"

ctl=$tmpdir/c.ctl
for i in 0 1 2 3; do start_replica "$i" 64M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  async="$r3_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
"$NBDREP" metrics --volume=vol "$ctl" >"$tmpdir/healthy.prom"
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
wait_volume_state 30 "$ctl" degraded
"$NBDREP" metrics --volume=vol "$ctl" >"$tmpdir/degraded.prom"
promtool check metrics <"$tmpdir/degraded.prom"
# The asynchronous leg (index 3), and only it, has the async gauges.
grep -E '^nbdkit_replicate_leg_async_lag_seconds\{volume="vol",leg="3"\} [0-9.e+-]+$' \
  "$tmpdir/degraded.prom"
test "$(grep -c '^nbdkit_replicate_leg_async_lag_seconds{' "$tmpdir/degraded.prom")" = 1
test "$(grep -c '^nbdkit_replicate_leg_async_lag_bytes{' "$tmpdir/degraded.prom")" = 1

# Every nbdkit_replicate_* name of the rules and their tests is exported.
grep -ho 'nbdkit_replicate_[a-z_]*' "$rules" "$rules_dir/nbdkit-replicate.tests.yml" |
  sort -u >"$tmpdir/names"
test -s "$tmpdir/names"
sed -n 's/^# TYPE \([a-z_]*\) .*/\1/p' "$tmpdir/degraded.prom" | sort -u \
  >"$tmpdir/exported"
missing=$(comm -23 "$tmpdir/names" "$tmpdir/exported")
if [ -n "$missing" ]; then
  echo "$0: the rules use metrics nbdrep metrics does not export: $missing"
  exit 1
fi

# The live samples as promtool input series: each value repeated for
# MINUTES minutes (histograms and _info left out: no rule reads them).
cat >"$tmpdir/series.py" <<'PY'
import re, sys
path, minutes = sys.argv[1], int(sys.argv[2])
for line in open(path):
    m = re.match(r'(nbdkit_replicate_\w+)(\{.*\})? (\S+)$', line)
    if not m or m.group(1).endswith(("_bucket", "_sum", "_count", "_info")):
        continue
    series = m.group(1) + (m.group(2) or "")
    print("      - series: '%s'\n        values: '%sx%d'"
          % (series, m.group(3), minutes))
PY

# write_test FILE PROM ALERT-TESTS: a promtool test file feeding PROM's
# samples for 20 minutes, with ALERT-TESTS (YAML, alert_rule_test).
write_test ()
{
  {
    echo "rule_files:"
    echo "  - $rules"
    echo "evaluation_interval: 1m"
    echo "tests:"
    echo "  - interval: 1m"
    echo "    input_series:"
    python3 "$tmpdir/series.py" "$2" 20
    echo "    alert_rule_test:"
    echo "$3"
  } >"$1"
}

no_alerts=
for alert in NbdkitReplicateVolumeDegraded NbdkitReplicateVolumeUnwritable \
             NbdkitReplicateLegFailed NbdkitReplicateResyncStalled \
             NbdkitReplicateVerifyMismatches NbdkitReplicateAsyncLag; do
  no_alerts+="      - eval_time: 15m
        alertname: $alert
        exp_alerts: []
"
done
write_test "$tmpdir/healthy.yml" "$tmpdir/healthy.prom" "$no_alerts"
promtool test rules "$tmpdir/healthy.yml"

write_test "$tmpdir/degraded.yml" "$tmpdir/degraded.prom" "\
      - eval_time: 9m
        alertname: NbdkitReplicateVolumeDegraded
        exp_alerts: []
      - eval_time: 12m
        alertname: NbdkitReplicateVolumeDegraded
        exp_alerts:
          - exp_labels:
              severity: warning
              volume: vol
              state: degraded
            exp_annotations:
              summary: \"Volume vol on  has been degraded for 10 minutes\"
              description: \"Fewer legs than configured are up to date; writes still reach a quorum.  See \`nbdrep status\` for the failed or syncing legs.\"
      - eval_time: 4m
        alertname: NbdkitReplicateLegFailed
        exp_alerts: []
      - eval_time: 12m
        alertname: NbdkitReplicateLegFailed
        exp_alerts:
          - exp_labels:
              severity: warning
              volume: vol
              leg: \"1\"
              state: failed
            exp_annotations:
              summary: \"Leg 1 of volume vol on  has been failed for 5 minutes\"
              description: \"The controller cannot reach the leg or the leg returned errors; it retries and resyncs the leg when it answers again.  nbdkit_replicate_leg_info gives its URI.\"
      - eval_time: 12m
        alertname: NbdkitReplicateVolumeUnwritable
        exp_alerts: []
      - eval_time: 12m
        alertname: NbdkitReplicateResyncStalled
        exp_alerts: []
      - eval_time: 12m
        alertname: NbdkitReplicateVerifyMismatches
        exp_alerts: []"
promtool test rules "$tmpdir/degraded.yml"
