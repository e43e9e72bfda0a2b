#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# No control client can stall the controller's other clients:
#  - a client that sends status requests as fast as it can and never
#    reads a reply, until its socket takes no more;
#  - a client that sends the start of a request and never its newline;
#  - a client that trickles a request one byte every half second.
# Meanwhile `nbdrep status` answers every time (within 5 s).  The first
# is dropped once it has read nothing for 10 s, the other two 10 s after
# the first byte of their line; each drop is logged with the client's
# uid and pid.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

source "$abs_top_srcdir/tests/control-functions.sh"

start_control_volume

control_python <<'EOF'
import sys, threading, time
from control_raw import *

# The flood: until the socket takes no more (the controller has stopped
# reading it because its replies are not read).
flood = connect(ctl)
flood.setblocking(False)
sent = 0
start = time.monotonic()
while time.monotonic() - start < 10:
    try:
        sent += flood.send(b'{"cmd":"status"}\n' * 64)
    except BlockingIOError:
        break
else:
    sys.exit("the flood was never held back")
print("flood: %d bytes sent before the socket was full" % sent)

partial = connect(ctl)
partial.sendall(b'{"cmd": "sta')
t0 = time.monotonic()

trickle = connect(ctl)
def drip():
    for b in b'{"cmd": "status"':
        try:
            trickle.send(bytes([b]))
        except OSError:
            return
        time.sleep(0.5)
threading.Thread(target=drip, daemon=True).start()

for i in range(5):
    status_ok(ctl, timeout=5)
    time.sleep(1)

for name, s in (("partial line", partial), ("trickle", trickle),
                ("flood", flood)):
    s.setblocking(True)
    t = closed_within(s, 20)
    assert t is not None, "%s: still connected after 20 s" % name
    print("%s: dropped %.1f s after the partial line began" %
          (name, time.monotonic() - t0))
    assert 8 <= time.monotonic() - t0 <= 16, name
status_ok(ctl, timeout=5)
EOF

grep -q 'error: control: uid [0-9]* pid [0-9]* dropped: it did not read its reply for 10 s' \
  "$tmpdir/c.log"
test "$(grep -c 'error: control: uid [0-9]* pid [0-9]* dropped: it did not finish its request line within 10 s' \
          "$tmpdir/c.log")" -eq 2
