#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The control server's strictness:
#  - a line with a NUL byte is answered with an error, and the
#    connection is closed (also when no newline follows the NUL);
#  - a line longer than 65536 bytes likewise, as soon as the 65537th
#    byte arrives; a line of 65536 bytes is still answered normally;
#  - a field of the wrong type is an error naming the field, and changes
#    nothing ("full": "yes", "repair": 1, an index given as a string, a
#    URI as a number, "cmd" not a string), as is a field the command does
#    not take, a missing one and a key given twice;
#  - an error reply whose message is cut in the middle of a UTF-8
#    character (an add-leg refused with a long non-ASCII URI) is still
#    sent, the cut character replaced;
#  - the connection stays usable after each of those errors, and the
#    well-typed requests still work.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/control-functions.sh"

start_control_volume
gen=$(nbdrep_status_get "$ctl" 's["volume"]["generation"]')

control_python <<'EOF'
import json
from control_raw import *

# refused_then_closed DATA WORDS: DATA gets an error reply containing
# WORDS, then the connection ends.
def refused_then_closed(data, words):
    s = connect(ctl)
    s.sendall(data)
    reply = json.loads(read_line(s, 10))
    assert reply["ok"] is False and words in reply["error"], reply
    assert closed_within(s, 10) is not None, "still open after %r" % words
    s.close()

refused_then_closed(b'{"cmd": "status"}\0\n', "NUL byte")
refused_then_closed(b'{"cmd": "st\0', "NUL byte")         # no newline
refused_then_closed(b'{"cmd": "status", "x": "' + b"a" * 70000,
                    "longer than 65536 bytes")

# A line of exactly 65536 bytes is decoded (and refused for its field).
s = connect(ctl)
line = b'{"cmd": "status", "pad": "'
line += b"a" * (65536 - len(line) - 2) + b'"}'
assert len(line) == 65536
r = ask(s, line + b"\n")
assert r == {"ok": False, "error": 'status: unknown field "pad"'}, r

# Each request gets exactly this error.
cases = [
    ({"cmd": "resync", "index": 0, "full": "yes"},
     'resync: "full" must be true or false'),
    ({"cmd": "verify", "action": "start", "repair": 1},
     'verify: "repair" must be true or false'),
    ({"cmd": "verify", "action": "begin"},
     'verify: "action" must be "start" or "stop"'),
    ({"cmd": "verify", "repair_from": "0"},
     'verify: "repair_from" must be a leg index (an integer from 0) or null'),
    ({"cmd": "verify", "rate": -1},
     'verify: "rate" must be bytes per second (an integer from 0) or null'),
    ({"cmd": "fail-leg", "index": "1"},
     'fail-leg: "index" must be a leg index (an integer from 0)'),
    ({"cmd": "fail-leg", "index": 1.0},
     'fail-leg: "index" must be a leg index (an integer from 0)'),
    ({"cmd": "remove-leg", "index": -1},
     'remove-leg: "index" must be a leg index (an integer from 0)'),
    ({"cmd": "add-leg", "uri": 5}, 'add-leg: "uri" must be a string'),
    ({"cmd": "set", "key": "resync-rate", "value": 1000000},
     'set: "value" must be a string'),
    ({"cmd": "backup-begin", "base": 0},
     'backup-begin: "base" must be a string or null'),
    ({"cmd": "backup-begin", "hold": 0},
     'backup-begin: "hold" must be seconds (an integer from 1 to 86400)'),
    ({"cmd": "backup-end", "token": "x", "result": True},
     'backup-end: "result" must be "failed" or "done"'),
    ({"cmd": "resync", "index": 1, "ful": True},
     'resync: unknown field "ful"'),
    ({"cmd": "fail-leg"}, 'fail-leg: missing "index"'),
    ({"cmd": True}, '"cmd" must be a string'),
    ({"index": 1}, 'missing "cmd"'),
    ({"cmd": "frobnicate"}, 'unknown command "frobnicate"'),
]
for req, error in cases:
    r = ask(s, req)
    assert r == {"ok": False, "error": error}, (req, r)
r = ask(s, b'{"cmd": "fail-leg", "index": 1, "index": 1}\n')
assert not r["ok"] and "duplicate object key" in r["error"], r
r = ask(s, b'[1]\n')
assert r == {"ok": False, "error": "invalid request: not a JSON object"}, r

# An error message cut in the middle of a character is still a reply
# (the URI is refused by name: RFC 3986 has no raw non-ASCII).
r = ask(s, {"cmd": "add-leg", "uri": "nbd+unix:///" + "\u00e9" * 400 +
            "?socket=/x"})
assert r["ok"] is False and \
    r["error"].startswith("replica=nbd+unix:///\u00e9"), r

# Nothing changed; the connection still works.
st = ask(s, {"cmd": "status"})
assert st["ok"] and st["volume"]["state"] == "healthy", st
assert st["volume"]["verify"] is None, st["volume"]["verify"]
assert st["volume"]["backup"] is None, st["volume"]["backup"]
assert all(l["state"] == "uptodate" for l in st["legs"]), st["legs"]
# Well-typed requests are taken.
r = ask(s, {"cmd": "set", "key": "resync-rate", "value": "5M"})
assert r == {"ok": True}, r
r = ask(s, {"cmd": "resync", "index": 1, "full": False})
assert r["ok"] is False and "nothing to resync" in r["error"], r
EOF

status_check "$ctl" "s['volume']['generation'] == $gen and
  s['volume']['resync_rate'] == 5 * 1024 * 1024"
grep -q 'error: control: uid [0-9]* pid [0-9]* sent a NUL byte: connection closed' \
  "$tmpdir/c.log"
grep -q 'error: control: uid [0-9]* pid [0-9]* sent a line longer than 65536 bytes' \
  "$tmpdir/c.log"
