#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every bad start is refused: nbdkit exits non-zero without serving (the
# --run command never runs) and stderr names the problem (DESIGN.md
# sections 6 and 10): an unknown key, malformed URIs (one libnbd cannot
# parse among them), a malformed size, a chunk that is not a power of
# two, duplicate legs (the same URI twice, the same socket written two
# ways libnbd reads alike, and the same storage under two URIs: two
# legs holding the same leg UUID), connections=0, a quorum larger than
# the legs, a leg unreachable at start (plugin and filter shape;
# wait=1), a leg too
# small for any metadata and a new member too small for the volume
# (both named), a leg of another volume (named, and not written to),
# and a new volume over legs holding data (the legs named, nothing
# written).  Legs of different sizes are not refused: the volume
# follows the smallest.  init=copy (leg 1 becomes leg 0's data after
# the resync), init=zero (all zeroes) and init=assume-clean (healthy at
# once, nothing copied) each work.  Every refusal case is checked even
# when an earlier one fails; the failing cases are listed at the end.

source ./functions.sh
set -euo pipefail
set -x

requires_plugin file
requires_nbdinfo
requires python3 -c 'import json'

MIB=$(( 1024 * 1024 ))

# nbdkit as start_controller runs it (with the sanitizer's runtime).
nbdkit_cmd=("$NBDKIT")
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" "$NBDKIT")
fi

failed_cases=()

# How long a refused start may take.  Under a sanitizer runtime nbdkit
# can hang in exit() after refusing (see _unloaded_but_stuck in
# functions.sh): the refusal is then judged by its message, and the
# timeout ends the process (SIGKILL 5 s after the SIGTERM, which a
# process stuck in exit() no longer acts on).
refuse_timeout=60
if [ "$SANITIZER" != no ]; then
  refuse_timeout=10
fi

# refuse NAME [-m TEXT]... -- ARGS...: `nbdkit -U SOCK ARGS... --run
# CMD` must exit non-zero, never run CMD, and print every TEXT (fixed
# strings) on stderr (kept in $tmpdir/refuse-NAME.log).  A case that
# fails is recorded in failed_cases and the test goes on.
#
# The filter starts the volume in .after_fork, which nbdkit calls after
# it has started the --run command (the plugin underneath cannot be
# used earlier): its refusals are checked in the foreground instead
# (REFUSE_FOREGROUND=1: `nbdkit -f`, which must exit non-zero).
refuse ()
{
  local name=$1 log rc=0 text
  local -a texts=() run=(--run "touch $tmpdir/served")
  shift
  while [ "$1" != -- ]; do
    texts+=("$2")
    shift 2
  done
  shift
  log=$tmpdir/refuse-$name.log
  rm -f "$tmpdir/served" "$tmpdir/refused.sock"
  if [ "${REFUSE_FOREGROUND:-0}" = 1 ]; then
    run=(-f)
  fi
  timeout -k 5 "$refuse_timeout" "${nbdkit_cmd[@]}" -U "$tmpdir/refused.sock" "$@" \
    "${run[@]}" </dev/null >"$log" 2>&1 || rc=$?
  cat "$log"
  if [ "$rc" -eq 0 ] || [ -e "$tmpdir/served" ]; then
    echo "$0: $name: not refused (exit status $rc, served: $(
          [ -e "$tmpdir/served" ] && echo yes || echo no))"
    failed_cases+=("$name")
    return 0
  fi
  for text in "${texts[@]}"; do
    if ! grep -qF -- "$text" "$log"; then
      echo "$0: $name: the message does not say: $text"
      failed_cases+=("$name")
      return 0
    fi
  done
}

# uri N: the URI of replica N.
uri ()
{
  local var=r$1_uri
  echo "${!var}"
}

# fingerprint FILE: checksums of FILE's last 8 KiB (where the superblock
# is) and of the whole file.
fingerprint ()
{
  tail -c 8192 "$1" | md5sum
  md5sum <"$1"
}

