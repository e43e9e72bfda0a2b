#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Resync rate control (DESIGN.md section 7, nbdrep(1) set), on two
# 256 MiB file legs holding 128 MiB of data:
#
#  - the cap: with resync-rate=16M a full rebuild of leg 1 (256 MiB to
#    go over, holes included) is still syncing after 6 s and has done
#    no more than 16 MiB/s allows (plus the runs the lanes reserve
#    ahead), yet has made progress; `nbdrep set CTL resync-rate 0`
#    mid-way lets it finish within a few seconds (an unthrottled copy of
#    this volume takes well under 2 s here).
#  - the floor: with resync-rate=0 and resync-min-rate=8M, while fio
#    writes continuously through the controller, the rebuild runs at
#    about the floor (measured over 3 s: between 4 and 40 MiB/s); once
#    fio has stopped it runs faster than 40 MiB/s and finishes.  The
#    floor lowered to 1M at run time (`nbdrep set`) during a rebuild
#    under load slows it to about that (0.25 to 3 MiB/s over 2 s).
#  - a low cap (256 KiB/s: 4 s a 1 MiB run) lifted with `nbdrep set`
#    takes effect at once (the copy does not sleep out slots reserved
#    at the old rate), and removing a leg that syncs that slowly returns
#    at once.
#
# The assertions are generous (the machine is shared) but an
# unthrottled resync fails them.  After each rebuild the oracle: both
# legs equal what the controller serves.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires fio --enghelp=nbd
requires python3 -c 'import json'

MiB=1048576
ctl=$tmpdir/c.ctl
start_replica 0 256M
start_replica 1 256M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")

# 128 MiB of data: the first half of the volume.
fio --name=fill --ioengine=nbd "--uri=$c_uri" --rw=write --bs=1M \
  --size=128M --refill_buffers --output="$tmpdir/fill.txt"
"$NBDSH" -u "$c_uri" -c 'h.flush()'

# resync_done: print leg 1's resync progress as "DONE MICROSECONDS"
# (DONE is the volume size once it is uptodate again).
resync_done ()
{
  local json
  json=$(nbdrep_status_json "$ctl") || return 1
  python3 -c '
import json, sys
s = json.load(sys.stdin)
leg = s["legs"][1]
if leg["state"] == "uptodate":
    print(s["volume"]["size"], sys.argv[1])
elif leg["resync"] is not None:
    print(leg["resync"]["done"], sys.argv[1])
else:
    print(0, sys.argv[1])
' "$(now_us)" <<<"$json"
}

# rate_between DONE0 US0 DONE1 US1: print the rate in MiB/s between
# two samples of resync_done.
rate_between ()
{
  python3 -c '
import sys
d0, t0, d1, t1 = map(int, sys.argv[1:])
print("%.1f" % ((d1 - d0) / ((t1 - t0) / 1e6) / 1048576))
' "$@"
}

# oracle: both legs hold what the controller serves.
oracle ()
{
  "$NBDCOPY" --no-extents "$c_uri" "$tmpdir/disk.img"
  compare_legs "$tmpdir/disk.img" "$r0_uri" "$r1_uri"
}

# start_full_rebuild: rebuild leg 1 fully and wait until it syncs.
start_full_rebuild ()
{
  "$NBDREP" resync "$ctl" 1 --full
  wait_until 10 status_check "$ctl" "leg(1)['state'] == 'syncing' and
    leg(1)['resync'] is not None and leg(1)['resync']['total'] > 0"
  status_check "$ctl" "leg(1)['resync']['kind'] == 'full' and
    leg(1)['resync']['total'] == $size"
}

# --- The cap.
"$NBDREP" set "$ctl" resync-rate 16M
status_check "$ctl" "s['volume']['resync_rate'] == 16 * $MiB"
start=$(now_us)
start_full_rebuild
sleep 6
read -r d1 t1 < <(resync_done)
elapsed=$(( t1 - start ))
echo "cap: $d1 bytes in $elapsed us"
status_check "$ctl" "leg(1)['state'] == 'syncing'"
# At most 16 MiB/s since the request, plus the four 1 MiB runs the
# lanes may reserve ahead; at least a quarter of that.
test "$d1" -le $(( 16 * MiB * elapsed / 1000000 + 4 * MiB ))
test "$d1" -ge $(( 4 * MiB * elapsed / 1000000 ))
"$NBDREP" set "$ctl" resync-rate 0
t_set=$(now_us)
wait_leg_state 20 "$ctl" 1 uptodate
finish_us=$(( $(now_us) - t_set ))
echo "cap lifted: the remaining $(( size - d1 )) bytes took $finish_us us"
test "$finish_us" -lt 6000000
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'full' and
  leg(1)['last_resync']['bytes'] + leg(1)['last_resync']['zeroed'] == $size and
  leg(1)['last_resync']['bytes'] >= 128 * $MiB and
  s['volume']['state'] == 'healthy'"
