#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep inspect on the legs of a running volume: the superblock it
# decodes matches the controller's status (volume and leg UUIDs, slot,
# generation); after leg 1 dies under a write, leg 0's slot table shows
# slot 1 absent and its bitmap plus activity log cover the write.  A
# blank leg, a leg too small to hold a superblock and an unreachable URI
# exit 1 with a clear message.

set -euo pipefail
source ./functions.sh
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires_nbdsh
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
start_replica 0
start_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_for test -S "$ctl"
wait_volume_state 60 "$ctl" healthy
nbdrep_status_json "$ctl" >"$tmpdir/status.json"
uuid=$(nbdrep_status_get "$ctl" 's["volume"]["uuid"]')

# --- Text: the volume UUID and which copy is current.
"$NBDREP" inspect "$r0_uri" >"$tmpdir/inspect"
cat "$tmpdir/inspect"
grep -Eq "^  volume uuid +$uuid$" "$tmpdir/inspect"
grep -Eq '^superblock: copy [01] \(seq [0-9]+\) is current; copy [01]: ' \
  "$tmpdir/inspect"
grep -Eq '^  flags +0x0 \(consistent\)$' "$tmpdir/inspect"
grep -Eq '^  0 +assigned,member +[0-9a-f-]{36} .* this leg$' "$tmpdir/inspect"
grep -q '^out of sync (absent slots): none$' "$tmpdir/inspect"

# --- JSON: the same facts as the controller's status, for both legs.
for i in 0 1; do
  uri_var=r${i}_uri
  "$NBDREP" inspect --json "${!uri_var}" >"$tmpdir/inspect$i.json"
  python3 - "$tmpdir/status.json" "$tmpdir/inspect$i.json" "$i" <<'EOF'
import json, sys
status = json.load(open(sys.argv[1]))
ins = json.load(open(sys.argv[2]))
i = int(sys.argv[3])
leg = status["legs"][i]
sb = ins["superblock"]
assert sb["volume_uuid"] == status["volume"]["uuid"], sb
assert sb["leg_uuid"] == leg["uuid"], (sb, leg)
assert sb["slot"] == leg["slot"], (sb, leg)
assert sb["generation"]["counter"] == status["volume"]["generation"], sb
assert sb["inconsistent"] is False
assert sb["volume_size"] == status["volume"]["size"]
assert sb["chunk_size"] == status["volume"]["chunk"]
assert sb["quorum"] == status["volume"]["quorum"]
assert ins["leg_size"] == leg["size"]
member = [s for s in ins["slots"] if s["member"]]
assert sorted(s["uuid"] for s in member) == \
    sorted(l["uuid"] for l in status["legs"]), member
assert ins["out_of_sync"] == []
EOF
done

# --- Leg 1 dies under a write: on leg 0, slot 1 is absent and what it
# missed (its bitmap with the activity log) covers the write.
kill_replica 1
"$NBDSH" -u "$c_uri" -c '
h.pwrite(b"\x55" * (1024 * 1024), 5 * 1024 * 1024)
h.flush()
'
wait_leg_state 30 "$ctl" 1 failed
slot1=$(nbdrep_status_get "$ctl" 's["legs"][1]["slot"]')
"$NBDREP" inspect "$r0_uri" >"$tmpdir/inspect"
cat "$tmpdir/inspect"
grep -Eq "^  $slot1 +assigned +[0-9a-f-]{36} .* absent$" "$tmpdir/inspect"
grep -Eq "^  slot $slot1: [0-9]+ chunks, [0-9]+ bytes .* with the activity log" \
  "$tmpdir/inspect"
"$NBDREP" inspect --json "$r0_uri" >"$tmpdir/inspect.json"
python3 - "$tmpdir/inspect.json" "$slot1" <<'EOF'
import json, sys
ins = json.load(open(sys.argv[1]))
slot = int(sys.argv[2])
assert ins["slots"][slot]["role"] == "absent", ins["slots"][slot]
assert not ins["slots"][slot]["member"]
[oos] = ins["out_of_sync"]
assert oos["slot"] == slot, oos
# The write covered 16 chunks of 64K at 5M..6M.
assert oos["chunks_with_activity_log"] >= 16, oos
assert oos["bytes_with_activity_log"] >= 1024 * 1024, oos
assert oos["chunks_with_activity_log"] >= oos["chunks"], oos
pages = oos["pages"]
assert sum(pages.values()) == ins["layout"]["bitmap_pages_per_slot"], oos
EOF

# --- Not legs: exit 1 and say why.
start_replica 2 --memory 16M
rc=0
"$NBDREP" inspect "$r2_uri" 2>"$tmpdir/err" || rc=$?
cat "$tmpdir/err"
test "$rc" -eq 1
grep -q 'no nbdkit-replicate superblock: blank, or not a leg$' "$tmpdir/err"

start_replica 3 --memory 4K
rc=0
"$NBDREP" inspect --json "$r3_uri" >"$tmpdir/out" 2>"$tmpdir/err" || rc=$?
cat "$tmpdir/err"
test "$rc" -eq 1
test ! -s "$tmpdir/out"
grep -q 'no nbdkit-replicate superblock: the leg is only 4096 bytes$' \
  "$tmpdir/err"

rc=0
"$NBDREP" inspect "nbd+unix:///?socket=$tmpdir/nowhere.sock" \
  2>"$tmpdir/err" || rc=$?
cat "$tmpdir/err"
test "$rc" -eq 1
grep -q "nowhere.sock" "$tmpdir/err"
