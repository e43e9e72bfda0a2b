#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The add of a leg removed before it was reached frees the slot that the
# storage answering at its URI claims (admin.c, slot_of_removed) only
# once every leg of the volume has been reached: a leg not reached yet
# may own that slot, and its own storage may be what answers there (a
# swapped socket or port).  Here, after a failover, leg 0 (never
# reached) is removed and the server at leg 0's URI comes back serving
# leg 1's disk, which holds writes the promoted volume lacks; leg 1 is
# on the volume, not reached.  Before the fix the add freed leg 1's slot
# and rebuilt leg 1's disk from the promoted leg.
#   1. and 2. The synchronous site (legs 0 and 1) takes writes the
#      asynchronous leg 2 never gets, and is lost (lose_sync_site).
#   3. prefer=2 force=true promotes leg 2; write B.
#   4. nbdrep remove 0; the server at leg 0's URI serves leg 1's image.
#   5. nbdrep add of leg 0's URI: refused, naming leg 1; leg 1's image
#      is as it was.

source ./functions.sh
set -euo pipefail
set -x
source "$abs_top_srcdir/tests/fault-functions.sh"

requires_nbdsh
requires_nbdinfo

ctl=$tmpdir/c.ctl
expected=$tmpdir/expected

start_replica 0 32M
start_replica 1 32M
start_replica 2 32M

# 1. and 2.
lose_sync_site "$ctl" "$expected" 1

# 3.
fail_over_to_async "$ctl" "$expected"

# 4.
"$NBDREP" remove "$ctl" 0
status_check "$ctl" \
  'leg(0)["state"] == "removed" and leg(1)["state"] == "failed"'
rm -f "$tmpdir/r0.sock"
start_nbdkit -P "$tmpdir/misdirected.pid" -U "$tmpdir/r0.sock" file \
  file="$tmpdir/r1.img"

# 5.
! "$NBDREP" add "$ctl" "$r0_uri" 2>"$tmpdir/add.err"
cat "$tmpdir/add.err"
grep -q 'leg 1 has not been reached' "$tmpdir/add.err"
! grep 'of the leg removed before it was reached, freed' "$tmpdir/c.log"
cmp "$tmpdir/r1.img" "$tmpdir/r1.before"
compare_legs "$expected" "$c_uri" "$r2_uri"
