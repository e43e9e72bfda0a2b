#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# An asynchronous leg added and removed online (nbdrep add --async,
# nbdrep remove), as nbdrep shows it (status table, JSON, metrics), and
# in the filter shape (leg 0 the local plugin, async=URI a replica):
#   1. a two-leg volume with data; nbdrep add --async adds leg 2, which
#      joins by a full copy and then replicates; the volume stays
#      healthy (an asynchronous leg does not count);
#   2. writes and a flush: the leg holds them (the oracle compares it);
#   3. status and metrics show it; its server killed: the volume stays
#      healthy, writes go on, the leg is "failed"; restarted: it
#      catches up and equals the others again;
#   4. nbdrep remove 2: removed, the volume healthy;
#   5. the filter shape with async=URI: the same oracle.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
size=$(stat -c %s "$expected")
write_random "$c_uri" "$expected" 0 $(( 1024 * 1024 ))

# 1.
index=$("$NBDREP" add "$ctl" --async "$r2_uri")
[ "$index" = 2 ]
wait_until 60 status_check "$ctl" 'leg(2)["async"]["state"] == "replicating"'
status_check "$ctl" 's["volume"]["state"] == "healthy" and leg(2)["state"] == "syncing"'

# 2.
write_random "$c_uri" "$expected" $(( 5 * 1024 * 1024 )) 65536
wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# 3.
"$NBDREP" status "$ctl" | tee "$tmpdir/status.txt" || :
grep -q 'async replicating, lag' "$tmpdir/status.txt"
"$NBDREP" metrics "$ctl" > "$tmpdir/metrics.txt"
grep -q '^nbdkit_replicate_leg_async_state{leg="2",state="replicating"} 1' \
  "$tmpdir/metrics.txt"
grep -q '^nbdkit_replicate_leg_async_lag_seconds{leg="2"} ' "$tmpdir/metrics.txt"
kill_replica 2
write_random "$c_uri" "$expected" $(( 9 * 1024 * 1024 )) 65536
wait_until 30 status_check "$ctl" 'leg(2)["async"]["state"] == "failed"'
status_check "$ctl" 's["volume"]["state"] == "healthy"'
write_random "$c_uri" "$expected" $(( 11 * 1024 * 1024 )) 65536
restart_replica 2
wait_until 90 status_check "$ctl" \
  'leg(2)["async"]["state"] == "replicating" and leg(2)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"

# 4.
"$NBDREP" remove "$ctl" 2
wait_until 30 status_check "$ctl" 'leg(2)["state"] == "removed"'
status_check "$ctl" 's["volume"]["state"] == "healthy"'
stop_controller c

# 5.  The filter shape.
rm -f "$tmpdir"/r[0-3].img
start_replica 3 32M
truncate -s 32M "$tmpdir/local.img"
start_controller f --filter="$FILTER" file "$tmpdir/local.img" \
  async="$r3_uri" control="$ctl"
wait_until 60 status_check "$ctl" 'leg(1)["async"]["state"] == "replicating"'
new_expected "$expected" "$f_uri"
write_random "$f_uri" "$expected" $(( 3 * 1024 * 1024 )) $(( 512 * 1024 ))
wait_until 60 status_check "$ctl" 'leg(1)["async"]["lag_bytes"] == 0'
compare_legs "$expected" "$f_uri" "$r3_uri"
cmp -n "$(stat -c %s "$expected")" "$expected" "$tmpdir/local.img"
