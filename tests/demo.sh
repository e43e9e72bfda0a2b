#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# tests/demo.sh: a replicated volume from start to finish, in about half
# a minute (`./quickstart demo` runs it after building).
#
# Three stock nbdkit servers (file plugin, 256 MiB sparse files) are the
# legs; the replicate plugin from this tree is the controller.  We write
# through the controller, kill -9 one leg, keep writing, bring the leg
# back, watch its incremental resync, and finally compare every leg and
# the controller, byte for byte, with what was written.  Prints PASS and
# exits 0, or prints FAIL and exits 1.  Everything runs in a temporary
# directory removed at exit (KEEP_TMPDIR=1 keeps it, with the logs);
# only processes started here are stopped.
#
# It uses the binaries of the tree, never installed ones:
#   plugins/replicate/.libs/nbdkit-replicate-plugin.so and nbdrep/nbdrep;
# DEMO_INSTALLED=1 uses the installed ones instead: the plugin by name
# (`nbdkit replicate`, from nbdkit's plugin directory) and nbdrep from
# PATH (tests/test-deb.sh runs it so against the Debian packages).
# Needs: nbdkit, nbdcopy, nbdsh (python3-libnbd), python3, awk, cmp.

set -u -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
plugin=$top/plugins/replicate/.libs/nbdkit-replicate-plugin.so
nbdrep=$top/nbdrep/nbdrep
if [ "${DEMO_INSTALLED:-0}" = 1 ]; then
  plugin=replicate
  nbdrep=$(command -v nbdrep) ||
    { echo "demo: DEMO_INSTALLED=1 but no nbdrep in PATH"; exit 1; }
fi

# nbdsh must run the system python, where python3-libnbd lives.
export PYENV_VERSION=system

leg_size=256M             # each replica file (sparse)
first_mib=64              # first write: 64 MiB at offset 0
second_off_mib=48         # second write, while leg 1 is down:
second_mib=24             #   24 MiB at offset 48 MiB (overlaps the first)
resync_rate=8M            # slow enough to watch the resync

# ---------------------------------------------------------------------------
# Output helpers.

# Print a step title.
step ()
{
  echo
  echo "== $*"
}

# Print a line of explanation.
say ()
{
  echo "   $*"
}

