#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The bash completion of nbdrep (contrib/bash-completion/nbdrep): sourced,
# it registers _nbdrep for nbdrep (complete -p), and driven as bash drives
# it (COMP_WORDS, COMP_CWORD; bash splits --opt=VALUE at the =) it
# completes the subcommands (exactly those of nbdrep --help), global and
# per-subcommand options (with a = and no space for those taking a
# value), the values of --tls and --tls-verify, the keys of set, control
# sockets as files, and the leg indexes of a live volume for fail,
# resync, remove and --repair-from.

source ./functions.sh
set -euo pipefail
set -x

source "$abs_top_srcdir/contrib/bash-completion/nbdrep"
test "$(complete -p nbdrep)" = "complete -F _nbdrep nbdrep"

# completes WORD... -- EXPECTED...: completing the last WORD (after
# nbdrep) gives exactly EXPECTED, in any order.
completes ()
{
  local -a words=("$NBDREP") want=()
  while [ "$1" != -- ]; do words+=("$1"); shift; done
  shift
  want=("$@")
  COMP_WORDS=("${words[@]}")
  COMP_CWORD=$(( ${#words[@]} - 1 ))
  COMPREPLY=()
  set +eu
  _nbdrep
  set -eu
  got=$(printf '%s\n' "${COMPREPLY[@]}" | sort)
  expected=$(printf '%s\n' "${want[@]}" | sort)
  if [ "$got" != "$expected" ]; then
    echo "$0: completing '${words[*]:1}': got [$got], expected [$expected]"
    return 1
  fi
}

mapfile -t subcommands < <("$NBDREP" --help | sed -n 's/^  nbdrep \([a-z-]*\) .*/\1/p')
test "${#subcommands[@]}" -ge 14
completes "" -- "${subcommands[@]}"
completes st -- status
completes backup -- backup backups backup-delete backup-verify
completes - -- --help --version --verbose
completes -v me -- metrics
completes verify /run/x.ctl --re -- --repair --repair-from=
completes verify --w -- --wait
completes metrics --v -- --volume= --verbose
completes status --j -- --json
completes watch --u -- --until-idle
completes resync --s -- --server-restarted
completes inspect --tls = "" -- off on require
completes inspect --tls = re -- require
completes inspect --tls-verify = "" -- true false
completes set /run/x.ctl "" -- resync-rate resync-min-rate verify-rate
completes set /run/x.ctl verify -- verify-rate

# Files for the control socket (an option before it changes nothing).
touch "$tmpdir/vol.ctl" "$tmpdir/other"
completes status --json "$tmpdir/vol." -- "$tmpdir/vol.ctl"
completes metrics "$tmpdir/v" -- "$tmpdir/vol.ctl"

# The legs of a live volume.
ctl=$tmpdir/c.ctl
for i in 0 1 2; do start_replica "$i" --memory 16M; done
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$r2_uri" control="$ctl"
completes fail "$ctl" "" -- 0 1 2
completes resync --full "$ctl" 2 -- 2
completes verify "$ctl" --repair-from = "" -- 0 1 2
# No legs to offer without a controller.
completes fail "$tmpdir/vol.ctl" "" --
