#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The control server's client limit (64 connections at once): with 20
# idle clients connected nbdrep still works; with 64 the next one is
# told so in one JSON line ({"ok": false, "error": "too many control
# connections (64) ..."}), nbdrep prints that refusal and exits 1
# (not a broken pipe), and a raw client gets the refusal and then the
# end of the connection; once one idle client leaves, nbdrep works
# again.  The refusal is logged.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

source "$abs_top_srcdir/tests/control-functions.sh"

start_control_volume

control_python <<'EOF'
import json
from control_raw import *

idle = [connect(ctl) for i in range(20)]
status_ok(ctl)

idle += [connect(ctl) for i in range(44)]     # 64: the limit
# Every one of them is served (the last one too).
assert ask(idle[-1], {"cmd": "status"})["ok"]
rc, out, err = nbdrep("status", ctl)
print(err, end="")
assert rc == 1, rc
assert "nbdrep: status: too many control connections (64)" in err, err
assert "Broken pipe" not in err, err

extra = connect(ctl)
line = read_line(extra, 10)
reply = json.loads(line)
assert reply["ok"] is False and \
    reply["error"].startswith("too many control connections (64)"), reply
assert closed_within(extra, 10) is not None, "the refused client stays"

idle.pop().close()
wait_status_ok(ctl)
EOF

grep -q 'error: control: uid [0-9]* pid [0-9]* refused: 64 clients are connected already' \
  "$tmpdir/c.log"
