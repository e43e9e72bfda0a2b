# SPDX-License-Identifier: BSD-3-Clause
#
# tests/fault-functions.sh: helpers shared by the fault tests
# (test-fault-*.sh), sourced after functions.sh with
#
#     source "$abs_top_srcdir/tests/fault-functions.sh"
#
# They keep the oracle's expected file in step with what the client wrote
# (every write goes through the controller first and reaches the expected
# file only once the controller acknowledged it), assert on the status
# JSON in one snapshot, expect errors, drive nbdkit's pause filter and
# arm the faultinject filter (tests/faultinject.c) with rules.
# Like functions.sh they fail by returning non-zero, never by set -e.

# now_us: print the wall clock in microseconds.
now_us ()
{
  echo "${EPOCHREALTIME/./}"
}

# status_json_check EXPR: fail (printing the status) unless the Python
# expression EXPR is true, with s = the status JSON read from standard
# input and leg(i) = the leg whose index is i.
status_json_check ()
{
  python3 -c '
import json, sys
s = json.load(sys.stdin)
def leg(i):
    return next(l for l in s["legs"] if l["index"] == i)
if not eval("(" + sys.argv[1] + ")"):
    for l in s["legs"]:
        l.pop("latency", None)
    sys.exit("status check failed: %s\n%s"
             % (sys.argv[1], json.dumps(s, indent=1)))
' "$1"
}

# status_check CTL EXPR: status_json_check EXPR on CTL's status now.
status_check ()
{
  local json
  json=$(nbdrep_status_json "$1") || return 1
  status_json_check "$2" <<<"$json"
}

# new_expected FILE URI: create FILE, all zeroes, of the size URI exports.
new_expected ()
{
  local size
  size=$("$NBDINFO" --size "$2") || return 1
  rm -f "$1"
  truncate -s "$size" "$1"
}

# write_random URI EXPECTED OFFSET LENGTH: write LENGTH random bytes at
# OFFSET through URI and flush; only once both succeeded, put the same
# bytes into the file EXPECTED.  Fails if the client sees an error.
write_random ()
{
  "$NBDSH" -u "$1" -c "
import os
buf = os.urandom($4)
h.pwrite(buf, $3)
h.flush()
with open('$2', 'r+b') as f:
    f.seek($3)
    f.write(buf)
"
}

# write_behind_hold URI EXPECTED OFFSET LENGTH LOG ID WHAT: write LENGTH
# random bytes at OFFSET through URI while the faultinject rule ID holds
# a request (its "fire" line in LOG already); the write must be sent
# before the held request is done and acknowledged only after it (its
# "done ID" line in LOG): it waited for the range lock WHAT (a phrase:
# "the resync copy of its range") held.  Then flush, and put the bytes
# into the file EXPECTED.  Prints how long the write took.
write_behind_hold ()
{
  "$NBDSH" -u "$1" -c "
import os, time
def done_logged():
    with open('$5') as f:
        return any(l.split()[:2] == ['done', '$6'] for l in f)
assert not done_logged(), 'the held request came back before W was sent'
buf = os.urandom($4)
t0 = time.monotonic()
h.pwrite(buf, $3)
t1 = time.monotonic()
print('W acknowledged after %.3f s' % (t1 - t0))
assert done_logged(), 'W was acknowledged while $7 was held'
h.flush()
with open('$2', 'r+b') as f:
    f.seek($3)
    f.write(buf)
"
}

# write_random_blocks URI EXPECTED SEED COUNT BLOCK SLOTS [FLUSH_EVERY
# [nofinal]]: COUNT writes of BLOCK random bytes through URI, one at a
# time, each at a random slot of the first SLOTS blocks of BLOCK bytes
# (random.Random(SEED).randrange(SLOTS) * BLOCK; writes may overlap),
# each put into the file EXPECTED once acknowledged.  Flushes after
# every FLUSH_EVERY-th write (0, the default: none in the loop) and
# after the last write (not with nofinal).  Fails if the client sees an
# error.
write_random_blocks ()
{
  local final=True
  case "${8:-}" in
    "") ;;
    nofinal) final=False ;;
    *) echo "write_random_blocks: unknown argument $8" >&2; return 1 ;;
  esac
  "$NBDSH" -u "$1" -c "