# put_data IMG SEED: write 1 MiB of data (from SEED) at 5 MiB and 64
# KiB at 40 MiB into IMG.
put_data ()
{
  python3 - "$1" "$2" <<'PYEOF'
import random, sys
path, seed = sys.argv[1], int(sys.argv[2])
rnd = random.Random(seed)
with open(path, "r+b") as f:
    f.seek(5 * 1024 * 1024)
    f.write(rnd.randbytes(1024 * 1024))
    f.seek(40 * 1024 * 1024)
    f.write(rnd.randbytes(64 * 1024))
PYEOF
}

# ---------------------------------------------------------------------
# Bad parameters, over two blank legs that must stay blank.

start_replica 0 64M
start_replica 1 64M
r0=$(uri 0) r1=$(uri 1)

refuse unknown-key -m "unknown parameter 'foo'" -- \
  "$PLUGIN" "$r0" "$r1" foo=bar
refuse malformed-uri -m "replica=nbd://[bad" -- \
  "$PLUGIN" "$r0" "nbd://[bad"
refuse no-socket -m "replica=nbd+unix:///" -m "socket" -- \
  "$PLUGIN" "$r0" "nbd+unix:///"
refuse bad-port -m "nbd://host:notaport" -m "port" -- \
  "$PLUGIN" "$r0" "nbd://host:notaport"
refuse bad-scheme -m "http://example.com/" -m "scheme" -- \
  "$PLUGIN" "$r0" "http://example.com/"
refuse chunk-abc -m "chunk=abc" -m "not a size" -- \
  "$PLUGIN" "$r0" "$r1" chunk=abc
refuse chunk-3000 -m "chunk=3000" -m "power of two" -- \
  "$PLUGIN" "$r0" "$r1" chunk=3000
refuse chunk-96K -m "chunk=96K" -m "power of two" -- \
  "$PLUGIN" "$r0" "$r1" chunk=96K
refuse duplicate-leg -m "duplicate leg" -m "leg 2 is the same as leg 0" -- \
  "$PLUGIN" "$r0" "$r1" "$r0"
refuse duplicate-replica-key -m "duplicate leg" -m "$r1" -- \
  "$PLUGIN" "$r0" "$r1" replica="$r1"
# The same leg as libnbd reads URIs (xmlParseURI, then its own split of
# the query): ';' ends socket= when no '&' follows, and "%73ocket" is
# socket.  Before leg URIs were split with libxml2, both were a third,
# distinct leg (the second one refused for want of a socket).
refuse duplicate-leg-semicolon -m "duplicate leg" \
  -m "leg 2 is the same as leg 0" -- "$PLUGIN" "$r0" "$r1" "$r0;x=1"
refuse duplicate-leg-escaped -m "duplicate leg" \
  -m "leg 2 is the same as leg 0" -- \
  "$PLUGIN" "$r0" "$r1" "${r0/socket=/%73ocket=}"
refuse unparsable-uri -m "replica=nbd://host/e{x}" \
  -m "not a URI libnbd can parse" -- "$PLUGIN" "$r0" "nbd://host/e{x}"
refuse connections-0 -m "connections=0" -- \
  "$PLUGIN" "$r0" "$r1" connections=0
refuse quorum-3-of-2 -m "quorum=3" -m "number of legs (2)" -- \
  "$PLUGIN" "$r0" "$r1" quorum=3
refuse async-quorum -m "quorum=2" -m "number of synchronous legs (1)" -- \
  "$PLUGIN" "$r0" async="$r1" quorum=2
refuse async-only -m "every leg is asynchronous" -- \
  "$PLUGIN" async="$r0" async="$r1"
refuse async-no-metadata -m "async=URI needs metadata=internal" -- \
  "$PLUGIN" "$r0" async="$r1" metadata=none
refuse async-buffer-alone -m "async-buffer is given without async=URI" -- \
  "$PLUGIN" "$r0" "$r1" async-buffer=8M
refuse async-buffer-small -m "async-buffer=64K" -m "at least 1M" -- \
  "$PLUGIN" "$r0" async="$r1" async-buffer=64K
refuse async-full-word -m "async-full=later" -- \
  "$PLUGIN" "$r0" async="$r1" async-full=later
refuse async-prefer -m "prefer=1 names an asynchronous leg" -m "force=true" -- \
  "$PLUGIN" "$r0" async="$r1" prefer=1
refuse async-duplicate -m "duplicate leg" -- \
  "$PLUGIN" "$r0" async="$r0"
