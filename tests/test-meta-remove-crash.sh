#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A controller crash inside the generation bump of nbdrep remove
# (admin_remove_leg, slots_release in slots.c, metaio_bump): the new
# superblock, with the removed leg's slot free, has reached some legs
# and not others.  From the moment the leg is retired until the bump is
# recorded, writes go on to the other legs but are not acknowledged
# (member_change_begin), and the slot, still assigned in memory, keeps
# its bitmap pages written before the activity log lets their extents
# go.  So after a kill -9, whichever superblock the legs hold: every
# acknowledged write reads back, every uptodate leg is identical, and
# the removed leg, still on the command line (a unit not updated), is
# uptodate again only through a resync that gives it every acknowledged
# write: fully once a superblock the election takes says its slot is
# free, from its own slot's bitmap while none does.
#
# Three file legs behind the faultinject filter; leg 2 is removed each
# time.  The superblock writes of the bump are held (refused after 60 s)
# on the replicas named; the other legs take the new superblock.  While
# held, a write W goes to legs 0 and 1 and must not be acknowledged,
# and the test waits 2.5 s (a cooling pass of the activity log); then
# kill -9, and the held replicas are killed too (their superblock
# writes never land).
#   1. Leg 2 uptodate, leg 0 takes the new superblock, leg 1's held.
#      Restart with legs 0, 1 and 2: leg 2 is rebuilt fully.
#   2. Leg 2 failed (its replica down) and missing write D; the
#      superblock held on legs 0 and 1 both.  The removal comes while a
#      cooling pass that will let D's extent go is held
#      (-D replicate.cool_pause) before it writes the bitmap pages: it
#      must still write leg 2's, D in them.  Restart with legs 0 and 1
#      (write E), then with legs 0, 1 and 2: leg 2 is resynced from its
#      slot (the removal was never recorded) and holds D and E.  (Slot
#      cleared before the bump, slots.c: leg 2 came back uptodate
#      without D.)
#   3. Leg 2 failed again, missing another write D; leg 1 takes the
#      new superblock and leg 0's is held.  Restart with legs 0, 1 and
#      2: leg 2 is rebuilt fully.
# After each restart the oracle: through the controller and on every
# leg, exactly what was acknowledged; W, never acknowledged, old or new
# alike on every leg.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires jq --version

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
log=$tmpdir/c.log
M=$(( 1024 * 1024 ))
W_LEN=65536
cooled=                 # crash_in_remove waits for a cooling pass first

for i in 0 1 2; do
  start_replica "$i" 16M -- --filter="$FAULTINJECT" \
    rules="$tmpdir/r$i.rules" log="$tmpdir/r$i.faults"
done

# landed_on OFFSET BYTE FILE...: wait until each image FILE holds
# W_LEN bytes BYTE at OFFSET.
landed_on ()
{
  python3 - "$@" <<EOF
import sys, time
off, byte = int(sys.argv[1]), int(sys.argv[2])
for f in sys.argv[3:]:
    deadline = time.monotonic() + 20
    while True:
        with open(f, 'rb') as fh:
            fh.seek(off)
            if fh.read($W_LEN) == bytes([byte]) * $W_LEN:
                break
        if time.monotonic() > deadline:
            sys.exit('the write at %d never landed in %s' % (off, f))
        time.sleep(0.02)
EOF
}

# lines_above PATTERN N: has the controller's log more than N lines
# matching PATTERN?
lines_above ()
{
  [ "$(grep -c "$1" "$log" || :)" -gt "$2" ]
}

# sb_is URI GEN ASSIGNED: leg URI's superblock holds generation GEN
# (counter) and slot $slot assigned (True) or free (False).
sb_is ()
{
  "$NBDREP" inspect --json "$1" | python3 -c "
import json, sys
j = json.load(sys.stdin)
gen = j['superblock']['generation']['counter']
assigned = j['slots'][$slot]['assigned']
print('$1: generation %d, slot $slot assigned: %s' % (gen, assigned))
if gen != $2 or assigned != $3:
    sys.exit('expected generation $2, slot $slot assigned: $3')
"
}

