#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A blank leg refused as another leg's storage (resync.c, refuse_alias)
# leaves no slot behind.  Its claim gave it a fresh slot, taken back in
# memory; the other leg's superblock, rewritten on the shared disk, must
# be built without it.  Before the fix it was rewritten first, so the
# surviving leg's disk named the refused leg's slot 'assigned' (absent)
# for ever: no bump follows a refusal, a clean stop writes none, and
# after a restart without the alias URI the slot was an orphan that
# every write marked.
#   New volume, init=copy, leg 1 = leg 0 under another host name: leg 1
#   is refused; then, controller stopped, leg 0's disk has one assigned
#   slot (its own); restarted without leg 1: healthy, the oracle.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
port=$(free_port)
a="nbd://localhost:$port"
start_replica 0 32M --port "$port"
printf 'data' | dd of="$tmpdir/r0.img" conv=notrunc status=none
start_controller c "$PLUGIN" "$a" "nbd://127.0.0.1:$port" init=copy \
  control="$ctl"
wait_until 30 status_check "$ctl" \
  'leg(0)["state"] == "uptodate" and leg(1)["state"] == "failed" and
   "same storage" in (leg(1)["last_error"] or "")'
new_expected "$expected" "$c_uri"
printf 'data' | dd of="$expected" conv=notrunc status=none
write_random "$c_uri" "$expected" 65536 65536
stop_controller c

"$NBDREP" inspect --json "$a" >"$tmpdir/inspect.json"
python3 - "$tmpdir/inspect.json" <<'EOF2'
import json, sys
ins = json.load(open(sys.argv[1]))
assigned = [i for i, x in enumerate(ins["slots"]) if x["assigned"]]
assert assigned == [ins["superblock"]["slot"]], \
    "slots assigned on leg 0's disk: %s" % assigned
EOF2

start_controller c "$PLUGIN" "$a" control="$ctl"
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$a"
