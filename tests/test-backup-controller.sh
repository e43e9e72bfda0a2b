#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The controller's side of backups (backup-begin and backup-end on the
# control socket; common/replication/background/backup.c), driven by a
# raw control connection (control-session.py) kept open as nbdrep backup
# keeps it:
#
#  - three 64 MiB file legs: backup-begin holds leg 2 out as a
#    point-in-time source (stale, hold "backup", the volume degraded);
#    writes go on without it; its data area read directly equals the
#    volume at the begin; a second backup, removing or resyncing the held
#    leg are refused; backup-end done: leg 2 resyncs exactly the 5 chunks
#    written meanwhile, and the token becomes backup_base;
#  - changed-block tracking: the next backup-begin with that base
#    returns exactly the chunks written since the first one began (also
#    those written during it), as merged byte ranges; a failed end keeps
#    them (plus newer ones) for the next try, as does a client that
#    drops its connection mid-backup; an unknown base gets null
#    (read everything);
#  - a crash (kill -9 of the controller) during a backup: after the
#    restart the held leg resyncs, no base is recorded, and the next
#    backup reads everything;
#  - one leg: a live backup (leg null, the leg's URI as source, the
#    reason given); with max-legs=2 the tracker's slot is given to an
#    added leg (which syncs fully) and the base is forgotten; nbdrep
#    inspect names the tracker slot.
#
# After every step the oracle: every uptodate leg equals what the client
# wrote.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/admin-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

KiB=1024
MiB=1048576
ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" 64M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
  control="$ctl" timeout=5
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
uuid=$(nbdrep_status_get "$ctl" 's["volume"]["uuid"]')
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))
wait_until 30 status_check "$ctl" "s['volume']['activity_log']['hot'] == 0"

# oracle LEGS...: the data areas of the legs equal what was written.
oracle ()
{
  compare_legs "$tmpdir/expected" "$@"
}

# --- A point-in-time backup: leg 2 held.
session_open
r=$(session_ask '{"cmd":"backup-begin","base":null}')
reply_check "$r" "r['ok'] and r['consistency'] == 'point-in-time' and
  r['leg'] == 2 and r['source'] == '$r2_uri' and r['changed'] is None and
  r['volume'] == '$uuid' and r['size'] == $size and r['chunk'] == 65536 and
  len(r['token']) == 32"
t1=$(reply_get "$r" token)
status_check "$ctl" "leg(2)['state'] == 'stale' and leg(2)['hold'] == 'backup'
  and leg(0)['hold'] is None and s['volume']['state'] == 'degraded' and
  s['volume']['backup']['token'] == '$t1' and
  s['volume']['backup']['leg'] == 2 and
  s['volume']['backup']['consistency'] == 'point-in-time' and
  s['volume']['backup_base'] is None"
cp "$tmpdir/expected" "$tmpdir/pit"
# Writes go on without it: 256 KiB at 4 MiB (4 chunks), 64 KiB at 40 MiB.
write_random "$c_uri" "$tmpdir/expected" $(( 4 * MiB )) $(( 256 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 40 * MiB )) $(( 64 * KiB ))
compare_legs "$tmpdir/pit" "$r2_uri"
oracle "$r0_uri" "$r1_uri"
# Refusals while it runs.
r=$(ask_once '{"cmd":"backup-begin","base":null}')
reply_check "$r" "not r['ok'] and r['error'] ==
  'a backup is already running (token $t1)'"
expect_refusal 1 "leg 2 cannot be removed: it is the source of a running backup" \
  remove "$ctl" 2
expect_refusal 1 "leg 2 is the source of a running backup" resync "$ctl" 2
r=$(session_ask '{"cmd":"backup-end","token":"0123","result":"done"}')
reply_check "$r" "not r['ok'] and r['error'] == 'no running backup has token 0123'"
status_check "$ctl" "leg(2)['state'] == 'stale' and leg(2)['hold'] == 'backup'"
# Done: leg 2 catches up with exactly what it missed.
r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$t1\",\"result\":\"done\",\"name\":\"first\"}")
reply_check "$r" "r['ok']"
session_close
wait_leg_state 30 "$ctl" 2 uptodate
status_check "$ctl" "leg(2)['hold'] is None and s['volume']['backup'] is None
  and s['volume']['backup_base'] == '$t1' and
  leg(2)['last_resync']['kind'] == 'incremental' and
  leg(2)['last_resync']['bytes'] + leg(2)['last_resync']['zeroed'] == 5 * 65536"
oracle "$r0_uri" "$r1_uri" "$r2_uri"

# --- Changed blocks since the first backup began.
write_random "$c_uri" "$tmpdir/expected" $(( MiB + 8 * KiB )) $(( 4 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 20 * MiB )) $(( 128 * KiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 60 * MiB + 4 * KiB )) $(( 4 * KiB ))
since_t1="[[$MiB, 65536], [$(( 4 * MiB )), 262144], [$(( 20 * MiB )), 131072],
  [$(( 40 * MiB )), 65536], [$(( 60 * MiB )), 65536]]"
