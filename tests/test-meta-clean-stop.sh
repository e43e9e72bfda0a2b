#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A clean stop leaves nothing to copy (DESIGN.md section 5, invariant 3:
# "a clean stop is a final flush and an empty AL, so the next start
# copies nothing").  Three file legs; a client writes 12 MiB over six
# activity-log extents WITHOUT flushing and disconnects while they are
# still hot; the controller is stopped with SIGTERM at once.  Then, on
# every leg, `nbdrep inspect` shows an empty activity log, a consistent
# superblock at the same generation and nothing out of sync; the
# restarted controller logs no crash recovery and no stale leg, its
# status shows no resync on any leg, activity_log.hot == 0 and the
# generation one above the one recorded at the stop; and every leg
# holds what the client wrote (oracle).

source ./functions.sh
set -euo pipefail
set -x

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
start_replica 0 --file 64M
start_replica 1 --file 64M
start_replica 2 --file 64M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_for test -S "$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")

# The expected image and the writes: 2 MiB at the start of six 4 MiB
# extents, no flush.
truncate -s "$size" "$tmpdir/expected"
for ext in 0 3 5 8 11 13; do
  head -c 2M /dev/urandom >"$tmpdir/chunk"
  dd if="$tmpdir/chunk" of="$tmpdir/expected" bs=1M seek=$(( ext * 4 )) \
     conv=notrunc status=none
done
"$NBDSH" -u "$c_uri" -c "
f = open('$tmpdir/expected', 'rb')
for ext in (0, 3, 5, 8, 11, 13):
    f.seek(ext * 4 * 1024 * 1024)
    h.pwrite(f.read(2 * 1024 * 1024), ext * 4 * 1024 * 1024)
"
# The extents are still hot (cooling takes a flush and ~2 s): the stop
# itself must flush and empty the log.
hot=$(nbdrep_status_get "$ctl" 's["volume"]["activity_log"]["hot"]')
test "$hot" -gt 0
gen_before=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
stop_controller c

# --- Every leg: empty activity log, consistent, same generation, no
# absent slot.
for i in 0 1 2; do
  uri_var=r${i}_uri
  "$NBDREP" inspect --json "${!uri_var}" >"$tmpdir/inspect$i.json"
  python3 - "$tmpdir/inspect$i.json" "$gen_before" <<'EOF'
import json, sys
ins = json.load(open(sys.argv[1]))
gen = int(sys.argv[2])
al = ins["activity_log"]
assert al["hot"] == 0, al
assert al["ranges"] == [], al
sb = ins["superblock"]
assert sb["inconsistent"] is False, sb
assert sb["generation"]["counter"] == gen, (sb["generation"], gen)
members = [s["slot"] for s in ins["slots"] if s["member"]]
assert members == [0, 1, 2], ins["slots"]
assert ins["out_of_sync"] == [], ins["out_of_sync"]
EOF
done

# --- Restart: nothing to recover, nothing to copy.
lines_before=$(wc -l <"$tmpdir/c.log")
restart_controller c
wait_for test -S "$ctl"
nbdrep_status_json "$ctl" >"$tmpdir/status.json"
python3 - "$tmpdir/status.json" "$gen_before" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
gen = int(sys.argv[2])
v = s["volume"]
assert v["state"] == "healthy", v
assert v["activity_log"]["hot"] == 0, v
assert v["generation"] == gen + 1, (v["generation"], gen)
for leg in s["legs"]:
    assert leg["state"] == "uptodate", leg
    assert leg["resync"] is None, leg
    assert leg["last_resync"] is None, leg
EOF
tail -n +"$(( lines_before + 1 ))" "$tmpdir/c.log" >"$tmpdir/c-restart.log"
grep -q "volume started at generation $(( gen_before + 1 ))$" \
  "$tmpdir/c-restart.log"
if grep -E 'crash recovery|is stale|resync of|activity log unreadable' \
     "$tmpdir/c-restart.log"; then
  echo "$0: the start after a clean stop recovered or copied something"
  exit 1
fi

# --- The oracle: every leg holds what the client wrote.
compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri" "$r2_uri"
compare_legs "$tmpdir/expected" "$c_uri"
