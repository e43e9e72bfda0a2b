#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# workload.sh: the file workload of the kernel-path tests.  The host test
# (tests/test-kernel-nbdfuse.sh) and the guest tests (guest-*.sh) all run
# it, so every kernel path sees exactly the same I/O:
#
#   workload.sh corpus DEST [MAX_FILES [MAX_BYTES]]
#       Copy up to MAX_FILES (default 3000) real files of at most 256 KiB,
#       MAX_BYTES (default 40 MiB) in all, picked evenly from
#       $WORKLOAD_SOURCES (default /usr/share/doc and the Python library),
#       into DEST/part-00 .. DEST/part-09 (their paths kept), and write
#       DEST/SHA256SUMS.  Only names made of [A-Za-z0-9._+@/-] are taken.
#
#   workload.sh run CORPUS DIR STATE
#       On the file system mounted at DIR: copy the corpus part by part,
#       rename files and a directory, delete files and a directory, write
#       files with fsync (whole files, an append-only log, overwrites in
#       place), then a git repository (init, $WORKLOAD_COMMITS commits
#       adding, changing, moving and removing files, gc, fsck).  Keeps in
#       memory what every file must hold, computed from the sources and
#       never read back from DIR; at the end it syncs, hashes every file
#       under DIR into STATE/manifest and checks the files it knows
#       against what they must hold.
#
#   workload.sh verify DIR STATE
#       After a remount (read-only is enough: it writes nothing): every
#       file and directory under DIR is exactly what STATE/manifest and
#       STATE/dirs recorded, git fsck --full passes, HEAD is the recorded
#       commit and the work tree is clean.
#
# Progress: `run` appends the name of each step to STATE/progress.  A
# step named in $WORKLOAD_HOLD (space-separated) is a rendezvous: the
# workload stops there until the file STATE/go-STEP exists (at most
# $WORKLOAD_HOLD_TIMEOUT seconds, default 600), so a test can fail and
# restart a leg at a known point.  Steps: copy-half copy-done renamed
# deleted fsync-done git-half git-done.
#
# What was measured is printed on one line starting with "WORKLOAD".
# Needs bash and GNU coreutils, findutils and tar (the guest image has
# them), and git.

set -euo pipefail
export LC_ALL=C

