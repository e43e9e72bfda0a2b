#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The disk behind a leg's URI is swapped, while the controller runs, for
# an older copy of itself (a snapshot or backup restored, a replica's
# disk replaced): it carries the leg's identity and generation (no
# generation changes while writes go on), and the slot's bitmap counts
# only from the leg's failure.  Before the fix the monitor judged it by
# its generation alone: an incremental resync from that bitmap, then
# uptodate without the writes acknowledged between the copy and the
# failure, served to reads.  Now it sees that the copy's superblock or
# activity log is older than what this run last wrote to the leg and
# saw acknowledged (monitor.c, rolled_back), and rebuilds it fully.
#   1. Legs 0, 1 and 2: write A, cooled.  r2.old: a copy of leg 2's
#      disk, taken while it is served.
#   2. Write B (another activity-log extent), cooled: it is in no
#      extent of the log any more.
#   3. Leg 2's server stopped; once leg 2 is failed, its disk replaced
#      by r2.old and the server started again: leg 2 is rebuilt fully
#      (the log names an older copy), and is uptodate with A and B.
#   4. The genuine disk coming back is still resynced incrementally.
#   5. The oracle: A, B, C on every leg and through the volume.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
M=$(( 1024 * 1024 ))
cooled='s["volume"]["activity_log"]["hot"] == 0'

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M

# 1.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"
wait_until 30 status_check "$ctl" "$cooled"
cp "$tmpdir/r2.img" "$tmpdir/r2.old"

# 2.
write_random "$c_uri" "$expected" $(( 8 * M )) "$M"
wait_until 30 status_check "$ctl" "$cooled"

# 3.
stop_replica 2
wait_until 30 status_check "$ctl" 'leg(2)["state"] != "uptodate"'
cp "$tmpdir/r2.old" "$tmpdir/r2.img"
restart_replica 2
wait_until 60 status_check "$ctl" 'leg(2)["state"] == "uptodate"'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
grep 'leg 2 .* is back: full resync' "$log"
grep 'leg 2 .*: an older copy of its disk: rebuilt fully' "$log"

# 4.
write_random "$c_uri" "$expected" $(( 16 * M )) "$M"
stop_replica 2
wait_until 30 status_check "$ctl" 'leg(2)["state"] != "uptodate"'
restart_replica 2
wait_until 60 status_check "$ctl" 'leg(2)["state"] == "uptodate"'
grep 'leg 2 .* is back: incremental resync' "$log"

# 5.
write_random "$c_uri" "$expected" $(( 24 * M )) "$M"
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
