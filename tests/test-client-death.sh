#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A client that vanishes with reads in flight must not take the volume
# down (README, "A client that vanishes").  Twenty times, a client
# process queues four 2 MiB reads and exits without waiting for them
# (as nbdkit's own test-client-death does), against a controller
# (plugin shape, two file legs holding 8 MiB of data); after each one a
# second client reads the data back through the controller.  Every
# fifth client first sleeps 0.1 s without reading: by then its replies
# are ready and blocked on the socket, as when nbdcopy or qemu is killed
# in the middle of a copy.
#
# nbdkit before 1.33.10 (Debian 12 has 1.32.5) aborts in this case
# ("raw_send_socket: Assertion `sock >= 0' failed", fixed upstream by
# commit 9d82aa4f): two worker threads of the connection get past
# nbdkit's status check with their replies, the first send fails (the
# client has gone) and closes the socket, the second asserts.  The race
# is in nbdkit's server, not in a plugin: stock `nbdkit memory` dies of
# it too (about one client in three that exits at once, every client
# that sleeps first).  So the test asserts:
#  - with nbdkit 1.33.10 or later the controller serves all twenty
#    clients and every read-back;
#  - with an older nbdkit, each death is that assertion: the process
#    ended by SIGABRT with the message in its log.  Anything else (our
#    code crashing, a hang, a failed read-back with the controller
#    running, wrong data) fails;
#  - after each death a restart (what a supervisor does, README) brings
#    the volume back healthy, no leg resynced; leg servers that died
#    (stock nbdkit too: the dying controller leaves reads in flight on
#    them) died only of that assertion and are restarted first;
#  - with nbdkit's --threads=1 (each connection's requests served one
#    at a time: the workaround README gives) the controller survives
#    twenty clients that sleep first, whatever the nbdkit version;
#  - every leg holds the data byte for byte at the end.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import nbd, os; os.fork'

runs=20
MiB=$(( 1024 * 1024 ))
ctl=$tmpdir/c.ctl

# Does the nbdkit we run abort when a client leaves with requests in
# flight (older than 1.33.10)?
nbdkit_version=$("$NBDKIT" --version | awk '{ print $2 }')
if [ "$(printf '%s\n' 1.33.10 "$nbdkit_version" | sort -V | head -n 1)" = 1.33.10 ]
then
  nbdkit_aborts=
else
  nbdkit_aborts=1
fi

# vanishing_clients FIRST EVERY: runs FIRST to $runs, in one python
# process (a python start costs more than a run).  In each, a child
# process connects, queues four 2 MiB reads and exits (its socket closed
# at exit, no NBD_CMD_DISC, the replies unread), after sleeping 0.1 s
# in runs whose number is a multiple of EVERY; then the data is read
# back through the controller.  Prints how many runs completed before
# one could not connect or read (the controller has gone, or it is a
# bug: recover judges); wrong data read back fails.
vanishing_clients ()
{
  python3 -c "
import nbd, os, sys, time
uri = '$c_uri'
with open('$tmpdir/expected', 'rb') as f:
    want = f.read($(( 8 * MiB )))
run = $1
try:
    while run <= $runs:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                h = nbd.NBD()
                h.connect_uri(uri)
                buf = nbd.Buffer(2 * 1024 * 1024)
                for i in range(4):
                    h.aio_pread(buf, i * 2 * 1024 * 1024)
                if run % $2 == 0:
                    time.sleep(0.1)
                code = 0
            except nbd.Error as e:
                print('run %d: %s' % (run, e), file=sys.stderr)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            break
        h = nbd.NBD()
        h.connect_uri(uri)
        if h.pread(len(want), 0) != want:
            sys.exit('run %d: wrong data read back' % run)
        h.shutdown()
        del h
        run += 1
except nbd.Error as e:
    print('run %d: %s' % (run, e), file=sys.stderr)
print(run - $1)
"
}

