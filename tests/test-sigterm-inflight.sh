#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A clean stop (SIGTERM) while one client connection has many requests
# in flight: writes held inside the engine by a delay filter on a leg,
# reads done whose answers wait for a client that reads none yet, and
# a write sent after the signal.  With nbdkit 1.32, closing the
# connection under them failed the worker thread blocked sending, and
# the next one to send tripped nbdkit's assertion `sock >= 0' in
# raw_send_socket (fixed in nbdkit 1.33.10): the planned stop aborted
# (status 134) and the next start had to recover.
# Asserted: status 0 and no assertion; no write answered ESHUTDOWN;
# every write answered as done is on both legs; the next start finds
# the clean stop (no crash recovery); the legs identical.

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
wait_volume_state 60 "$ctl" healthy
pid=$(server_pid c)

# Four writes, each filling its own MiB with its number, wait for the
# delayed leg; eight reads of 4 MiB are done, but their answers wait
# for the client, which reads none until after the signal: one worker
# thread is blocked sending its answer (the socket is full), the others
# wait for their turn to send.  The writes answered as done are listed
# in $tmpdir/done.
"$NBDSH" -c "
import errno, os, signal, time
h = nbd.NBD()
h.connect_uri('$c_uri')
writes = [h.aio_pwrite(bytearray([i + 1]) * 4096, i << 20) for i in range(4)]
reads = [h.aio_pread(nbd.Buffer(4 << 20), 32 << 20) for i in range(8)]
time.sleep(0.5)
os.kill($pid, signal.SIGTERM)
time.sleep(0.2)
writes.append(h.aio_pwrite(bytearray([5]) * 4096, 4 << 20))
done = []
for i, c in enumerate(writes + reads):
    try:
        while not h.aio_command_completed(c):
            h.poll(-1)
        if i < len(writes):
            done.append(i)
    except nbd.Error as e:
        assert e.errno not in ('ESHUTDOWN', errno.ESHUTDOWN), 'request %d answered ESHUTDOWN: %s' % (i, e)
        print('request %d: %s' % (i, e))
print('writes answered as done: %s' % done)
open('$tmpdir/done', 'w').write(' '.join(str(i) for i in done))
"

expect_clean_exit c SIGTERM

for i in $(cat "$tmpdir/done"); do
  for leg in 0 1; do
    byte=$(od -An -tu1 -j $(( i << 20 )) -N1 "$tmpdir/r$leg.img" | tr -d ' ')
    [ "$byte" = $(( i + 1 )) ] || {
      echo "$0: write $i was answered as done but leg $leg holds $byte there" >&2
      exit 1
    }
  done
done

expect_clean_restart c "$ctl" SIGTERM
