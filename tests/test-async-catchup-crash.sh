#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg caught in the middle of its catch-up: its server
# killed and restarted during the catch-up, then the controller killed
# (SIGKILL) during the next one.  The inconsistent leg must never be
# promoted (prefer=2 force=true with the synchronous legs gone is
# refused), and once the synchronous legs are back the restart costs an
# incremental resync only, after which the leg equals them (DESIGN.md
# section 14; claims 2, 3 and 5).
#   1. The leg's server is paused and a burst overflows the 1M buffer:
#      the leg pulls ahead, 8M marked in its bitmap; resync-rate=1M
#      makes the catch-up take seconds.
#   2. During the catch-up its server is killed and started again: the
#      leg catches up again from its bitmap.
#   3. During that catch-up the controller is killed.
#   4. Synchronous legs unreachable: prefer=2 force=true is refused.
#   5. Normal start: healthy, the leg replicates again after an
#      incremental resync, and holds every write.

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
# -t 1: see test-async-stop-behind.sh (nbdkit 1.32 aborts when a client
# hangs up while two threads send replies, as when the pause ends after
# the controller was killed).
start_replica 2 32M -- -t 1 --filter=pause pause-control="$pause"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M resync-rate=1M control="$ctl"
wait_volume_state 30 "$ctl" healthy
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")

# 1.
pause_replica "$pause"
"$NBDSH" -u "$c_uri" -c "
import os
with open('$expected', 'r+b') as f:
    for i in range(128):
        buf = os.urandom(65536)
        h.pwrite(buf, i * 65536)
        f.seek(i * 65536)
        f.write(buf)
    h.flush()
"
status_check "$ctl" 'leg(2)["async"]["pull_aheads"] == 1'
resume_replica "$pause"
wait_until 30 status_check "$ctl" 'leg(2)["async"]["state"] == "catching-up"'

# 2.
sleep 2
kill_replica 2
write_random "$c_uri" "$expected" $(( 20 * M )) 65536
restart_replica 2
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "catching-up" and leg(2)["resync"]["done"] < leg(2)["resync"]["total"]'

# 3.
sleep 2
write_random "$c_uri" "$expected" $(( 21 * M )) 65536
status_check "$ctl" 'leg(2)["async"]["state"] == "catching-up"'
kill_controller c

# 4.
stop_replica 0
stop_replica 1
if start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
     control="$ctl" prefer=2 force=true wait=2; then
  echo "$0: an asynchronous leg caught in its catch-up was promoted"
  exit 1
fi
grep -i 'inconsistent' "$tmpdir/c.log"

# 5.
restart_replica 0
restart_replica 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
  async-buffer=1M control="$ctl"
wait_volume_state 30 "$ctl" healthy
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
wait_until 60 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["last_resync"] is not None'
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "incremental"'
"$NBDSH" -u "$c_uri" -c 'h.flush()'
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$r2_uri"
