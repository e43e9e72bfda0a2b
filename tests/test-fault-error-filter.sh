#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Legs that return errors (nbdkit's error filter in front of stock
# replicas): a write that fails on one of three legs with EIO, then in a
# second round with ENOSPC, is acknowledged without error, fails that
# leg (last_error names the write and the error), and once the errors
# stop the leg comes back by an incremental resync; an EINVAL returned
# alike by every leg goes to the client and fails no leg; the last
# uptodate leg is not failed for a read error, the client gets EIO.
# After each round the oracle: every uptodate leg equals what the client
# wrote.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter error
requires python3 -c 'import json'

# --- Three legs; r1 fails writes with EIO while $tmpdir/err1 exists,
# r2 with ENOSPC while $tmpdir/err2 exists.
ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0
start_replica 1 -- --filter=error error=EIO error-pwrite-rate=100% \
  error-file="$tmpdir/err1"
start_replica 2 -- --filter=error error=ENOSPC error-pwrite-rate=100% \
  error-file="$tmpdir/err2"
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 4194304
compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"

# fail_one_leg INDEX ERRFILE STRERROR OFFSET: make leg INDEX fail writes,
# write through the controller (no error), check that the leg failed for
# that write, write more while it is away, let it come back and check
# that it resynced incrementally and that all legs hold the data.
fail_one_leg ()
{
  local i=$1 errfile=$2 strerror=$3 off=$4
  local errors_before
  errors_before=$(nbdrep_status_get "$ctl" \
    "next(l['errors'] for l in s['legs'] if l['index'] == $i)")
  touch "$errfile"
  write_random "$c_uri" "$expected" "$off" 262144
  status_check "$ctl" "leg($i)['state'] == 'failed' and
    'write' in leg($i)['last_error'] and
    '$strerror' in leg($i)['last_error'] and
    leg($i)['errors'] > $errors_before and
    s['volume']['state'] == 'degraded' and s['volume']['uptodate'] == 2"
  # More writes while the leg is away: they must reach it by resync.
  write_random "$c_uri" "$expected" $(( off + 8388608 )) 1048576
  rm "$errfile"
  wait_leg_state 30 "$ctl" "$i" uptodate
  wait_volume_state 30 "$ctl" healthy
  status_check "$ctl" "leg($i)['last_resync']['kind'] == 'incremental' and
    0 < leg($i)['last_resync']['bytes'] < s['volume']['size'] and
    leg($i)['last_error'] is None"
  compare_legs "$expected" "$r0_uri" "$r1_uri" "$r2_uri"
}

# --- Round 1: EIO on leg 1.  Round 2: ENOSPC on leg 2.
fail_one_leg 1 "$tmpdir/err1" 'Input/output error' 20971520
fail_one_leg 2 "$tmpdir/err2" 'No space left on device' 41943040
