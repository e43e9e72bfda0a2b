#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A pull-ahead is caught up from the leg's bitmap, not by copying the
# whole volume (DESIGN.md section 14: "records the skipped chunks in its
# bitmap and catches up by resync"; claim 3).  On a new volume (the
# asynchronous leg joins with a full resync), 24M of data is written
# and flushed and the leg catches up; then its server is paused and a
# 6M burst overflows the 4M buffer: the leg pulls ahead.  Its catch-up
# must be an incremental resync of about the burst (under 12M), and the
# leg must then equal the synchronous legs.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter pause

ctl=$tmpdir/c.ctl
pause=$tmpdir/r2.pause
expected=$tmpdir/expected
M=$(( 1024 * 1024 ))

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M -- --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=4M async-full=pull-ahead control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"

# 24M of data, in 1M writes the buffer takes one at a time.
for i in $(seq 0 23); do
  write_random "$c_uri" "$expected" $(( i * M )) "$M"
done
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] == 0'

# The burst: 96 writes of 64K with the server paused.
pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os
with open('$expected', 'r+b') as f:
    for i in range(96):
        buf = os.urandom(65536)
        h.pwrite(buf, 8 * $M + i * 65536)
        f.seek(8 * $M + i * 65536)
        f.write(buf)
    h.flush()
"
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] == 1'
resume_replica "$pause"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["pull_aheads"] == 1 and leg(2)["last_resync"]["bytes"] > 0'
grep 'leg 2: stale -> syncing' "$tmpdir/c.log"
status_check "$ctl" \
  'leg(2)["last_resync"]["kind"] == "incremental" and leg(2)["last_resync"]["bytes"] < 12 * 1024 * 1024'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
