#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# What an operator sees of an asynchronous leg (issue 20: "Status,
# nbdrep status and metrics show per async leg: state (replicating,
# behind, catching-up, failed), the lag in bytes and in seconds, the
# buffer use"; DESIGN.md section 14).  With the leg's server paused and
# writes queued for it, the status JSON, nbdrep status and nbdrep
# metrics must each show the leg as asynchronous with its lag.  And
# ps -L shows its threads by name (thread-name.h): the leg's sender
# and poller beside the volume's monitor, poller, activity log and
# control socket.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
cat /proc/"$(cat "$tmpdir/c.pid")"/task/*/comm | sort | uniq -c
for name in rep-async2 rep-legpoller rep-monitor rep-poller rep-al \
            rep-control; do
  grep -qx "$name" /proc/"$(cat "$tmpdir/c.pid")"/task/*/comm
done

pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os
for i in range(16):
    h.pwrite(os.urandom(65536), i * 65536)
"
sleep 1.5
status_check "$ctl" \
  'leg(2)["async"]["lag_bytes"] >= 16 * 65536 and leg(2)["async"]["lag_seconds"] >= 1 and leg(2)["async"]["buffer_used"] > 0'

# nbdrep status: the leg's row says it is asynchronous and how far
# behind it is.
"$NBDREP" status "$ctl" >"$tmpdir/status.txt" || :
cat "$tmpdir/status.txt"
"$NBDREP" metrics "$ctl" >"$tmpdir/metrics.txt"
grep 'leg="2"' "$tmpdir/metrics.txt"
rc=0
grep -E '^2 .*(replicating|behind)' "$tmpdir/status.txt" || rc=1

# nbdrep metrics: a lag gauge for leg 2.
grep -E '^nbdkit_replicate_[a-z_]*lag[a-z_]*\{[^}]*leg="2"[^}]*\} [0-9]' \
  "$tmpdir/metrics.txt" || rc=1
resume_replica "$pause"
exit "$rc"
