#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# check-fuzz.sh [TARGET...]: build the libFuzzer targets (tests/fuzz-*.c)
# with clang, ASan and UBSan, and run each for FUZZ_SECONDS seconds.
# `make check-fuzz` runs it (not part of make check); the targets are
# fuzz-meta (the metadata decoders) and fuzz-control (the control
# request decoder), every one by default.
#
# Each run starts from the seeds in tests/fuzz-corpus/TARGET/ (copied:
# what the fuzzer adds never goes into the source tree) with the
# dictionary tests/fuzz-corpus/TARGET.dict when there is one.  The
# binaries, the grown corpora, the logs and any crash input go to
# FUZZ_DIR, by default a new directory under $TMPDIR (or /tmp) that is
# removed when every target ran clean and kept (and named) otherwise.
#
# Environment (make passes them): abs_top_srcdir, abs_top_builddir,
# FUZZ_CC (default clang), FUZZ_SECONDS (default 60), FUZZ_DIR,
# JANSSON_CFLAGS, JANSSON_LIBS.
# Exit status: 0 every target ran its time without a finding; 1 a
# target crashed, leaked or broke a check (its log tail and the crash
# input are printed); 2 a target could not be built.

set -u -o pipefail

srcdir=${abs_top_srcdir:?}
builddir=${abs_top_builddir:?}
cc=${FUZZ_CC:-clang}
seconds=${FUZZ_SECONDS:-60}
flags=(-g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined
       "-I$builddir" "-I$srcdir/common/utils" "-I$srcdir/common/mdformat"
       "-I$srcdir/common/replication" "-I$srcdir/common/replication/pure")

# The sources of each target (relative to the source tree) and the
# libraries it links.
declare -A sources=(
  [fuzz-meta]="common/mdformat/fuzz-meta.c common/mdformat/meta.c common/utils/crc32c.c"
  [fuzz-control]="tests/fuzz-control.c common/replication/pure/ctlreq.c"
)
declare -A libs=(
  [fuzz-meta]=""
  [fuzz-control]="${JANSSON_LIBS:--ljansson}"
)
# Options of each run: inputs up to past the longest request line.
declare -A options=(
  [fuzz-meta]=""
  [fuzz-control]="-max_len=70000"
)

if [ $# -eq 0 ]; then
  set -- fuzz-meta fuzz-control
fi

keep=${FUZZ_DIR:+yes}
dir=${FUZZ_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/nbdkit-replicate-fuzz.XXXXXX")} ||
  exit 2
mkdir -p "$dir" || exit 2

# build TARGET: compile it into $dir/TARGET.
build ()
{
  local t=$1 src
  local -a files=()
  for src in ${sources[$t]}; do files+=("$srcdir/$src"); done
  echo "check-fuzz: building $t with $cc"
  # shellcheck disable=SC2086  # the flags and libraries are word lists
  "$cc" "${flags[@]}" ${JANSSON_CFLAGS:-} "${files[@]}" ${libs[$t]} \
    -o "$dir/$t"
}

# run TARGET: fuzz it for $seconds seconds; print its statistics.
run ()
{
  local t=$1 rc=0
  # shellcheck disable=SC2206  # options[] is a word list
  local -a args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
                 -print_final_stats=1 -artifact_prefix="$dir/$t-"
                 ${options[$t]})
  mkdir -p "$dir/$t.corpus"
  if [ -d "$srcdir/tests/fuzz-corpus/$t" ]; then
    cp "$srcdir/tests/fuzz-corpus/$t"/* "$dir/$t.corpus/"
  fi
  if [ -f "$srcdir/tests/fuzz-corpus/$t.dict" ]; then
    args+=(-dict="$srcdir/tests/fuzz-corpus/$t.dict")
  fi
  echo "check-fuzz: running $t for $seconds s (log $dir/$t.log)"
  "$dir/$t" "${args[@]}" "$dir/$t.corpus" >"$dir/$t.log" 2>&1 || rc=$?
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
    "$dir/$t.log" | sed "s/^/check-fuzz: $t: /"
  if [ "$rc" -ne 0 ]; then
    echo "check-fuzz: $t FAILED (exit status $rc): last lines of its log:"
    tail -n 60 "$dir/$t.log"
    ls "$dir/$t"-* 2>/dev/null | sed 's/^/check-fuzz: input that failed: /'
    return 1
  fi
  echo "check-fuzz: $t: no finding in $seconds s"
}

status=0
for t in "$@"; do
  if [ -z "${sources[$t]+set}" ]; then
    echo "check-fuzz: unknown target $t (fuzz-meta, fuzz-control)" >&2
    exit 2
  fi
  if ! build "$t"; then
    echo "check-fuzz: cannot build $t with $cc (Debian: apt-get install clang libclang-rt-14-dev)" >&2
    exit 2
  fi
  run "$t" || status=1
done

if [ "$status" -eq 0 ] && [ -z "$keep" ]; then
  rm -rf "$dir"
else
  echo "check-fuzz: products kept in $dir"
fi
exit "$status"