session_open
r=$(session_ask "{\"cmd\":\"backup-begin\",\"base\":\"$t1\"}")
reply_check "$r" "r['ok'] and r['changed'] == $since_t1"
t2=$(reply_get "$r" token)
# Failed: the changes stay for the next backup.  The held leg was
# flushed when it was taken out, so although the writes above were
# still hot in the activity log it resyncs nothing.
r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$t2\",\"result\":\"failed\"}")
reply_check "$r" "r['ok']"
session_close
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "s['volume']['backup_base'] == '$t1' and
  leg(2)['last_resync']['kind'] == 'incremental' and
  leg(2)['last_resync']['bytes'] + leg(2)['last_resync']['zeroed'] == 0"
write_random "$c_uri" "$tmpdir/expected" $(( 30 * MiB )) $(( 4 * KiB ))
since_t1="[[$MiB, 65536], [$(( 4 * MiB )), 262144], [$(( 20 * MiB )), 131072],
  [$(( 30 * MiB )), 65536], [$(( 40 * MiB )), 65536], [$(( 60 * MiB )), 65536]]"
# A client that goes away mid-backup: failed, too.
session_open
r=$(session_ask "{\"cmd\":\"backup-begin\",\"base\":\"$t1\"}")
reply_check "$r" "r['ok'] and r['changed'] == $since_t1"
write_random "$c_uri" "$tmpdir/expected" $(( 50 * MiB )) $(( 4 * KiB ))
session_close
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "s['volume']['backup'] is None and
  s['volume']['backup_base'] == '$t1'"
oracle "$r0_uri" "$r1_uri" "$r2_uri"
since_t1="[[$MiB, 65536], [$(( 4 * MiB )), 262144], [$(( 20 * MiB )), 131072],
  [$(( 30 * MiB )), 65536], [$(( 40 * MiB )), 65536], [$(( 50 * MiB )), 65536],
  [$(( 60 * MiB )), 65536]]"
# A base the controller does not know: everything must be read.
session_open
r=$(session_ask '{"cmd":"backup-begin","base":"00000000000000000000000000000000"}')
reply_check "$r" "r['ok'] and r['changed'] is None"
t3=$(reply_get "$r" token)
r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$t3\",\"result\":\"failed\"}")
session_close
r=$(ask_once "{\"cmd\":\"backup-begin\",\"base\":\"$t1\"}")
reply_check "$r" "r['ok'] and r['changed'] == $since_t1"
# (ask_once closed its connection: that backup failed.)
wait_volume_state 30 "$ctl" healthy
status_check "$ctl" "s['volume']['backup'] is None"

# --- A crash during a backup.
session_open
r=$(session_ask "{\"cmd\":\"backup-begin\",\"base\":\"$t1\"}")
reply_check "$r" "r['ok'] and r['leg'] == 2"
write_random "$c_uri" "$tmpdir/expected" $(( 10 * MiB )) $(( 64 * KiB ))
kill_controller c
session_close || true
restart_controller c
wait_volume_state 60 "$ctl" healthy
status_check "$ctl" "s['volume']['backup'] is None and
  s['volume']['backup_base'] is None and
  leg(2)['last_resync']['kind'] == 'incremental'"
oracle "$r0_uri" "$r1_uri" "$r2_uri"
r=$(ask_once "{\"cmd\":\"backup-begin\",\"base\":\"$t1\"}")
reply_check "$r" "r['ok'] and r['changed'] is None"
wait_volume_state 30 "$ctl" healthy
oracle "$r0_uri" "$r1_uri" "$r2_uri"
stop_controller c

# --- One leg: live.  max-legs=2: the tracker's slot goes to a new leg.
start_replica 3 64M
start_replica 4 64M
ctl=$tmpdir/d.ctl
start_controller d "$PLUGIN" "$r3_uri" control="$ctl" max-legs=2
wait_volume_state 30 "$ctl" healthy
session_open
r=$(session_ask '{"cmd":"backup-begin","base":null}')
reply_check "$r" "r['ok'] and r['consistency'] == 'live' and r['leg'] is None
  and r['source'] == '$r3_uri' and r['why_live'] == 'only one leg is uptodate'"
t4=$(reply_get "$r" token)
status_check "$ctl" "s['volume']['state'] == 'healthy' and
  s['volume']['backup']['consistency'] == 'live' and
  s['volume']['backup']['leg'] is None"
r=$(session_ask "{\"cmd\":\"backup-end\",\"token\":\"$t4\",\"result\":\"done\"}")
reply_check "$r" "r['ok']"
session_close
status_check "$ctl" "s['volume']['backup_base'] == '$t4'"
"$NBDREP" inspect "$r3_uri" >"$tmpdir/inspect"
cat "$tmpdir/inspect"
grep -Eq '^ *1 +tracker,base +.*changed blocks for backups' "$tmpdir/inspect"
test "$("$NBDREP" add "$ctl" "$r4_uri")" = 1
wait_leg_state 30 "$ctl" 1 uptodate
status_check "$ctl" "s['volume']['backup_base'] is None and
  leg(1)['slot'] == 1 and leg(1)['last_resync']['kind'] == 'full'"
new_expected "$tmpdir/expected" "$d_uri"
compare_legs "$tmpdir/expected" "$r3_uri" "$r4_uri"