# died_of_nbdkit_bug NAME: reap server NAME, which must have died of
# nbdkit's assertion (and our nbdkit must be one that has it).
died_of_nbdkit_bug ()
{
  reap_server "$1" 10 || return 1
  if [ -z "$nbdkit_aborts" ]; then
    echo "$0: $1 died (status $server_status) although nbdkit $nbdkit_version is fixed" >&2
    return 1
  fi
  # Not grep -q: leaving at the first match, it would kill the log's
  # writer with SIGPIPE, which pipefail counts as no match.
  if [ "$server_status" -ne 134 ] ||
     ! server_run_log "$1" |
       grep -F 'raw_send_socket: Assertion `sock >= 0'"'"' failed' >/dev/null
  then
    echo "$0: $1 died with status $server_status, not of nbdkit's assertion" >&2
    return 1
  fi
}

# leg_settled I: leg server I has closed every connection (only its
# listening socket is left), or has exited.
leg_settled ()
{
  server_running "r$1" || return 0
  [ "$(find "/proc/$(server_pid "r$1")/fd" -lname 'socket:*' | wc -l)" -le 1 ]
}

# recover: the controller has gone: judge its death and, once they have
# let go of its connections, every leg server's; restart what died and
# wait for a healthy volume.
recover ()
{
  local i
  died_of_nbdkit_bug c || return 1
  for i in 0 1; do
    wait_until 10 leg_settled "$i" || return 1
    if ! server_running "r$i"; then
      died_of_nbdkit_bug "r$i" || return 1
      restart_replica "$i" || return 1
    fi
  done
  restart_controller c || return 1
  wait_volume_state 30 "$ctl" healthy || return 1
  status_check "$ctl" "all(l['state'] == 'uptodate' and l['resync'] is None
                            for l in s['legs'])"
}

# clients_gone: the controller has finished every client connection
# (as many "close" as "accepted connection" in its log: no reply of a
# vanished client is left to send, and a SIGTERM now finds no connection
# closing), or has exited.
clients_gone ()
{
  local log
  server_running c || return 0
  log=$(server_run_log c)
  [ "$(grep -c 'debug: accepted connection' <<<"$log")" -eq \
    "$(grep -c 'debug: replicate: close' <<<"$log")" ]
}

# clients EVERY ARGS...: start the controller with nbdkit options ARGS
# and run the vanishing clients (every EVERY-th one sleeps first); set
# deaths to the number of controller deaths (each one recovered).
clients ()
{
  local every=$1 run=1 n
  shift
  start_controller c "$@" "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
  wait_volume_state 30 "$ctl" healthy
  deaths=0
  while :; do
    n=$(vanishing_clients "$run" "$every")
    run=$(( run + n ))
    if [ "$run" -gt "$runs" ]; then
      # A late reply of the last client can still abort it.
      wait_until 30 clients_gone
      server_running c && break
    else
      run=$(( run + 1 ))     # the run that failed
    fi
    # A failure with the controller still running is ours.
    recover
    deaths=$(( deaths + 1 ))
    [ "$run" -le "$runs" ] || break
  done
  stop_controller c
}

start_replica 0 --file 64M
start_replica 1 --file 64M
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 30 "$ctl" healthy
new_expected "$tmpdir/expected" "$c_uri"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 8 * MiB ))
wait_until 30 clients_gone     # SIGTERM under a closing connection leaks
stop_controller c              # nbdkit 1.32's context (see _only_nbdkit_leaks)

clients 5
echo "$0: nbdkit $nbdkit_version: the controller died $deaths time(s) in $runs clients"

# The workaround: no two worker threads on one connection, no race.
clients 1 --threads=1
if [ "$deaths" -ne 0 ]; then
  echo "$0: with --threads=1 the controller died $deaths time(s)" >&2
  exit 1
fi

compare_legs "$tmpdir/expected" "$r0_uri" "$r1_uri"
