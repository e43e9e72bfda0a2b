# SPDX-License-Identifier: BSD-3-Clause
#
# tests/admin-functions.sh: helpers shared by the operator tests
# (test-admin-*.sh, test-verify-repair.sh), sourced after functions.sh
# and fault-functions.sh with
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
