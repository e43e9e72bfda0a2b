# SPDX-License-Identifier: BSD-3-Clause
#
# tests/admin-functions.sh: helpers shared by the operator tests
# (test-admin-*.sh, test-verify-repair.sh, the backup tests), sourced
# after functions.sh and fault-functions.sh with
#
#     source "$abs_top_srcdir/tests/admin-functions.sh"
#
# Like functions.sh they fail by returning non-zero, never by set -e.

# expect_refusal STATUS PATTERN NBDREP-ARGS...: run nbdrep NBDREP-ARGS...,
# which must exit with STATUS and print a line matching the grep PATTERN
# on stderr (its output is kept in $tmpdir/out and $tmpdir/err).
expect_refusal ()
{
  local status=$1 pattern=$2 rc=0
  shift 2
  "$NBDREP" "$@" >"$tmpdir/out" 2>"$tmpdir/err" || rc=$?
  cat "$tmpdir/out" "$tmpdir/err"
  if [ "$rc" -ne "$status" ]; then
    echo "$0: nbdrep $*: exit status $rc, expected $status" >&2
    return 1
  fi
  if ! grep -q -- "$pattern" "$tmpdir/err"; then
    echo "$0: nbdrep $*: stderr does not match: $pattern" >&2
    return 1
  fi
}

# The raw control connection of the backup tests (control-session.py),
# to the control socket $ctl:

# session_open: a control connection as a coprocess (SESSION).
session_open ()
{
  coproc SESSION { python3 "$abs_top_srcdir/tests/control-session.py" "$ctl"; }
}

# session_ask JSON: send a request on the session, print the reply.
session_ask ()
{
  local reply
  echo "$1" >&"${SESSION[1]}"
  read -r reply <&"${SESSION[0]}"
  echo "$reply"
}

# session_close: close the session (the controller sees the client go).
session_close ()
{
  local pid=$SESSION_PID
  exec {SESSION[1]}>&-
  wait "$pid"
}

# ask_once JSON: a request on a connection of its own; print the reply.
ask_once ()
{
  python3 "$abs_top_srcdir/tests/control-session.py" "$ctl" <<<"$1"
}

# reply_check REPLY EXPR: the Python expression EXPR on r = the reply.
reply_check ()
{
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
if not eval("(" + sys.argv[2] + ")"):
    sys.exit("reply check failed: %s\n%s" % (sys.argv[2], sys.argv[1]))
' "$1" "$2"
}

# reply_get REPLY KEY: print one field of a reply.
reply_get ()
{
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' \
    "$1" "$2"
}
