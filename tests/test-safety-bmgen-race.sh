#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A member's failure gives its slot a new bm_gen (metaio_record_absent,
# metaio_set_bm_gen) while the page writer may be encoding that slot's
# bitmap pages with the bm_gen it reads (write_bitmaps, under
# bm_write_lock).  The change took change_lock alone, so it could land
# in the middle of a page's encoding: a page written under a bm_gen
# half old and half new reads as empty at the next start, while the
# activity log that covered its bits has been let go (metaio.c's
# design note).  The change must wait for the page writer.
#
# The interleaving, driven: three replicas; leg 2's server is killed
# and the volume written, so leg 2's bitmap pages are dirty; with
# -D replicate.bm_write_pause=2000 the activity log's cooler holds
# bm_write_lock for 2 s with its pages encoded; in that window leg 1's
# server is killed and leg 1, a member, fails.  The generation that
# records its failure (and its new bm_gen) must be recorded only after
# the pause is over.  Then the data oracle: legs 0 and 1 once leg 1 is
# back and resynced, and leg 2 likewise, hold every acknowledged write.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_controller c -D replicate.bm_write_pause=2000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# write SEED N: N random 64K writes and a flush, mirrored into $expected.
write ()
{
  write_random_blocks "$c_uri" "$expected" "$1" "$2" 65536 256
}

# pauses_after N: more than N bitmap writes have paused.
pauses_after ()
{
  [ "$(grep -c 'bitmap write: pausing' "$log")" -gt "$1" ]
}

kill_replica 2
write 1 64
wait_until 30 grep -q 'leg 2: [a-z]* -> failed' "$log"
# Leg 2's bits are dirty: the cooler writes its pages, pausing each time.
pauses=$(grep -c 'bitmap write: pausing' "$log" || true)
write 2 64
wait_until 30 pauses_after "$pauses"
kill_replica 1
wait_until 30 grep -q 'leg 1: [a-z]* -> failed' "$log"
wait_until 30 grep -q 'bitmap write: pause over' "$log"

# The order in the log: leg 1 failed during a pause (no "pause over"
# between the pause's start and the failure), and the generation that
# records the failure comes after that pause is over.
python3 - "$log" <<'EOF'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
failed = next(i for i, l in enumerate(lines)
              if re.search(r"leg 1: [a-z]+ -> failed", l))
start = max(i for i in range(failed)
            if "bitmap write: pausing" in lines[i])
over = [i for i in range(start, len(lines))
        if "bitmap write: pause over" in lines[i]]
assert over and over[0] > failed, \
    "leg 1 did not fail inside a bitmap write's pause (lines %d, %d)" \
    % (start, failed)
recorded = next((i for i in range(failed, len(lines))
                 if re.search(r"generation \d+ recorded", lines[i])), None)
assert recorded is not None, "leg 1's failure was never recorded"
print("pause at line %d, leg 1 failed at %d, pause over at %d, recorded at %d"
      % (start, failed, over[0], recorded))
assert recorded > over[0], \
    "leg 1's failure (its new bm_gen) was recorded inside the bitmap write"
EOF

restart_replica 1
restart_replica 2
wait_volume_state 60 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
