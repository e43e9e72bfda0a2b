#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The man pages: every .pod in the source tree passes podchecker without
# an error or a warning and converts with pod2man; every page has the
# sections NAME, SYNOPSIS, DESCRIPTION and SEE ALSO; and every parameter
# key listed in CONFIG_HELP (common/replication/pure/params.h) has an
# item in both the plugin's and the filter's PARAMETERS, so that the
# pages cannot fall behind the parameters.

source ./functions.sh
set -e
set -x

requires command -v podchecker
requires command -v pod2man

plugin_pod=$abs_top_srcdir/plugins/replicate/nbdkit-replicate-plugin.pod
filter_pod=$abs_top_srcdir/filters/replicate/nbdkit-replicate-filter.pod
params_h=$abs_top_srcdir/common/replication/pure/params.h

# Every .pod of the tree, not those of the sanitizer builds' copies
# (quickstart makes them under _build-*) or of git's metadata.  The
# tree itself may be such a copy: -mindepth 1 keeps the prune off it.
mapfile -t pods < <(find "$abs_top_srcdir" -mindepth 1 \
                      \( -name '_build-*' -o -name .git \) -prune -o \
                      -name '*.pod' -type f -print | sort)
printf 'POD file: %s\n' "${pods[@]}"
for pod in "$plugin_pod" "$filter_pod"; do
  [[ " ${pods[*]} " == *" $pod "* ]] || { echo "$0: $pod not found"; exit 1; }
done

failed=0

# fail_page MESSAGE: report a problem and carry on to report the others.
fail_page ()
{
  echo "$0: FAIL: $*" >&2
  failed=1
}

for pod in "${pods[@]}"; do
  # podchecker exits 0 on warnings: read what it says.
  if ! out=$(podchecker "$pod" 2>&1) || grep -qE 'ERROR|WARNING' <<<"$out"; then
    fail_page "podchecker $pod:"$'\n'"$out"
  fi
  if ! pod2man --errors=die --section=1 "$pod" >"$tmpdir/page.1" 2>"$tmpdir/pod2man.err" ||
     [ -s "$tmpdir/pod2man.err" ]; then
    fail_page "pod2man $pod: $(cat "$tmpdir/pod2man.err")"
  fi
  for section in NAME SYNOPSIS DESCRIPTION 'SEE ALSO'; do
    grep -qx "=head1 $section" "$pod" ||
      fail_page "$pod has no =head1 $section"
  done
done

# The keys of CONFIG_HELP: the string literals of the macro, each line's
# first column (up to two spaces), and in it every KEY= at the start or
# after ", " ("ublk-queues=N, ublk-depth=N" holds two).
mapfile -t keys < <(sed -n '/^#define CONFIG_HELP/,/[^\\]$/p' "$params_h" |
                      grep -o '"[^"]*"' |
                      sed -e 's/^"//' -e 's/"$//' -e 's/  .*//' |
                      grep -oE '(^|, )[a-z][a-z0-9-]*=' |
                      sed -e 's/^, //' -e 's/=$//' | sort -u)
printf 'CONFIG_HELP key: %s\n' "${keys[@]}"
# A sanity check on the extraction: these keys exist since the first
# release; if they are not found the macro's format changed.
for key in replica quorum timeout control metadata; do
  [[ " ${keys[*]} " == *" $key "* ]] ||
    fail_page "CONFIG_HELP in $params_h: key $key not found (format changed?)"
done

# Each key needs "=item B<KEY=..." (or "=item [B<KEY=>]...", the plugin's
# magic key) in both pages.
for key in "${keys[@]}"; do
  for pod in "$plugin_pod" "$filter_pod"; do
    grep -qE "^=item \[?B<$key=" "$pod" ||
      fail_page "$(basename "$pod") documents no parameter $key= (no '=item B<$key=...>')"
  done
done

exit "$failed"
