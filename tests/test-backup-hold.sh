#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A backup's hold lapses unless renewed.  On a raw control connection
# kept open (as nbdrep backup keeps it):
#  - backup-begin with "hold": 3 holds leg 1; the reply and the status
#    say the hold (3 s) and when it lapses, nbdrep status prints it;
#  - backup-renew every second keeps it past those 3 s, each renew
#    moving the lapse time on;
#  - once the renews stop it lapses: the backup ends as failed (logged),
#    leg 1 is released and resyncs, and the next renew and backup-end
#    are told that it lapsed;
#  - without "hold" a backup is held for the default 120 s.

source ./functions.sh
set -euo pipefail
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

source "$abs_top_srcdir/tests/control-functions.sh"

start_control_volume

control_python <<'EOF'
import time
from control_raw import *

s = connect(ctl)

def status():
    return ask(s, {"cmd": "status"})

r = ask(s, {"cmd": "backup-begin", "base": None, "hold": 3})
assert r["ok"] and r["leg"] == 1 and r["hold"] == 3, r
token = r["token"]
now = time.time()
assert now + 1 <= r["lapses"] <= now + 4, (now, r["lapses"])
b = status()["volume"]["backup"]
assert b["token"] == token and b["hold"] == 3, b
assert b["lapses"] == r["lapses"], b
rc, out, err = nbdrep("status", ctl)
print(out, end="")
assert rc == 3, rc
assert ("backup %s running: point-in-time, leg 1 held as its source, "
        "lapses in " % token) in out, out

# Renewed every second, it outlives its 3 s.
last = r["lapses"]
for i in range(5):
    time.sleep(1)
    r = ask(s, {"cmd": "backup-renew", "token": token})
    assert r["ok"] and r["lapses"] >= last, (r, last)
    last = r["lapses"]
# ... also from another connection.
other = connect(ctl)
assert ask(other, {"cmd": "backup-renew", "token": token})["ok"]
renewed = time.monotonic()
st = status()
assert st["volume"]["backup"]["token"] == token, st["volume"]["backup"]
assert st["legs"][1]["hold"] == "backup", st["legs"][1]

# Not renewed, it lapses.
while status()["volume"]["backup"] is not None:
    assert time.monotonic() - renewed < 10, "the hold did not lapse"
    time.sleep(0.2)
waited = time.monotonic() - renewed
print("lapsed %.1f s after the last renew" % waited)
assert waited >= 2.5, waited
for req in ({"cmd": "backup-renew", "token": token},
            {"cmd": "backup-end", "token": token, "result": "done"}):
    r = ask(s, req)
    assert r == {"ok": False, "error": "backup %s lapsed: it was not "
                 "renewed in time, and ended as failed" % token}, r

# The default hold.
r = ask(s, {"cmd": "backup-begin"})
assert r["ok"] and r["hold"] == 120, r
assert time.time() + 110 <= r["lapses"] <= time.time() + 121, r
assert ask(s, {"cmd": "backup-end", "token": r["token"],
               "result": "done"})["ok"]
EOF

grep -q 'error: backup [0-9a-f]*: not renewed for 3 s, its hold lapsed: counted as failed' \
  "$tmpdir/c.log"
wait_volume_state 60 "$ctl" healthy
