#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep remove of a leg that works, with client writes in flight to it:
# the leg's server answers them before it is told goodbye
# (leg.c: leg_close_answered).  Leg 2's server holds every write for
# 0.6 s (the delay filter, stock nbdkit); eight writes sent at once are
# all on its first connection when leg 2 is removed.  Cutting that
# connection with eight answers to come made nbdkit before 1.33.10
# abort on its second answer (raw_send_socket), so the removal killed
# the removed leg's server (the nbdkit of Debian 12 does).
#
# Checked: nbdrep remove returns (after the writes were answered, well
# within timeout=), leg 2's server is still running and has closed its
# connections, every one of them ended by the controller's goodbye
# (NBD_CMD_DISC, in the server's debug log), no assertion in its log;
# the oracle: the eight writes were acknowledged and read back, legs 0
# and 1 hold them, byte-identical.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires_filter delay

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
start_replica 0 8M
start_replica 1 8M
start_replica 2 8M -- --filter=delay delay-write=600ms
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl" \
  timeout=10
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"

# leg_settled: leg 2's server has closed every connection (only its
# listening socket is left).
leg_settled ()
{
  [ "$(find "/proc/$(server_pid r2)/fd" -lname 'socket:*' | wc -l)" -le 1 ]
}

# Eight 64 KiB writes at once; 0.2 s later (all of them held by leg 2's
# server) the removal, timed; then their answers, then the expected
# file.
"$NBDSH" -u "$c_uri" -c "
import os, subprocess, time
bufs = [os.urandom(65536) for _ in range(8)]
cookies = [h.aio_pwrite(bufs[i], i * 65536) for i in range(8)]
time.sleep(0.2)
assert h.aio_in_flight() == 8, 'the writes were answered before the removal'
t0 = time.monotonic()
subprocess.run(['$NBDREP', 'remove', '$ctl', '2'], check=True)
print('nbdrep remove took %.3f s' % (time.monotonic() - t0))
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    assert h.aio_command_completed(c)
h.flush()
with open('$expected', 'r+b') as f:
    for i in range(8):
        f.seek(i * 65536)
        f.write(bufs[i])
"

status_check "$ctl" "s['legs'][2]['state'] == 'removed' and
  s['volume']['state'] == 'healthy'"
# The removed leg's server lives, and closed its connections in order.
server_running r2
wait_until 10 leg_settled
if server_run_log r2 | grep -F 'raw_send_socket'; then
  echo "$0: leg 2's server tripped nbdkit's assertion" >&2
  exit 1
fi
accepted=$(server_run_log r2 | grep -c 'debug: accepted connection')
goodbyes=$(server_run_log r2 | grep -c 'client sent NBD_CMD_DISC')
if [ "$goodbyes" -ne "$accepted" ]; then
  echo "$0: leg 2's server: $accepted connections, $goodbyes ended by NBD_CMD_DISC" >&2
  exit 1
fi

# The oracle.
"$NBDSH" -u "$c_uri" -c "
with open('$expected', 'rb') as f:
    assert h.pread(8 * 65536, 0) == f.read(8 * 65536), 'a write did not read back'
"
compare_legs "$expected" "$r0_uri" "$r1_uri"
