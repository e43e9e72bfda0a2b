#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# kill -9 of a replica under load: fio (nbd engine, two jobs of random
# 4k..64k writes, 32 MiB each, then a crc32c verify pass) runs against
# a three-leg controller with timeout=2; half-way through, replica 2 is
# killed and the controller fails it; it is restarted while fio still
# writes and resyncs incrementally under the load (slowed at first so
# that the syncing state is seen).  fio must finish without any error
# and verify all it wrote.  Then the oracle: the disk read through the
# controller (which fio verified) equals every leg, and a verify-only fio
# pass after the resync finds all of fio's data again.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdinfo
requires fio --enghelp=nbd
requires python3 -c 'import json'

MiB=1048576
ctl=$tmpdir/c.ctl
start_replica 0 80M
start_replica 1 80M
start_replica 2 80M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
test "$("$NBDINFO" --size "$c_uri")" -ge $(( 64 * MiB ))

# Job i writes [i * 32M, (i + 1) * 32M) once, in random order, at
# 4 MiB/s (about 8 s), then reads it all back and checks every block.
fio_args=(--name=fault --ioengine=nbd "--uri=$c_uri" --rw=randwrite
          --bsrange=4k-64k --size=32M --offset_increment=32M --numjobs=2
          --verify=crc32c --output-format=json)

# check_fio JSON: both jobs finished without error, wrote 32 MiB each
# (a verify-only pass counts the writes it replays) and read 32 MiB each
# to verify it.
check_fio ()
{
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["jobs"]) == 2, j["jobs"]
for job in j["jobs"]:
    written = job["write"]["io_bytes"]
    read = job["read"]["io_bytes"]
    print("fio job: error %d, wrote %d, verified %d"
          % (job["error"], written, read))
    assert job["error"] == 0, job["error"]
    assert written == 32 << 20, written
    assert read == 32 << 20, read
' "$1"
}

fio "${fio_args[@]}" --do_verify=1 --rate=,4m --output="$tmpdir/fio.json" &
fio_pid=$!

# Half-way through the writes (leg 2 took 16 MiB of the 64), kill leg 2.
wait_until 30 status_check "$ctl" "leg(2)['bytes_written'] >= 16 * $MiB"
kill_replica 2
wait_leg_state 10 "$ctl" 2 failed
status_check "$ctl" "s['volume']['state'] == 'degraded' and
  leg(2)['last_error'] is not None"
# Restart it while fio goes on; the resync is slow until it is seen.
"$NBDREP" set "$ctl" resync-rate 2M
restart_replica 2
wait_until 30 status_check "$ctl" "leg(2)['state'] == 'syncing' and
  leg(2)['resync'] is not None and leg(2)['resync']['total'] > 0"
status_check "$ctl" "leg(2)['resync']['kind'] == 'incremental' and
  leg(2)['resync']['done'] < leg(2)['resync']['total']"
"$NBDREP" set "$ctl" resync-rate 0

fio_rc=0
wait "$fio_pid" || fio_rc=$?
cat "$tmpdir/fio.json"
test "$fio_rc" -eq 0
check_fio "$tmpdir/fio.json"

wait_leg_state 60 "$ctl" 2 uptodate
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "leg(2)['last_resync']['kind'] == 'incremental'"

# --- The oracle.
"$NBDCOPY" --no-extents "$c_uri" "$tmpdir/disk.img"
compare_legs "$tmpdir/disk.img" "$r0_uri" "$r1_uri" "$r2_uri"
fio "${fio_args[@]}" --verify_only --output="$tmpdir/fio-verify.json"
check_fio "$tmpdir/fio-verify.json"
