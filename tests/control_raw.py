# SPDX-License-Identifier: BSD-3-Clause
#
# control_raw.py: raw clients of a controller's control socket for the
# tests of the control server (test-control-*.sh, test-backup-hold.sh),
# which import it from inline Python (control_python in
# control-functions.sh).  Every wait is bounded: a controller that does
# not answer fails the test instead of hanging it.

import json
import os
import socket
import subprocess
import sys
import time

# The controller's control socket, as control_python passes it.
ctl = sys.argv[1] if len(sys.argv) > 1 else None


def connect(path):
    """A connected blocking socket with a 30 s timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    return s


def read_line(s, timeout=30):
    """The next line the controller sends (without the newline), or None
    if it closes the connection first."""
    s.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(1)
        if not chunk:
            return None
        data += chunk
    return data[:-1].decode()


def ask(s, request, timeout=30):
    """Send request (a dict, or bytes sent as they are) and return the
    decoded reply."""
    if isinstance(request, dict):
        request = json.dumps(request).encode() + b"\n"
    s.sendall(request)
    line = read_line(s, timeout)
    assert line is not None, "the controller closed without replying"
    return json.loads(line)


def closed_within(s, seconds):
    """Seconds until the controller closes s (data it sends meanwhile is
    discarded), or None if it is still open after seconds."""
    start = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            if not s.recv(65536):
                return time.monotonic() - start
        except socket.timeout:
            pass
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
    return None


def nbdrep(*args, timeout=10):
    """Run nbdrep ARGS with NBDREP_TIMEOUT=timeout; return (exit status,
    stdout, stderr)."""
    env = dict(os.environ, NBDREP_TIMEOUT=str(timeout))
    p = subprocess.run([os.environ["NBDREP"]] + list(args), env=env,
                       capture_output=True, text=True, timeout=timeout + 30)
    return p.returncode, p.stdout, p.stderr


def status_ok(ctl, timeout=10):
    """nbdrep status answers (exit 0 or 3, degraded) within timeout."""
    rc, out, err = nbdrep("status", ctl, timeout=timeout)
    assert rc in (0, 3), "nbdrep status: exit %d: %s" % (rc, err)


def wait_status_ok(ctl, seconds=10):
    """Wait until nbdrep status answers (the controller may not have
    seen a client leave yet)."""
    deadline = time.monotonic() + seconds
    while True:
        rc, out, err = nbdrep("status", ctl)
        if rc in (0, 3):
            return
        assert time.monotonic() < deadline, \
            "nbdrep status: exit %d: %s" % (rc, err)
        time.sleep(0.2)
