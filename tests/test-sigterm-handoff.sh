#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A clean stop (SIGTERM) hands the NBD clients over (handoff.c): nbdkit
# answers the requests it reads once it quits with ESHUTDOWN, which the
# kernel's NBD client turns into I/O errors; the controller closes its
# client connections first, unanswered, as a kill would, so that a
# kernel device attached by nbdrep attach sends them again to the next
# controller.  A client has a write in flight (held 2 s by a delay
# filter on a leg) when the controller gets SIGTERM, then sends another
# write: neither may be answered with ESHUTDOWN (each ends with the
# connection), the controller still stops cleanly (status 0, an empty
# activity log: the next start copies nothing) and the legs are
# identical.  Without the handoff the second write is answered
# ESHUTDOWN.

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
start_replica 1 -- --filter=delay wdelay=2
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
pid=$(server_pid c)

"$NBDSH" -c "
import errno, os, signal, time
h = nbd.NBD()
h.connect_uri('$c_uri')
buf = bytearray(b'x' * 65536)
first = h.aio_pwrite(buf, 0)
time.sleep(0.5)
os.kill($pid, signal.SIGTERM)
time.sleep(0.5)
try:
    h.pwrite(buf, 1048576)
    raise Exception('a write sent after SIGTERM was answered: success')
except nbd.Error as e:
    assert e.errno not in ('ESHUTDOWN', errno.ESHUTDOWN), 'answered ESHUTDOWN: %s' % e
    print('second write: %s' % e)
try:
    while not h.aio_command_completed(first):
        h.poll(-1)
    print('first write: answered before the connection ended')
except nbd.Error as e:
    assert e.errno not in ('ESHUTDOWN', errno.ESHUTDOWN), 'answered ESHUTDOWN: %s' % e
    print('first write: %s' % e)
"

# The stop was clean: status 0, and no recovery at the next start.  (The
# process ends with _exit after the volume's stop: no sanitizer runtime
# runs its exit-time checks.)
expect_clean_exit c SIGTERM
server_run_log c |
  grep 'signal 15: [1-9][0-9]* NBD client connection(s): closing the volume'
expect_clean_restart c "$ctl" SIGTERM