oracle

# --- The floor under client load.
"$NBDREP" set "$ctl" resync-min-rate 8M
status_check "$ctl" "s['volume']['resync_rate'] == 0 and
  s['volume']['resync_min_rate'] == 8 * $MiB"

# load: fio writes continuously through the controller (a request every
# few ms) in the background (pid in fio_pid) until stop_load interrupts
# it, so that however slowly this machine runs the measures, the load
# lasts through them.
load ()
{
  local w
  w=$(nbdrep_status_get "$ctl" 's["legs"][0]["writes"]')
  fio --name=load --ioengine=nbd "--uri=$c_uri" --rw=randwrite --bs=64k \
    --size=64M --time_based --runtime=300 --rate=,4m \
    --output-format=json --output="$tmpdir/load.json" &
  fio_pid=$!
  wait_until 10 status_check "$ctl" "leg(0)['writes'] > $w + 10"
}

# stop_load: interrupt the load, which must have been running until
# now; fio stops writing at once but may take a while to exit.
stop_load ()
{
  kill -0 "$fio_pid"
  kill -INT "$fio_pid"
}

# end_load: after stop_load, wait for fio (it exits 128 on SIGINT,
# after its report), which must have seen no error.
end_load ()
{
  wait "$fio_pid" || true
  python3 -c '
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
print("load: %d bytes written, error %d" % (job["write"]["io_bytes"], job["error"]))
sys.exit(job["error"] != 0 or job["write"]["io_bytes"] == 0)
' "$tmpdir/load.json"
}

load
start_full_rebuild
sleep 0.5
read -r d0 t0 < <(resync_done)
sleep 3
read -r d1 t1 < <(resync_done)
loaded=$(rate_between "$d0" "$t0" "$d1" "$t1")
echo "under load: $loaded MiB/s"
python3 -c "import sys; r = float(sys.argv[1]); sys.exit(not 4 <= r <= 40)" \
  "$loaded"
status_check "$ctl" "leg(1)['state'] == 'syncing'"
# From the end of the load (timed from the interruption: fio stops
# writing at once but may take a while to exit), the rest goes much
# faster than the floor.
stop_load
read -r d2 t2 < <(resync_done)
test "$d2" -lt $(( size - 64 * MiB ))
end_load
wait_leg_state 20 "$ctl" 1 uptodate
idle=$(rate_between "$d2" "$t2" "$size" "$(now_us)")
echo "idle: $idle MiB/s"
python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 40)" "$idle"
status_check "$ctl" "leg(1)['last_resync']['kind'] == 'full' and
  s['volume']['state'] == 'healthy'"
oracle

# --- The floor lowered at run time, during a rebuild under load, to
# 1 MiB/s: the copy follows.
load
start_full_rebuild
"$NBDREP" set "$ctl" resync-min-rate 1M
sleep 0.5
read -r d0 t0 < <(resync_done)
sleep 2
read -r d1 t1 < <(resync_done)
slow=$(rate_between "$d0" "$t0" "$d1" "$t1")
echo "floor 1M under load: $slow MiB/s"
python3 -c "import sys; r = float(sys.argv[1]); sys.exit(not 0.25 <= r <= 3)" \
  "$slow"
stop_load
end_load
wait_leg_state 20 "$ctl" 1 uptodate

# --- A low cap takes effect both ways at once.  At 256 KiB/s a 1 MiB
# run is 4 s: lifting the cap must not leave the copy asleep on slots
# reserved at the old rate.
"$NBDREP" set "$ctl" resync-rate 256K
start_full_rebuild
wait_until 10 status_check "$ctl" "leg(1)['resync']['done'] > 0"
"$NBDREP" set "$ctl" resync-rate 0
t_set=$(now_us)
wait_leg_state 30 "$ctl" 1 uptodate
finish_us=$(( $(now_us) - t_set ))
echo "low cap lifted: finished $finish_us us later"
test "$finish_us" -lt 5000000
oracle

# Removing a leg that syncs slowly returns at once, and the control
# socket answers meanwhile.
"$NBDREP" set "$ctl" resync-rate 256K
start_full_rebuild
wait_until 10 status_check "$ctl" "leg(1)['resync']['done'] > 0"
t0=$(now_us)
NBDREP_TIMEOUT=30 "$NBDREP" remove "$ctl" 1
remove_us=$(( $(now_us) - t0 ))
echo "remove of the syncing leg took $remove_us us"
test "$remove_us" -lt 3000000
status_check "$ctl" "leg(1)['state'] == 'removed' and
  leg(1)['resync'] is None and s['volume']['uptodate'] == 1"