PARTS=10
prog=${0##*/}

# Print an error and exit 1.
die ()
{
  echo "$prog: $*" >&2
  exit 1
}

# Print the seconds since the epoch with fractions.
now ()
{
  echo "$EPOCHREALTIME"
}

# elapsed T0: print the seconds since T0 (from now), to 0.1 s.
elapsed ()
{
  awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}

# timed NAME CMD...: run CMD and add "NAME=SECONDS" to $times.
timed ()
{
  local name=$1 t
  shift
  t=$(now)
  "$@"
  times+=" $name=$(elapsed "$t")"
}

# corpus DEST [MAX_FILES [MAX_BYTES]]: build the corpus (see the header).
corpus ()
{
  local dest=$1 max_files=${2:-3000} max_bytes=${3:-41943040}
  local -a sources=() all=() picked=()
  local src k i size path total=0 part n

  for src in ${WORKLOAD_SOURCES:-/usr/share/doc /usr/lib/python3 /usr/lib/python3.[0-9]*}; do
    [ -d "$src" ] && sources+=("$src")
  done
  [ ${#sources[@]} -gt 0 ] || die "corpus: no source directory exists"
  mapfile -t all < <(find "${sources[@]}" -type f -size -257k -printf '%s %p\n' |
                     grep -E '^[0-9]+ /[A-Za-z0-9._+@/-]+$' | sort -k2)
  [ ${#all[@]} -gt 0 ] || die "corpus: no files found in ${sources[*]}"
  for (( k = 0; k < max_files && k < ${#all[@]}; k++ )); do
    i=$(( k * ${#all[@]} / max_files ))
    [ "$max_files" -le "${#all[@]}" ] || i=$k
    size=${all[i]%% *}
    path=${all[i]#* }
    [ $(( total + size )) -le "$max_bytes" ] || break
    total=$(( total + size ))
    picked+=("${path#/}")
  done
  n=${#picked[@]}

  rm -rf "$dest"
  mkdir -p "$dest"
  for (( part = 0; part < PARTS; part++ )); do
    mkdir -p "$dest/part-0$part"
    printf '%s\n' "${picked[@]:part * n / PARTS:(part + 1) * n / PARTS - part * n / PARTS}" |
      tar -C / -cf - --no-recursion -T - | tar -C "$dest/part-0$part" -xf -
  done
  (cd "$dest" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$dest.sums"
  mv "$dest.sums" "$dest/SHA256SUMS"
  echo "CORPUS files=$n bytes=$total sources=${sources[*]}"
}

# step NAME: record that the workload reached step NAME; if NAME is in
# $WORKLOAD_HOLD, wait there until $state/go-NAME exists.
step ()
{
  local name=$1 deadline
  echo "$name" >>"$state/progress"
  case " ${WORKLOAD_HOLD:-} " in
    *" $name "*) ;;
    *) return 0 ;;
  esac
  deadline=$(( SECONDS + ${WORKLOAD_HOLD_TIMEOUT:-600} ))
  while [ ! -e "$state/go-$name" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "nobody released step $name"
    sleep 0.1
  done
}

# hash_of FILE: print the sha256 of FILE.
hash_of ()
{
  local h
  h=$(sha256sum <"$1")
  echo "${h%% *}"
}

# want_move_file OLD NEW: the expected file OLD is now NEW.
want_move_file ()
{
  want["$2"]=${want["$1"]}
  unset "want[$1]"
}

# want_move_dir OLD NEW: every expected path under OLD/ moves to NEW/.
want_move_dir ()
{
  local key
  for key in "${!want[@]}"; do
    case $key in
      "$1"/*) want_move_file "$key" "$2${key#"$1"}" ;;
    esac
  done
}

# want_delete_dir DIR: forget every expected path under DIR/.
want_delete_dir ()
{
  local key
  for key in "${!want[@]}"; do
    case $key in
      "$1"/*) unset "want[$key]" ;;
    esac
  done
}

# sorted_keys PREFIX: print the expected paths starting with PREFIX, sorted.
sorted_keys ()
{
  local key
  for key in "${!want[@]}"; do
    case $key in "$1"*) echo "$key" ;; esac
  done | sort
}

# phase_copy: copy the corpus into $dir/tree part by part.
phase_copy ()
{
  local part hash path
  mkdir "$dir/tree"
  for (( part = 0; part < PARTS; part++ )); do
    cp -a "$corpus/part-0$part" "$dir/tree/"
    [ "$part" -ne $(( PARTS / 2 - 1 )) ] || step copy-half
  done
  while read -r hash path; do
    want["./tree/${path#./}"]=$hash
  done <"$corpus/SHA256SUMS"
  step copy-done
}

# phase_rename: rename every 5th file (one mv each) and a directory.
phase_rename ()
{
  local -a keys
  local i
  mapfile -t keys < <(sorted_keys ./tree/)
  for (( i = 0; i < ${#keys[@]}; i += 5 )); do
    mv "$dir/${keys[i]}" "$dir/${keys[i]}.renamed"
    want_move_file "${keys[i]}" "${keys[i]}.renamed"
    renamed=$(( renamed + 1 ))
  done
  mv "$dir/tree/part-03" "$dir/tree/part-03.moved"
  want_move_dir ./tree/part-03 ./tree/part-03.moved
  renamed=$(( renamed + 1 ))
  step renamed
}

# phase_delete: delete every 7th file (in one rm) and a whole directory.
phase_delete ()
{
  local -a keys victims=()
  local i
  mapfile -t keys < <(sorted_keys ./tree/)
  for (( i = 3; i < ${#keys[@]}; i += 7 )); do
    victims+=("$dir/${keys[i]}")
    unset "want[${keys[i]}]"
  done
  rm -- "${victims[@]}"
  deleted=$(( deleted + ${#victims[@]} + $(sorted_keys ./tree/part-07/ | wc -l) ))
  rm -r "$dir/tree/part-07"
  want_delete_dir ./tree/part-07
  step deleted
}

# phase_fsync: whole files written with fsync, an append-only log with an
# fsync after every record, and overwrites in place with fsync.
phase_fsync ()
{
  local -a keys
  local i rec key off
  mkdir "$dir/fsync"
  mapfile -t keys < <(sorted_keys ./tree/)
  for (( i = 0; i < 30; i++ )); do
    cat "$dir/${keys[i * 11 % ${#keys[@]}]}" "$dir/${keys[i * 17 % ${#keys[@]}]}" \
        >"$state/blob"
    printf 'blob %d\n' "$i" >>"$state/blob"
    dd if="$state/blob" of="$dir/fsync/blob-$i" bs=64k conv=fsync status=none
    want["./fsync/blob-$i"]=$(hash_of "$state/blob")
    fsyncs=$(( fsyncs + 1 ))
  done
  : >"$state/log"
  for (( i = 0; i < 100; i++ )); do
    printf -v rec 'record %04d %s\n' "$i" "${keys[i * 7 % ${#keys[@]}]}"
    printf '%s' "$rec" >>"$state/log"
    printf '%s' "$rec" |
      dd of="$dir/fsync/log" oflag=append conv=notrunc,fsync status=none
    fsyncs=$(( fsyncs + 1 ))
  done
  want[./fsync/log]=$(hash_of "$state/log")
  for (( i = 0; i < 20; i++ )); do
    key=${keys[i * 13 % ${#keys[@]}]}
    cp "$dir/$key" "$state/blob"
    off=$(( $(stat -c %s "$state/blob") / 2 ))
    printf 'overwritten %d\n' "$i" |
      dd of="$state/blob" bs=1 seek="$off" conv=notrunc status=none
    printf 'overwritten %d\n' "$i" |
      dd of="$dir/$key" bs=1 seek="$off" conv=notrunc,fsync status=none
    want[$key]=$(hash_of "$state/blob")
    fsyncs=$(( fsyncs + 1 ))
  done
  sync -f "$dir"
  step fsync-done
}

# git_ ARGS...: git in the repository, with fixed identities and dates so
# that the same corpus always gives the same commits.
git_ ()
{
  GIT_AUTHOR_NAME=workload GIT_AUTHOR_EMAIL=workload@localhost \
  GIT_COMMITTER_NAME=workload GIT_COMMITTER_EMAIL=workload@localhost \
  GIT_AUTHOR_DATE="@$(( 1700000000 + commits * 60 )) +0000" \
  GIT_COMMITTER_DATE="@$(( 1700000000 + commits * 60 )) +0000" \
    git -C "$dir/repo" "$@"
}

# phase_git: a repository with many commits (files added from the corpus,
# one file changed in every commit, directories moved and removed), then
# gc and fsck, with fsync on every object, pack, index and ref.
phase_git ()
{
  local c n=${WORKLOAD_COMMITS:-24}
  git -c init.defaultBranch=main init -q --template= "$dir/repo"
  git_ config core.fsync all
  git_ config core.fsyncMethod fsync
  git_ config gc.auto 0
  for (( c = 1; c <= n; c++ )); do
    (cd "$corpus/part-0$(( c % PARTS ))" &&
       find . -type f | sort | awk -v c="$c" 'NR % 4 == c % 4' |
       tar -cf - --no-recursion -T -) | (mkdir "$dir/repo/c$c" && tar -C "$dir/repo/c$c" -xf -)
    echo "change $c" >>"$dir/repo/CHANGES"
    if [ $(( c % 4 )) -eq 0 ]; then
      git_ mv "c$(( c - 1 ))" "moved-c$(( c - 1 ))"
    fi
    if [ $(( c % 5 )) -eq 0 ]; then
      if [ -d "$dir/repo/c$(( c - 2 ))" ]; then
        git_ rm -rq "c$(( c - 2 ))"
      else
        git_ rm -rq "moved-c$(( c - 2 ))"
      fi
    fi
    git_ add -A
    git_ commit -qm "commit $c"
    commits=$c
    [ "$c" -ne $(( n / 2 )) ] || step git-half
  done
  git_ gc -q --prune=now
  git_ fsck --full --strict --no-progress
  git_ rev-parse HEAD >"$state/head"
  git_ count-objects -v >"$state/objects"
  step git-done
}

# snapshot DIR OUT: hash every regular file under DIR into OUT.manifest
# and list its directories into OUT.dirs (paths relative to DIR, sorted).
snapshot ()
{
  (cd "$1" &&
     find . -path ./lost+found -prune -o -type f -print0 | sort -z |
       xargs -0 -r sha256sum) >"$2.manifest"
  (cd "$1" && find . -path ./lost+found -prune -o -type d -print | sort) >"$2.dirs"
}

# check_expected: the files the workload knows hold what they must (the
# application's view, before anything is reread from the device).
check_expected ()
{
  local key
  for key in "${!want[@]}"; do
    echo "${want[$key]}  $key"
  done | sort -k2 >"$state/expected"
  grep -E '  \./(tree|fsync)/' "$state/manifest" | sort -k2 >"$state/known"
  if ! cmp -s "$state/expected" "$state/known"; then
    diff "$state/expected" "$state/known" | head -n 20 >&2
    die "files under $dir differ from what was written"
  fi
}

# run CORPUS DIR STATE: the workload (see the header).
run ()
{
  local t0 bytes files objects pack
  corpus=$1 dir=$2 state=$3
  declare -gA want=()
  renamed=0 deleted=0 fsyncs=0 commits=0
  [ -s "$corpus/SHA256SUMS" ] || die "$corpus is not a corpus (no SHA256SUMS)"
  mkdir -p "$state"
  : >"$state/progress"
  t0=$(now)
  times=
  timed copy phase_copy
  timed rename phase_rename
  timed delete phase_delete
  timed fsync phase_fsync
  timed git phase_git
  timed sync sync -f "$dir"
  snapshot "$dir" "$state/snap"
  mv "$state/snap.manifest" "$state/manifest"
  mv "$state/snap.dirs" "$state/dirs"
  check_expected
  files=$(wc -l <"$state/manifest")
  bytes=$(cd "$dir" && find . -path ./lost+found -prune -o -type f -printf '%s\n' |
          awk '{ s += $1 } END { print s + 0 }')
  objects=$(awk '/^in-pack:/ { print $2 }' "$state/objects")
  pack=$(awk '/^size-pack:/ { print $2 * 1024 }' "$state/objects")
  echo "WORKLOAD files=$files dirs=$(wc -l <"$state/dirs") bytes=$bytes" \
       "corpus_files=$(wc -l <"$corpus/SHA256SUMS") renamed=$renamed" \
       "deleted=$deleted fsyncs=$fsyncs git_commits=$commits" \
       "git_objects=$objects git_pack_bytes=$pack" \
       "seconds=$(elapsed "$t0")"
  echo "WORKLOAD-SECONDS$times"
}

# verify DIR STATE: recheck everything `run` recorded (see the header).
verify ()
{
  local dir=$1 state=$2 head
  [ -s "$state/manifest" ] || die "$state has no manifest: run the workload first"
  snapshot "$dir" "$state/now"
  if ! cmp -s "$state/manifest" "$state/now.manifest"; then
    diff "$state/manifest" "$state/now.manifest" | head -n 20 >&2
    die "file contents under $dir differ from what the workload left"
  fi
  if ! cmp -s "$state/dirs" "$state/now.dirs"; then
    diff "$state/dirs" "$state/now.dirs" | head -n 20 >&2
    die "directories under $dir differ from what the workload left"
  fi
  git -C "$dir/repo" fsck --full --strict --no-progress ||
    die "git fsck failed in $dir/repo"
  head=$(git -C "$dir/repo" rev-parse HEAD)
  [ "$head" = "$(cat "$state/head")" ] ||
    die "HEAD is $head, the workload left $(cat "$state/head")"
  [ -z "$(git -C "$dir/repo" --no-optional-locks status --porcelain)" ] ||
    die "the work tree of $dir/repo differs from HEAD"
  echo "VERIFY files=$(wc -l <"$state/now.manifest") dirs=$(wc -l <"$state/now.dirs")" \
       "git_head=$head: all match"
}

case ${1:-} in
  corpus) [ $# -ge 2 ] && [ $# -le 4 ] || die "usage: $prog corpus DEST [MAX_FILES [MAX_BYTES]]"
          shift; corpus "$@" ;;
  run)    [ $# -eq 4 ] || die "usage: $prog run CORPUS DIR STATE"
          shift; run "$@" ;;
  verify) [ $# -eq 3 ] || die "usage: $prog verify DIR STATE"
          shift; verify "$@" ;;
  *)      die "usage: $prog corpus|run|verify ..." ;;
esac