import os, random
rng = random.Random($3)
every = ${7:-0}
with open('$2', 'r+b') as f:
    for i in range($4):
        off = rng.randrange($6) * $5
        buf = os.urandom($5)
        h.pwrite(buf, off)
        f.seek(off)
        f.write(buf)
        if every and i % every == every - 1:
            h.flush()
    if $final:
        h.flush()
"
}

# lose_sync_site CTL EXPECTED ROUNDS: the first steps of a failover to
# an asynchronous leg (DESIGN.md section 14), replicas 0, 1 and 2
# started and no controller c running.  Legs 0 and 1 synchronous, leg 2
# asynchronous:
#   1. 1 MiB written at 0 (EXPECTED, created here, gets it) until leg 2
#      holds it; clean stop.
#   2. The synchronous site runs on without leg 2 (its server stopped):
#      it takes write D (4 MiB at 4 MiB, not in EXPECTED: a promoted
#      leg 2 never has it) and ROUNDS failures and resyncs of leg 1
#      (more generations; site_gen: the last).  Then it is lost: the
#      controller and replicas 0 and 1 stopped, their images copied to
#      r0.before and r1.before.
lose_sync_site ()
{
  local ctl=$1 expected=$2 rounds=$3 k M=$(( 1024 * 1024 ))
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
    control="$ctl"
  wait_volume_state 30 "$ctl" healthy
  wait_until 60 status_check "$ctl" \
    'leg(2)["async"]["state"] == "replicating"'
  new_expected "$expected" "$c_uri"
  write_random "$c_uri" "$expected" 0 "$M"
  wait_until 60 status_check "$ctl" 'leg(2)["async"]["lag_bytes"] == 0'
  stop_controller c

  stop_replica 2
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
    control="$ctl"
  wait_volume_state 30 "$ctl" healthy
  "$NBDSH" -u "$c_uri" -c "
import os
h.pwrite(os.urandom($M), 4 * $M)
h.flush()
"
  for (( k = 0; k < rounds; ++k )); do
    "$NBDREP" fail "$ctl" 1
    "$NBDREP" resync "$ctl" 1
    wait_leg_state 60 "$ctl" 1 uptodate
  done
  site_gen=$(nbdrep_status_get "$ctl" "s['volume']['generation']")
  stop_controller c
  stop_replica 0
  stop_replica 1
  cp "$tmpdir/r0.img" "$tmpdir/r0.before"
  cp "$tmpdir/r1.img" "$tmpdir/r1.before"
}

# fail_over_to_async CTL EXPECTED: after lose_sync_site, the failover:
# replica 2 back, the controller started with prefer=2 force=true
# (legs 0 and 1 unreachable), leg 2 promoted; 1 MiB written at 1 MiB
# (B, into EXPECTED).
fail_over_to_async ()
{
  local ctl=$1 expected=$2 M=$(( 1024 * 1024 ))
  restart_replica 2
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" async="$r2_uri" \
    control="$ctl" prefer=2 force=true wait=2
  grep 'failover: leg 2 .* is promoted' "$tmpdir/c.log"
  write_random "$c_uri" "$expected" "$M" "$M"
}

# full_volume_of_three CTL EXPECTED: legs 0, 1 and 2 (replicas 0-2,
# started) with max-legs=3, every slot taken; 1 MiB written at 0 (A,
# into EXPECTED, created here); a clean stop.
full_volume_of_three ()
{
  local ctl=$1 expected=$2
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" \
    control="$ctl" max-legs=3
  wait_volume_state 30 "$ctl" healthy
  new_expected "$expected" "$c_uri"
  write_random "$c_uri" "$expected" 0 $(( 1024 * 1024 ))
  stop_controller c
}

