#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A second stop signal while the controller stops cleanly under a
# connected client (handoff.c: the door is closed, the volume is
# stopping).  The volume's stop gave SIGTERM and SIGINT back to nbdkit
# first, so a SIGINT (a second Ctrl-C, say) or a SIGHUP arriving during
# the stop made nbdkit quit under it: nbdkit answered the client's next
# request ESHUTDOWN, ran the plugin's cleanup (a second engine_stop)
# concurrently, closing the legs under the first one's activity-log
# write: both legs were failed, and the next start recovered from a
# crash.  And the handoff took only SIGTERM and SIGINT, though nbdkit
# quits on SIGHUP and SIGQUIT too: a SIGHUP as the first signal let
# nbdkit quit under the client, answering its next write ESHUTDOWN.
# The stop is made to last by a delay filter on leg 1 (its metadata
# writes wait 1 s each); the second signal comes 0.5 s after the first.
# Asserted, for SIGTERM then SIGINT and SIGHUP then SIGQUIT: status 0,
# no assertion, no write answered ESHUTDOWN, no leg failed while
# stopping, no crash recovery at the next start, legs identical.

set -euo pipefail
source ./functions.sh
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires_nbdsh
requires jq --version
requires_filter delay

start_replica 0
start_replica 1 -- --filter=delay wdelay=1
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"

for pair in TERM:INT HUP:QUIT; do
  first=${pair%:*} second=${pair#*:}
  server_running c || restart_controller c
  wait_volume_state 60 "$ctl" healthy
  pid=$(server_pid c)
  "$NBDSH" -c "
import errno, os, signal, time
h = nbd.NBD()
h.connect_uri('$c_uri')
h.pwrite(bytearray([7]) * 4096, 0)
os.kill($pid, signal.SIG$first)
time.sleep(0.5)
state = open('/proc/$pid/stat').read().rsplit(') ', 1)[1][0]
assert state != 'Z', 'the stop ended before the second signal'
os.kill($pid, signal.SIG$second)
time.sleep(0.3)
try:
    h.pwrite(bytearray([8]) * 4096, 1 << 20)
    print('write after the second signal: answered done')
except nbd.Error as e:
    print('write after the second signal: %s' % e)
    assert e.errno not in ('ESHUTDOWN', errno.ESHUTDOWN), \
        'answered ESHUTDOWN: %s' % e
"

  expect_clean_exit c "SIG$first, SIG$second"
  expect_clean_restart c "$ctl" "SIG$first, SIG$second"
done
