#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
#
# control-session.py CTL: one connection to a controller's control
# socket kept open for as long as this runs.  Each line read from stdin
# is a JSON request sent as is; the reply line is printed to stdout and
# flushed.  EOF on stdin closes the connection (tests use that to drop a
# client in the middle of a backup).  Used by test-backup-controller.sh
# as a bash coprocess.

import socket
import sys

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
replies = sock.makefile("r")
for line in sys.stdin:
    sock.sendall(line.encode())
    reply = replies.readline()
    if not reply:
        sys.exit("control-session: the controller closed the connection")
    sys.stdout.write(reply)
    sys.stdout.flush()
sock.close()