# landed_in_order FILE LEN LATER_OFF LATER_BYTE EARLIER_OFF EARLIER_BYTE
# [TIMEOUT]: wait (default 20 s) until the image FILE holds LEN bytes
# LATER_BYTE at LATER_OFF (a later write), then tell whether it holds
# the earlier write too (LEN bytes EARLIER_BYTE at EARLIER_OFF): exit 0
# if it does, 1 with a message if not, 2 if the later write never
# landed.  The later range is read first and the earlier one only
# after: a server writing while the file is read cannot make a write
# that landed first look missing (one read of both ranges could see the
# earlier range before, and the later one after, both landed).
landed_in_order ()
{
  python3 -c "
import sys, time
def holds(off, byte):
    with open('$1', 'rb') as f:
        f.seek(off)
        return f.read($2) == bytes([byte]) * $2
deadline = time.monotonic() + ${7:-20}
while not holds($3, $4):
    if time.monotonic() > deadline:
        print('the later write (at $3) never landed in $1')
        sys.exit(2)
    time.sleep(0.01)
if holds($5, $6):
    print('$1 holds the earlier write (at $5) with the later one (at $3)')
    sys.exit(0)
print('$1 holds the later write (at $3) but not the earlier one (at $5)')
sys.exit(1)
"
}

# zero_range URI EXPECTED OFFSET LENGTH [trim]: write zeroes (or, with
# trim, trim) over LENGTH bytes at OFFSET through URI and flush; then
# zero the same range of EXPECTED.  Fails if the client sees an error.
zero_range ()
{
  local op=zero
  [ "${5:-}" != trim ] || op=trim
  "$NBDSH" -u "$1" -c "
h.$op($4, $3)
h.flush()
with open('$2', 'r+b') as f:
    f.seek($3)
    f.write(bytes($4))
"
}

# expect_error URI ERRNO STATEMENTS: run the Python STATEMENTS in nbdsh
# with h connected to URI; fail unless they raise nbd.Error whose errno
# is ERRNO (a name, e.g. EIO).
expect_error ()
{
  "$NBDSH" -u "$1" -c "
import errno
statement = \"\"\"$3\"\"\"
try:
    exec(statement)
except nbd.Error as e:
    name = e.errno if isinstance(e.errno, str) else errno.errorcode.get(e.errno)
    if name != '$2':
        raise AssertionError('expected $2 from %s; got: %s' % (statement, e))
else:
    raise AssertionError('expected $2 from %s; it succeeded' % statement)
"
}

# _pause_command SOCKET CHAR: send CHAR to the pause filter's control
# SOCKET and check that it answers CHAR in upper case.
_pause_command ()
{
  python3 -c '
import socket, sys
path, cmd = sys.argv[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(path)
s.sendall(cmd.encode())
answer = s.recv(1).decode()
if answer != cmd.upper():
    sys.exit("pause filter at %s answered %r to %r" % (path, answer, cmd))
' "$1" "$2"
}

# pause_replica SOCKET: pause the replica whose pause filter listens on
# SOCKET (returns once requests already received have finished).
pause_replica ()
{
  _pause_command "$1" p
}

# resume_replica SOCKET: resume the replica paused by pause_replica.
resume_replica ()
{
  _pause_command "$1" r
}

# fault_arm FILE RULE...: make the rules file FILE of the faultinject
# filter hold the rules RULE... (one a line), atomically (FILE.tmp, then
# mv): the filter re-reads it, with fresh counters, at its next request.
fault_arm ()
{
  local file=$1
  shift
  printf '%s\n' "$@" >"$file.tmp" || return 1
  mv -f "$file.tmp" "$file"
}

# fault_clear FILE: remove every rule from FILE (atomically: FILE
# becomes empty).
fault_clear ()
{
  : >"$1.tmp" || return 1
  mv -f "$1.tmp" "$1"
}

# _fault_logged LOG WORD ID: has the faultinject log LOG a line
# "WORD ID ..."?
_fault_logged ()
{
  awk -v w="$2" -v id="$3" '$1 == w && $2 == id { found = 1; exit }
    END { exit !found }' "$1" 2>/dev/null
}

# fault_wait LOG ID [WORD] [TIMEOUT]: wait (TIMEOUT s, default 60) until
# the faultinject log LOG has a line "WORD ID ..." (WORD: fire, the
# default, or done).
fault_wait ()
{
  wait_until "${4:-60}" _fault_logged "$1" "${3:-fire}" "$2"
}