refuse filter-chunk-abc -m "chunk=abc" -- \
  --filter="$FILTER" file "$tmpdir/r0.img" replica="$r1" chunk=abc

# --- A leg unreachable at start (nothing listens on the socket).
nowhere="nbd+unix:///?socket=$tmpdir/nowhere.sock"
start=$EPOCHREALTIME
refuse unreachable -m "Unreachable: leg 1 ($nowhere)" -- \
  "$PLUGIN" "$r0" "$nowhere" wait=1
elapsed=$(( (${EPOCHREALTIME/./} - ${start/./}) / 1000000 ))
if [ "$SANITIZER" = no ]; then
  test "$elapsed" -lt 10      # wait=1 is honoured (a sanitized exit can hang)
fi
truncate -s 64M "$tmpdir/local.img"
REFUSE_FOREGROUND=1 \
refuse filter-unreachable -m "Unreachable: leg 1 ($nowhere)" -- \
  --filter="$FILTER" file "$tmpdir/local.img" replica="$nowhere" wait=1

# None of that wrote anything.
for img in "$tmpdir/r0.img" "$tmpdir/r1.img" "$tmpdir/local.img"; do
  cmp -n $(( 64 * MIB )) "$img" /dev/zero
done
stop_replica 0
stop_replica 1

# ---------------------------------------------------------------------
# Sizes.

# --- Legs of different sizes: the volume follows the smallest; its
# size is exactly that of a volume on two legs of the smaller size.
start_replica 2 64M
start_replica 3 32M
start_controller mixed "$PLUGIN" "$(uri 2)" "$(uri 3)"
mixed_size=$(nbdinfo --size "$mixed_uri")
stop_controller mixed
start_replica 4 32M
start_replica 5 32M
start_controller small "$PLUGIN" "$(uri 4)" "$(uri 5)"
test "$mixed_size" -eq "$(nbdinfo --size "$small_uri")"
test "$mixed_size" -lt $(( 32 * MIB ))
stop_controller small
stop_replica 4
stop_replica 5

# --- A new member too small for the volume: refused, named, untouched.
start_replica 8 16M
refuse small-new-member -m "leg 2 ($(uri 8)) is too small" -- \
  "$PLUGIN" "$(uri 2)" "$(uri 3)" "$(uri 8)" wait=1
cmp -n $(( 16 * MIB )) "$tmpdir/r8.img" /dev/zero
stop_replica 2
stop_replica 3
stop_replica 8

# --- A leg too small to hold any metadata: refused, naming that leg.
start_replica 6 64M
start_replica 7 4K
refuse tiny-leg -m "$(uri 7)" -m "too small" -- \
  "$PLUGIN" "$(uri 6)" "$(uri 7)"
cmp -n $(( 64 * MIB )) "$tmpdir/r6.img" /dev/zero
stop_replica 6
stop_replica 7

# ---------------------------------------------------------------------
# Legs of other volumes.

# Volume A on r9, r10 and volume B on r11, r12, both stopped.
for r in 9 10 11 12 13; do start_replica "$r" 64M; done
start_controller a "$PLUGIN" "$(uri 9)" "$(uri 10)"
stop_controller a
start_controller b "$PLUGIN" "$(uri 11)" "$(uri 12)"
stop_controller b

# --- Leg 0 of A, a blank leg, and leg 0 of B: B's leg is named and
# nothing is written anywhere.
before_b=$(fingerprint "$tmpdir/r11.img")
before_a=$(fingerprint "$tmpdir/r9.img")
refuse foreign-leg -m "leg 2 is in volume" -- \
  "$PLUGIN" "$(uri 9)" "$(uri 13)" "$(uri 11)" wait=1
test "$(fingerprint "$tmpdir/r11.img")" = "$before_b"
test "$(fingerprint "$tmpdir/r9.img")" = "$before_a"
cmp -n $(( 64 * MIB )) "$tmpdir/r13.img" /dev/zero

# --- The same storage twice: r20 serves r9's file, so legs 0 and 1
# hold the same leg UUID (and A's member r10 is missing).  Not two
# copies: refused.
ln -s r9.img "$tmpdir/r20.img"
start_replica 20
refuse same-storage-twice -m "leg 1" -m "$(uri 20)" -- \
  "$PLUGIN" "$(uri 9)" "$(uri 20)" wait=1
