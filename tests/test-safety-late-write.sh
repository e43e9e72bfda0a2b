#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A write that timed out on a slow but live leg must not land after
# that leg was resynced (DESIGN.md section 13, drain.c).
#
# Two file legs, leg 1 behind the faultinject filter, timeout=2.  The
# filter holds one write to X on leg 1 for 10 s in a sleep that the
# controller's shutdown of the socket does not cut short (nbdkit's delay
# filter would give up), then applies it:
#   1. write W1 to X: leg 1 times out after 2 s and is failed, W1 is
#      acknowledged from leg 0;
#   2. write W2 to X (newer data, acknowledged, leg 0 only);
#   3. while the held W1 has not landed, leg 1 must not be uptodate or
#      syncing, and its last_error says what it waits for (the server
#      has not closed the aborted connection yet);
#   4. once W1 has landed (the filter logs "done") the server closes the
#      old connection, the leg is reconnected and resynced: the volume
#      becomes healthy and both legs hold W2.
# Before the fix leg 1 was reconnected after 1 s, resynced and
# uptodate within a few seconds, and then W1 landed on it alone: the
# legs differed while both were uptodate.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
rules=$tmpdir/r1.rules
faults=$tmpdir/r1.faults
expected=$tmpdir/expected
X=$(( 1024 * 1024 ))
len=$(( 64 * 1024 ))

start_replica 0
start_replica 1 -- --filter="$FAULTINJECT" rules="$rules" log="$faults"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# The old data, on both legs.
write_random "$c_uri" "$expected" "$X" "$len"

# 1. W1, held on leg 1 for 10 s.
fault_arm "$rules" "id=late op=write range=$X-$(( X + len )) phase=hold secs=10"
write_random "$c_uri" "$expected" "$X" "$len"
fault_wait "$faults" late fire 5
status_check "$ctl" 'leg(1)["state"] == "failed"'

# 2. W2, newer, on leg 0 only.
write_random "$c_uri" "$expected" "$X" "$len"

# 3. Until W1 has landed on leg 1, leg 1 stays out, and says why.
saw_wait=
while ! grep -q '^done late ' "$faults"; do
  json=$(nbdrep_status_json "$ctl")
  python3 -c '
import json, sys
s = json.loads(sys.argv[1])
l = s["legs"][1]
if l["state"] in ("uptodate", "syncing"):
    sys.exit("leg 1 is %s while a write it timed out on may still land"
             % l["state"])
' "$json"
  if grep -q 'close' <<<"$json"; then saw_wait=1; fi
  sleep 0.2
done
[ -n "$saw_wait" ] || {
  echo "$0: leg 1's last_error never said it waits for its old connection" >&2
  exit 1
}

# 4. The server closes the connection once W1 is done; the leg returns.
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
