#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The superblock that marks an incremental resync's target inconsistent
# must read back (metaio.c, sb_for_leg): an inconsistent leg never wins
# an election, not even with force=true (election.c, rule 3).  The
# target holds its own, older generation; the history written with it
# was the volume's, whose newest entry is not older than that
# generation, and the decoder refused the copy ("history[0] counter N
# is not below N").  The older copy was read instead: after a crash in
# the middle of the resync, the leg looked consistent, and with the
# other leg lost, force=true started the volume from a leg half
# resynced.
#
# Two file legs; the controller with -D replicate.checkpoint_pause=8000,
# which holds the resync's first checkpoint, its target partly copied:
#   1. leg 1 killed; W (4 MiB at 0) written to leg 0 only; leg 1
#      restarted: its incremental resync reaches the checkpoint;
#   2. kill -9 of the controller in the pause; leg 0's server stopped;
#   3. nbdrep inspect: leg 1's superblock says inconsistent;
#   4. a start with leg 0 unreachable and force=true is refused, naming
#      the inconsistent leg;
#   5. leg 0 back: the volume starts, resumes leg 1's resync (still
#      incremental: an inconsistent leg holding its slot's bm_gen), and
#      both legs hold what was written.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected
MiB=$(( 1024 * 1024 ))

start_replica 0
start_replica 1
start_controller c -D replicate.checkpoint_pause=8000 "$PLUGIN" \
  "$r0_uri" "$r1_uri" control="$ctl" timeout=2
wait_volume_state 30 "$ctl" healthy
new_expected "$expected" "$c_uri"
write_random "$c_uri" "$expected" 0 "$MiB"

# 1.
kill_replica 1
wait_leg_state 30 "$ctl" 1 failed
write_random "$c_uri" "$expected" 0 $(( 4 * MiB ))        # W
restart_replica 1
wait_until 60 grep -q 'resync checkpoint: pausing' "$tmpdir/c.log"
status_check "$ctl" 'leg(1)["state"] == "syncing"'

# 2.
kill_controller c
stop_replica 0

# 3.
"$NBDREP" inspect --json "$r1_uri" >"$tmpdir/inspect.json"
python3 -c '
import json, sys
sb = json.load(open(sys.argv[1]))["superblock"]
print("leg 1: generation %d, inconsistent %s" %
      (sb["generation"]["counter"], sb["inconsistent"]))
assert sb["inconsistent"] is True, "the mark did not read back"
' "$tmpdir/inspect.json"

# 4.
mv "$tmpdir/c.log" "$tmpdir/c.crashed.log"
if start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" \
     force=true wait=2; then
  echo "$0: the volume started from a leg whose resync was interrupted"
  exit 1
fi
grep 'inconsistent' "$tmpdir/c.log"

# 5.
restart_replica 0
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
status_check "$ctl" 'leg(1)["last_resync"]["kind"] == "incremental"'
compare_legs "$expected" "$c_uri" "$r0_uri" "$r1_uri"