for r in 9 10 11 12 13 20; do stop_replica "$r"; done

# ---------------------------------------------------------------------
# A new volume over legs holding data.

# Both legs hold (different) data: refused naming both, nothing written.
start_replica 14 64M
start_replica 15 64M
put_data "$tmpdir/r14.img" 14
put_data "$tmpdir/r15.img" 15
before_14=$(md5sum <"$tmpdir/r14.img")
before_15=$(md5sum <"$tmpdir/r15.img")
refuse data-on-both -m "leg(s) 0, 1 hold data" -m "init=copy" -- \
  "$PLUGIN" "$(uri 14)" "$(uri 15)"
test "$(md5sum <"$tmpdir/r14.img")" = "$before_14"
test "$(md5sum <"$tmpdir/r15.img")" = "$before_15"

# init=copy: leg 0 is the source; after the resync leg 1 holds leg 0's
# data area.
cp "$tmpdir/r14.img" "$tmpdir/leg0-before.img"
start_controller copy "$PLUGIN" "$(uri 14)" "$(uri 15)" init=copy \
  control="$tmpdir/copy.ctl"
size=$(nbdinfo --size "$copy_uri")
wait_volume_state 30 "$tmpdir/copy.ctl" healthy
test "$(nbdrep_status_get "$tmpdir/copy.ctl" \
          's["legs"][1]["last_resync"]["kind"]')" = full
truncate -s "$size" "$tmpdir/leg0-before.img"
compare_legs "$tmpdir/leg0-before.img" "$(uri 14)" "$(uri 15)" "$copy_uri"
stop_controller copy
stop_replica 14
stop_replica 15

# Only leg 1 holds data: refused naming leg 1 alone; then init=zero
# zeroes both.
start_replica 16 64M
start_replica 17 64M
put_data "$tmpdir/r17.img" 17
refuse data-on-leg-1 -m "leg(s) 1 hold data" -- \
  "$PLUGIN" "$(uri 16)" "$(uri 17)"
if grep -qF "leg(s) 0" "$tmpdir/refuse-data-on-leg-1.log"; then
  echo "$0: data-on-leg-1: blank leg 0 named as holding data"
  failed_cases+=(data-on-leg-1)
fi
start_controller zero "$PLUGIN" "$(uri 16)" "$(uri 17)" init=zero \
  control="$tmpdir/zero.ctl"
size=$(nbdinfo --size "$zero_uri")
test "$(volume_state "$tmpdir/zero.ctl")" = healthy
truncate -s "$size" "$tmpdir/zeroes.img"
compare_legs "$tmpdir/zeroes.img" "$(uri 16)" "$(uri 17)" "$zero_uri"
stop_controller zero
stop_replica 16
stop_replica 17

# init=assume-clean over two legs holding the same data: healthy at
# once, nothing resynced, the data as it was.
start_replica 18 64M
start_replica 19 64M
put_data "$tmpdir/r18.img" 18
put_data "$tmpdir/r19.img" 18
cp "$tmpdir/r18.img" "$tmpdir/clean-before.img"
start_controller clean "$PLUGIN" "$(uri 18)" "$(uri 19)" \
  init=assume-clean control="$tmpdir/clean.ctl"
test "$(volume_state "$tmpdir/clean.ctl")" = healthy
test "$(nbdrep_status_get "$tmpdir/clean.ctl" \
          '[l["last_resync"] for l in s["legs"]]')" = "[None, None]"
test "$(nbdrep_status_get "$tmpdir/clean.ctl" \
          'max(l["bytes_written"] for l in s["legs"])')" -lt "$MIB"
size=$(nbdinfo --size "$clean_uri")
truncate -s "$size" "$tmpdir/clean-before.img"
compare_legs "$tmpdir/clean-before.img" "$(uri 18)" "$(uri 19)" "$clean_uri"
stop_controller clean

# ---------------------------------------------------------------------
if [ ${#failed_cases[@]} -gt 0 ]; then
  echo "$0: refusal cases that failed: ${failed_cases[*]}"
  exit 1
fi
