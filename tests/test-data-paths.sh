#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Data integrity on each of the engine's data paths.  A leg's replies
# are read by the thread whose request waits for them when nobody else
# reads (it leads the poller: the default), by the poller thread alone
# (-D replicate.lead=0), or, leading, through libnbd instead of the
# engine's own wire (-D replicate.wire=0).  For each path a controller
# over three replicas takes fio's verified random writes from four jobs
# at queue depth 8 (threads follow, hand the poller on, take it back)
# and then from two jobs at queue depth 1 (each thread mostly leads);
# fio reads every block back through the controller and checks it.
# Then the oracle: the volume is healthy with no leg error, every leg
# equals what the controller returns, and a verify-only fio pass finds
# all of fio's data again.

source ./functions.sh
set -euo pipefail
set -x

requires_nbdinfo
requires fio --enghelp=nbd
requires python3 -c 'import json'

MiB=1048576

# check_fio JSON JOBS SIZE: every job finished without error, wrote SIZE
# bytes and read them back to verify.
check_fio ()
{
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
jobs, size = int(sys.argv[2]), int(sys.argv[3])
assert len(j["jobs"]) == jobs, j["jobs"]
for job in j["jobs"]:
    print("fio job: error %d, wrote %d, verified %d"
          % (job["error"], job["write"]["io_bytes"], job["read"]["io_bytes"]))
    assert job["error"] == 0, job["error"]
    assert job["write"]["io_bytes"] == size, job["write"]["io_bytes"]
    assert job["read"]["io_bytes"] == size, job["read"]["io_bytes"]
' "$@"
}

n=0
for debug in "" "-D replicate.lead=0" "-D replicate.wire=0"; do
  r=$(( 3 * n ))
  start_replica $(( r )) 40M
  start_replica $(( r + 1 )) 40M
  start_replica $(( r + 2 )) 40M
  uris=()
  for i in $r $(( r + 1 )) $(( r + 2 )); do
    uri_var=r${i}_uri
    uris+=("${!uri_var}")
  done
  name=c$n
  ctl=$tmpdir/$name.ctl
  # $debug is empty or one option and its value: split on purpose.
  # shellcheck disable=SC2086
  start_controller "$name" $debug "$PLUGIN" "${uris[@]}" control="$ctl"
  wait_volume_state 30 "$ctl" healthy
  case $debug in
    *wire=0) grep "connected, commands through libnbd" "$tmpdir/$name.log" ;;
    *) grep "connected, commands through the engine's wire" \
         "$tmpdir/$name.log" ;;
  esac
  uri_var=${name}_uri
  uri=${!uri_var}

  # Four jobs at depth 8 on [0, 32M), then two at depth 1 on [0, 16M)
  # with other data: the second pass overwrites half of the first.
  deep=(--name=deep --ioengine=nbd "--uri=$uri" --rw=randwrite
        --bsrange=4k-64k --size=8M --offset_increment=8M --numjobs=4
        --iodepth=8 --verify=crc32c --output-format=json)
  shallow=(--name=shallow --ioengine=nbd "--uri=$uri" --rw=randwrite
           --bsrange=4k-64k --size=8M --offset_increment=8M --numjobs=2
           --iodepth=1 --verify=crc32c
           --output-format=json)
  fio "${deep[@]}" --do_verify=1 --output="$tmpdir/deep.json"
  check_fio "$tmpdir/deep.json" 4 $(( 8 * MiB ))
  fio "${shallow[@]}" --do_verify=1 --output="$tmpdir/shallow.json"
  check_fio "$tmpdir/shallow.json" 2 $(( 8 * MiB ))

  # --- The oracle.
  test "$(nbdrep_status_get "$ctl" \
            '[l["state"] for l in s["legs"]].count("uptodate")')" -eq 3
  test "$(nbdrep_status_get "$ctl" \
            'sum(l["errors"] for l in s["legs"])')" -eq 0
  test "$(volume_state "$ctl")" = healthy
  "$NBDCOPY" --no-extents "$uri" "$tmpdir/disk.img"
  compare_legs "$tmpdir/disk.img" "${uris[@]}"
  fio "${shallow[@]}" --verify_only --output="$tmpdir/verify.json"
  check_fio "$tmpdir/verify.json" 2 $(( 8 * MiB ))
  stop_controller "$name"
  compare_legs "$tmpdir/disk.img" "${uris[@]}"
  rm -f "$tmpdir/disk.img"
  n=$(( n + 1 ))
done