# Print a command line, with the temporary directory shown as $dir and
# the source tree as $top.
show ()
{
  local line="$*"
  line=${line//$dir/\$dir}
  echo "   \$ ${line//$top/\$top}"
}

# Print a command, then run it.
run ()
{
  show "$@"
  "$@"
}

# Print FAIL with a reason and exit 1 (the trap cleans up).
fail ()
{
  echo
  echo "FAIL: $*"
  if [ -f "$dir/controller.log" ]; then
    echo "---- last 40 lines of the controller's log ($dir/controller.log)"
    tail -n 40 "$dir/controller.log"
  fi
  exit 1
}

# ---------------------------------------------------------------------------
# Prerequisites.

for tool in nbdkit nbdcopy nbdsh python3 awk cmp; do
  command -v "$tool" >/dev/null ||
    { echo "demo: $tool is missing (./quickstart build installs it)"; exit 1; }
done
if [ "${DEMO_INSTALLED:-0}" = 1 ]; then
  nbdkit "$plugin" --version >/dev/null ||
    { echo "demo: nbdkit cannot load the installed plugin '$plugin'"; exit 1; }
else
  for f in "$plugin" "$nbdrep"; do
    [ -x "$f" ] ||
      { echo "demo: $f is missing: build the tree first (./quickstart build)"; exit 1; }
  done
fi

# ---------------------------------------------------------------------------
# The temporary directory and the processes we start.

dir=$(mktemp -d "${TMPDIR:-/tmp}/replicate-demo.XXXXXX") || exit 1
declare -A pids=()       # name -> pid of a server we started

# Is our server NAME still running?
running ()
{
  local pid=${pids[$1]-}
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# Stop our server NAME: SIGTERM, wait up to SECS seconds, then SIGKILL.
stop_server ()
{
  local name=$1 secs=$2 i pid=${pids[$1]-}
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for (( i = 0; i < secs * 10; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "pids[$name]"
}

# At exit: the controller first (a clean stop flushes the legs), then the
# replicas (stock nbdkit serves its connected clients until they go), then
# the directory.
cleanup ()
{
  local name
  stop_server controller 30
  for name in "${!pids[@]}"; do
    stop_server "$name" 3
  done
  if [ "${KEEP_TMPDIR:-0}" = 1 ]; then
    echo "demo: files kept in $dir"
  else
    rm -rf "$dir"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME ARGS...: run nbdkit -f ARGS... in the background with
# pidfile $dir/NAME.pid and log $dir/NAME.log; wait until it serves.
start_server ()
{
  local name=$1 i
  shift
  show nbdkit -f -P "$dir/$name.pid" "$@" "&"
  rm -f "$dir/$name.pid"
  nbdkit -f -P "$dir/$name.pid" "$@" </dev/null >>"$dir/$name.log" 2>&1 &
  pids[$name]=$!
  for (( i = 0; i < 300; i++ )); do
    [ -s "$dir/$name.pid" ] && return 0
    running "$name" || break
    sleep 0.1
  done
  fail "nbdkit $name did not start; its log says: $(tail -n 5 "$dir/$name.log")"
}

# start_replica N: replica N serves $dir/rN.img on $dir/rN.sock (a
# killed nbdkit leaves its socket file behind: remove it).
start_replica ()
{
  rm -f "$dir/r$1.sock"
  start_server "r$1" -U "$dir/r$1.sock" file "$dir/r$1.img"
}

# ---------------------------------------------------------------------------
# Helpers on data and status.

# make_data FILE MIB BASE WHAT: MIB MiB of 64-byte text lines saying WHAT
# and the volume offset of the line (BASE is the offset of the file's
# first byte), so any block can be recognised with hexdump or less.
# Lines are cut to 64 bytes, so keep WHAT short.
make_data ()
{
  awk -v n=$(( $2 * 16384 )) -v base=$(( $3 )) -v what="$4" 'BEGIN {
    for (i = 0; i < n; i++)
      printf "%-63.63s\n", sprintf ("nbdkit-replicate demo: %s, offset 0x%08x",
                                 what, base + i * 64)
  }' >"$1"
}

# status_field EXPR: print EXPR (Python, s = the status JSON) from
# nbdrep status --json.
status_field ()
{
  local json rc
  json=$("$nbdrep" status --json "$ctl")
  rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || return 1   # 3: not healthy
  python3 -c 'import json, sys; s = json.loads (sys.argv[1]); print (eval (sys.argv[2]))' \
    "$json" "$1"
}

# leg_state N: the state word of leg N.
leg_state ()
{
  status_field "next (l['state'] for l in s['legs'] if l['index'] == $1)"
}

# wait_for SECS WHAT CMD...: poll CMD until it succeeds, or fail saying
# we waited for WHAT.
wait_for ()
{
  local secs=$1 what=$2 i
  shift 2
  for (( i = 0; i < secs * 10; i++ )); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "timed out after $secs s waiting for $what"
}

# Does the controller answer on its control socket?  (nbdkit writes the
# pidfile once the volume has started; the control socket follows a
# moment later.)
controller_answers ()
{
  status_field "s['volume']['state']"
}

# Is the activity log empty?
al_empty ()
{
  [ "$(status_field "s['volume']['activity_log']['hot']")" = 0 ]
}

# Is leg 1 uptodate?
leg1_uptodate ()
{
  [ "$(leg_state 1)" = uptodate ]
}

# Is leg 1 syncing (or already done)?
leg1_resyncing ()
{
  case $(leg_state 1) in
    syncing|uptodate) return 0 ;;
    *) return 1 ;;
  esac
}

# nbdrep_status: show nbdrep status; its exit status (0 healthy, 3 not)
# is explained rather than treated as an error.
nbdrep_status ()
{
  show "$nbdrep" status "$ctl"
  "$nbdrep" status "$ctl" | sed 's/^/   /'
  say "(exit status ${PIPESTATUS[0]}: 0 = healthy, 3 = not healthy)"
}

# ---------------------------------------------------------------------------

cd "$dir" || exit 1
echo "nbdkit-replicate demo: a volume with three legs, one of which fails."
if [ "${DEMO_INSTALLED:-0}" = 1 ]; then
  echo "the installed plugin (nbdkit replicate) and $nbdrep, \$dir = $dir (removed at exit)"
else
  echo "\$top = $top (the built tree), \$dir = $dir (removed at exit)"
fi

step "1. Three replica servers: stock nbdkit, file plugin, $leg_size sparse files"
for n in 0 1 2; do
  truncate -s "$leg_size" "$dir/r$n.img"
  start_replica "$n"
done
r0="nbd+unix:///?socket=$dir/r0.sock"
r1="nbd+unix:///?socket=$dir/r1.sock"
r2="nbd+unix:///?socket=$dir/r2.sock"

step "2. The controller: the replicate plugin over the three legs"
say "All legs read as zeroes, so a new volume is created without asking."
say "Its metadata lives at the end of each leg: the volume is a little"
say "smaller than the legs.  (-v makes nbdkit log the debug messages.)"
ctl=$dir/vol.ctl
vol="nbd+unix:///?socket=$dir/vol.sock"
start_server controller -v -U "$dir/vol.sock" "$plugin" \
  "$r0" "$r1" "$r2" control="$ctl"
wait_for 30 "the control socket $ctl" controller_answers
size=$(status_field "s['volume']['size']") || fail "no status from $ctl"
say "Exported size: $size bytes (each leg: $(stat -c %s "$dir/r0.img") bytes)."

step "3. Write $first_mib MiB of recognisable data through the controller"
make_data first.img "$first_mib" 0 "first write"
run nbdcopy --flush first.img "$vol" || fail "nbdcopy to the controller failed"
say "Waiting until the controller has flushed the legs and emptied its"
say "activity log (it cools extents every 2 seconds) ..."
wait_for 30 "an empty activity log" al_empty
nbdrep_status

step "4. Kill replica 1 (kill -9), as if its host had crashed"
run kill -KILL "${pids[r1]}"
wait "${pids[r1]}" 2>/dev/null
unset "pids[r1]"

step "5. Write $second_mib MiB more at offset $second_off_mib MiB while leg 1 is gone"
say "The controller fails leg 1 at its first error, records the failure on"
say "legs 0 and 2 (a new generation) and acknowledges the write: the client"
say "sees no error.  Leg 1's bitmap remembers what it missed."
make_data second.img "$second_mib" $(( second_off_mib << 20 )) \
  "second write"
write_second="off = $(( second_off_mib << 20 ))
with open('second.img', 'rb') as f:
    while buf := f.read(1 << 20):
        h.pwrite(buf, off)
        off += len(buf)
h.flush()"
show nbdsh -u "$vol" -c "'...'"
sed 's/^/        /' <<<"$write_second"
nbdsh -u "$vol" -c "$write_second" ||
  fail "the client saw an error while leg 1 was down"
say "The write succeeded."
nbdrep_status
[ "$(leg_state 1)" = failed ] || fail "leg 1 is $(leg_state 1), not failed"

step "6. Bring replica 1 back and watch it catch up"
say "Slow the resync down to $resync_rate/s so that it can be seen:"
run "$nbdrep" set "$ctl" resync-rate "$resync_rate" || fail "nbdrep set failed"
start_replica 1
say "The controller retries a failed leg after 1 s, then 2, 4 ... up to 30 s;"
say "nbdrep resync asks it to retry now:"
run "$nbdrep" resync "$ctl" 1 || fail "nbdrep resync failed"
wait_for 30 "leg 1 to start its resync" leg1_resyncing
say "Only what leg 1 missed is copied (an incremental resync):"
show "$nbdrep" watch "$ctl" --until-idle
"$nbdrep" watch "$ctl" --until-idle | sed 's/^/   /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "nbdrep watch failed"

step "7. The volume is healthy again"
wait_for 30 "leg 1 to be uptodate" leg1_uptodate
nbdrep_status
kind=$(status_field "s['legs'][1]['last_resync']['kind']")
bytes=$(status_field "s['legs'][1]['last_resync']['bytes']")
say "Leg 1's last resync: $kind, $bytes bytes (the second write was" \
    "$(( second_mib << 20 )) bytes)."
[ "$kind" = incremental ] || fail "leg 1's resync was $kind, not incremental"

step "8. Check the data"
say "Expected: the first write, then the second write over part of it, then"
say "zeroes up to the end of the volume."
truncate -s "$size" expected.img
dd if=first.img of=expected.img conv=notrunc status=none
dd if=second.img of=expected.img bs=1M seek="$second_off_mib" conv=notrunc \
  status=none
say "Read back through the controller, and each leg straight from its server"
say "(only its data area: the metadata after it differs from leg to leg):"
run nbdcopy "$vol" volume.img || fail "reading through the controller failed"
cmp expected.img volume.img || fail "the controller returns other data"
for n in 0 1 2; do
  run nbdcopy "nbd+unix:///?socket=$dir/r$n.sock" "leg$n.img" ||
    fail "reading leg $n failed"
  cmp -n "$size" expected.img "leg$n.img" ||
    fail "leg $n's data area differs from what was written"
done
say "sha256 of the data areas:"
for f in expected.img volume.img leg0.img leg1.img leg2.img; do
  printf '   %s  %s\n' "$(head -c "$size" "$f" | sha256sum | cut -d' ' -f1)" "$f"
done
say "The controller can check its legs itself, online:"
show "$nbdrep" verify "$ctl" --rate=0 --wait
"$nbdrep" verify "$ctl" --rate=0 --wait | sed 's/^/   /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "nbdrep verify found mismatches"

step "9. Stop the controller"
say "A clean stop (SIGTERM) flushes every leg and empties the activity log,"
say "so the next start has nothing to recover:"
run kill -TERM "${pids[controller]}"
wait "${pids[controller]}"
rc=$?
unset "pids[controller]"
[ "$rc" -eq 0 ] || fail "the controller exited with status $rc"
show "$nbdrep" inspect "$r0" "| grep -A1 '^activity log'"
"$nbdrep" inspect "$r0" | grep -A1 '^activity log' | sed 's/^/   /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "nbdrep inspect failed"

step "10. What the controller logged (nbdkit -v), the lines worth knowing"
grep -E 'failed: |generation [0-9]+ recorded|is back|resync (of|done)|created' \
  "$dir/controller.log" | sed 's/^/   /'

echo
echo "PASS: every leg holds exactly what was written, the controller serves it,"
echo "and the leg that was killed caught up with an incremental resync."
exit 0
