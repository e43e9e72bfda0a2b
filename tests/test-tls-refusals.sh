#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A TLS setup that cannot work is a refusal naming the leg and libnbd's
# reason, never "unreachable" (DESIGN.md section 15).
#
# At start (wait=30: a leg taken for unreachable would be waited for,
# then named as unreachable), each of these stops the controller at
# once with "cannot start the volume: leg N (URI) refused: TLS: REASON":
# a wrong PSK key, a user name the server does not know, one missing
# from our key file, a missing key file, a certificates directory
# without ca-cert.pem, a server certificate of another CA (TCP), a
# client certificate the server does not accept, tls=require against a
# server without TLS, no TLS against a server that requires it; in the
# filter shape too.  nbdrep add of a leg with a wrong key is refused
# with the reason.
#
# On a running volume: leg 1's server comes back with another key; the
# leg stays failed with "TLS: ...gnutls_handshake..." in its last_error,
# logged as refused once (not retried every few seconds as an
# unreachable leg is); with the right key again, nbdrep resync brings it
# back at once.

source ./functions.sh
set -euo pipefail
set -x

requires_plugin file
requires_nbdinfo
requires python3 -c 'import json'
source "$abs_top_srcdir/tests/tls-functions.sh"

# nbdkit as start_controller runs it (with the sanitizer's runtime).
nbdkit_cmd=("$NBDKIT")
if [ "$SANITIZER" != no ]; then
  nbdkit_cmd=(env "LD_PRELOAD=$(_sanitizer_runtime)" "$NBDKIT")
fi

psk=$tmpdir/keys.psk
make_psk "$psk" alice
make_psk "$tmpdir/other.psk" alice
make_psk "$tmpdir/bob.psk" bob
make_ca "$tmpdir/ca"
make_ca "$tmpdir/ca2"
make_cert "$tmpdir/ca" "$tmpdir/srv" server
make_cert "$tmpdir/ca" "$tmpdir/cli" client
make_cert "$tmpdir/ca2" "$tmpdir/cli2" client
mkdir "$tmpdir/empty"

start_replica 0 --file 32M -- --tls=require --tls-psk="$psk"
start_replica 1 --file 32M -- --tls=require --tls-psk="$psk"
start_replica 2 --memory 32M
start_replica 3 --memory 32M -- --tls=require \
  --tls-certificates="$tmpdir/srv" --tls-verify-peer
port=$(free_port)
start_replica 4 --memory 32M --port "$port" -- --tls=require \
  --tls-certificates="$tmpdir/srv"

failed_cases=()

# refused NAME LEG TEXT ARGS...: nbdkit -f ARGS... must fail
# before serving, its log saying that leg LEG (its "leg N (URI)" name) was
# refused, with TLS and TEXT (a fixed string) in the reason.  A case that
# fails is recorded and the test goes on.
refused ()
{
  local name=$1 leg=$2 text=$3 log=$tmpdir/refused-$1.log rc=0
  shift 3
  run_bounded "$log" 'cannot start the volume' 60 \
    "${nbdkit_cmd[@]}" -f -U "$tmpdir/refused.sock" "$@" wait=30 || rc=$?
  cat "$log"
  if [ "$rc" -eq 0 ] ||
     ! grep -F "cannot start the volume: $leg refused: TLS: " "$log" |
       grep -qF -- "$text"; then
    echo "$0: $name: not refused as expected (exit status $rc)"
    failed_cases+=("$name")
  fi
}

leg0="leg 0 ($r0_uri)"
refused psk-wrong-key "$leg0" "gnutls_handshake: " \
  "$PLUGIN" "$r0_uri" tls-psk="$tmpdir/other.psk" tls-username=alice
refused psk-unknown-user "$leg0" "gnutls_handshake: " \
  "$PLUGIN" "$r0_uri" tls-psk="$tmpdir/bob.psk" tls-username=bob
refused psk-user-not-in-file "$leg0" \
  "$psk: username carol was not found in PSK file" \
  "$PLUGIN" "$r0_uri" tls-psk="$psk" tls-username=carol
refused psk-missing-file "$leg0" \
  "open: $tmpdir/nope.psk: No such file or directory" \
  "$PLUGIN" "$r0_uri" tls-psk="$tmpdir/nope.psk" tls-username=alice
refused x509-no-ca-cert "leg 0 ($r3_uri)" \
  "tls-certificates=$tmpdir/empty: cannot read $tmpdir/empty/ca-cert.pem" \
  "$PLUGIN" "$r3_uri" tls-certificates="$tmpdir/empty"
refused x509-server-of-another-ca "leg 0 ($r4_uri)" \
  "gnutls_handshake: Error in the certificate verification" \
  "$PLUGIN" "$r4_uri" tls=require tls-certificates="$tmpdir/cli2"
refused x509-client-of-another-ca "leg 0 ($r3_uri)" "gnutls_" \
  "$PLUGIN" "$r3_uri" tls=require tls-certificates="$tmpdir/cli2"
refused server-without-tls "leg 1 ($r2_uri)" "server refused TLS" \
  "$PLUGIN" "$r0_uri" "$r2_uri" tls=require tls-psk="$psk" \
  tls-username=alice
refused server-requires-tls "leg 0 ($r0_uri)" \
  "server requires TLS encryption first" "$PLUGIN" "$r0_uri"
truncate -s 32M "$tmpdir/local.img"
refused filter-wrong-key "leg 1 ($r1_uri)" "gnutls_handshake: " \
  --filter="$FILTER" file "$tmpdir/local.img" replica="$r1_uri" \
  tls-psk="$tmpdir/other.psk" tls-username=alice

if [ ${#failed_cases[@]} -gt 0 ]; then
  echo "$0: failed cases: ${failed_cases[*]}"
  exit 1
fi

# --- A running volume.
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" tls-psk="$psk" \
  tls-username=alice control="$ctl"
wait_volume_state 30 "$ctl" healthy

# nbdrep add of a leg the parameters' key does not open.
start_replica 6 --memory 32M -- --tls=require --tls-psk="$tmpdir/other.psk"
rc=0
"$NBDREP" add "$ctl" "$r6_uri" 2>"$tmpdir/add.err" || rc=$?
cat "$tmpdir/add.err"
test "$rc" -eq 1
grep -qF "$r6_uri: TLS: " "$tmpdir/add.err"

# Leg 1's server comes back with another key.
kill_replica 1
start_replica 1 --file 32M -- --tls=require --tls-psk="$tmpdir/other.psk"
# last_error_is_tls: does leg 1's last_error give the handshake's failure?
last_error_is_tls ()
{
  nbdrep_status_get "$ctl" 's["legs"][1]["last_error"]' |
    grep -q '^TLS: .*gnutls_handshake: '
}
wait_until 30 last_error_is_tls
test "$(leg_state "$ctl" 1)" = failed
refusals ()
{
  grep -cF "leg 1 ($r1_uri) refused: TLS: " "$tmpdir/c.log"
}
test "$(refusals)" -eq 1
# An unreachable leg would have been tried twice more by now (after 4
# and 8 s, or sooner); a refused one waits a minute.
sleep 5
test "$(refusals)" -eq 1
test "$(leg_state "$ctl" 1)" = failed

# The right key again: nbdrep resync tries at once.
kill_replica 1
start_replica 1 --file 32M -- --tls=require --tls-psk="$psk"
"$NBDREP" resync "$ctl" 1
wait_volume_state 15 "$ctl" healthy