# crash_in_remove OFFSET BYTE HELD...: remove leg 2 with the bump's
# superblock writes held on the replicas HELD (the others take it);
# meanwhile write W (W_LEN bytes BYTE at OFFSET), which lands on legs 0
# and 1 and must not be acknowledged; kill -9 the controller, then the
# held replicas, which start again with no rules.  Legs 0 and 1 then
# hold the generation before the bump with leg 2's slot (slot) assigned,
# or the bump's with it free.
crash_in_remove ()
{
  local off=$1 byte=$2 i rmpid wpid rc gen uri
  shift 2
  gen=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')
  slot=$(nbdrep_status_get "$ctl" \
    'next(l["slot"] for l in s["legs"] if l["index"] == 2)')
  for i in "$@"; do
    fault_arm "$tmpdir/r$i.rules" \
      "id=sb op=write range=-8K- phase=refuse error=EIO delay=60 count=1"
  done
  "$NBDREP" remove "$ctl" 2 >"$tmpdir/remove.out" 2>&1 &
  rmpid=$!
  for i in "$@"; do fault_wait "$tmpdir/r$i.faults" sb; done
  "$NBDSH" -u "$c_uri" -c "
try:
    buf = bytes([$byte]) * $W_LEN
    h.pwrite(buf, $off)
except nbd.Error as e:
    print('W not acknowledged: %s' % e)
else:
    print('W acknowledged')
    with open('$expected', 'r+b') as f:
        f.seek($off)
        f.write(buf)
" >"$tmpdir/w.out" 2>&1 &
  wpid=$!
  landed_on "$off" "$byte" "$tmpdir/r0.img" "$tmpdir/r1.img"
  if [ -n "$cooled" ]; then
    wait_until 30 lines_above 'activity log cooling: pause over' "$cooled"
    cooled=
  fi
  sleep 2.5                     # a cooling pass of the activity log
  kill_controller c
  rc=0; wait "$rmpid" || rc=$?
  cat "$tmpdir/remove.out"
  [ "$rc" -ne 0 ]               # the removal was never answered
  wait "$wpid" || true
  cat "$tmpdir/w.out"
  grep -q 'W not acknowledged' "$tmpdir/w.out"
  for i in 0 1 2; do fault_clear "$tmpdir/r$i.rules"; done
  for i in "$@"; do
    kill_replica "$i"
    restart_replica "$i"
  done
  for i in 0 1; do
    case " $* " in
      *" $i "*) uri=r${i}_uri; sb_is "${!uri}" "$gen" True ;;
      *) uri=r${i}_uri; sb_is "${!uri}" $(( gen + 1 )) False ;;
    esac
  done
  mv "$log" "$tmpdir/c.crashed.log"
}

# settle_w OFFSET BYTE: W was not acknowledged: the volume holds it or
# not, as it likes; the oracle then wants it on every leg alike.
settle_w ()
{
  "$NBDSH" -u "$c_uri" -c "
buf = h.pread($W_LEN, $1)
with open('$expected', 'r+b') as f:
    f.seek($1)
    if buf == bytes([$2]) * $W_LEN:
        f.write(buf)
        print('W was kept')
    elif buf == f.read($W_LEN):
        print('W was dropped')
    else:
        raise SystemExit('neither W nor what was there before at $1')
"
}

# 1.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=30
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$M"
crash_in_remove $(( 8 * M )) 171 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "full"'
settle_w $(( 8 * M )) 171
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c

# 2.
start_controller c -D replicate.cool_pause=3000 "$PLUGIN" "$r0_uri" \
  "$r1_uri" "$r2_uri" control="$ctl" timeout=30
wait_volume_state 30 "$ctl" healthy
kill_replica 2
write_random "$c_uri" "$expected" $(( 2 * M )) "$M"          # D
wait_leg_state 30 "$ctl" 2 failed
n=$(grep -c 'activity log cooling: pausing' "$log" || :)
wait_until 30 lines_above 'activity log cooling: pausing' "$n"
cooled=$(grep -c 'activity log cooling: pause over' "$log" || :)
crash_in_remove $(( 4 * M )) 172 0 1
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
settle_w $(( 4 * M )) 172
write_random "$c_uri" "$expected" $(( 6 * M )) "$M"          # E
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
stop_controller c
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
status_check "$ctl" 'leg(2)["last_resync"] is not None'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c

# 3.
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=30
wait_volume_state 30 "$ctl" healthy
kill_replica 2
write_random "$c_uri" "$expected" $(( 3 * M )) "$M"          # D
wait_leg_state 30 "$ctl" 2 failed
crash_in_remove $(( 10 * M )) 173 0
restart_replica 2
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
status_check "$ctl" 'leg(2)["last_resync"]["kind"] == "full"'
settle_w $(( 10 * M )) 173
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri" "$r2_uri"
