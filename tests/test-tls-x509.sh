#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Legs over TLS with X.509 certificates (nbdkit --tls=require
# --tls-certificates=DIR), in both shapes (DESIGN.md section 15).  The
# replica servers check the client's certificate (--tls-verify-peer);
# libnbd checks the server's on TCP (over a Unix socket it has no host
# name to check it against).
#
# Plugin: leg 0 on a Unix socket, leg 1 on TCP (nbds://localhost:PORT),
# both by tls-certificates=DIR alone (tls= unset is on once another tls
# key is given; the servers require TLS).  Data written is read back and
# every leg holds it; nbdrep inspect reads the TCP leg with
# --tls-certificates.  A leg whose certificate names another host is
# accepted with tls-verify=false.
# Filter: leg 0 a local file, legs 1 and 2 X.509 replicas on Unix
# sockets; data written; leg 2 killed, written around, restarted and
# resynced over TLS: every leg equal.

source ./functions.sh
set -euo pipefail
set -x

requires_plugin file
requires_nbdsh
requires_nbdinfo
requires python3 -c 'import json'
source "$abs_top_srcdir/tests/fault-functions.sh"
source "$abs_top_srcdir/tests/tls-functions.sh"

MiB=1048576

make_ca "$tmpdir/ca"
make_cert "$tmpdir/ca" "$tmpdir/srv" server
make_cert "$tmpdir/ca" "$tmpdir/other" server otherhost
make_cert "$tmpdir/ca" "$tmpdir/cli" client
serve=(--tls=require --tls-certificates="$tmpdir/srv" --tls-verify-peer)

# with_certs URI: URI with our certificates in it (for nbdcopy).
with_certs ()
{
  case $1 in
    *\?*) echo "${1/nbd/nbds}&tls-certificates=$tmpdir/cli" ;;
    *) echo "${1/nbd/nbds}/?tls-certificates=$tmpdir/cli" ;;
  esac
}

# --- Plugin shape: a Unix leg and a TCP leg.
port=$(free_port)
start_replica 0 --file 32M -- "${serve[@]}"
start_replica 1 --file 32M --port "$port" -- "${serve[@]}"
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" \
  tls-certificates="$tmpdir/cli" control="$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
truncate -s "$size" "$tmpdir/expected"
write_random "$c_uri" "$tmpdir/expected" 65536 $(( 3 * MiB ))
compare_legs "$tmpdir/expected" "$c_uri" "$(with_certs "$r0_uri")" \
  "$(with_certs "$r1_uri")"
test "$(tls_connections "$tmpdir/c.log")" -ge 8
"$NBDREP" inspect --tls-certificates="$tmpdir/cli" "${r1_uri/nbd/nbds}" \
  >"$tmpdir/inspect.out"
grep -q '^superblock: copy [01] (seq [0-9]*) is current' "$tmpdir/inspect.out"
stop_controller c

# A certificate for another host name: accepted only without checking.
port2=$(free_port)
start_replica 5 --memory 8M --port "$port2" -- --tls=require \
  --tls-certificates="$tmpdir/other"
start_controller v "$PLUGIN" "$r5_uri" tls=require \
  tls-certificates="$tmpdir/cli" tls-verify=false metadata=none
"$NBDINFO" --size "$v_uri"
stop_controller v

# --- Filter shape, with a leg killed and resynced.
start_replica 2 --file 32M -- "${serve[@]}"
start_replica 3 --file 32M -- "${serve[@]}"
truncate -s 32M "$tmpdir/local.img"
fctl=$tmpdir/f.ctl
start_controller f --filter="$FILTER" file "$tmpdir/local.img" \
  replica="$r2_uri" replica="$r3_uri" \
  tls=require tls-certificates="$tmpdir/cli" control="$fctl"
wait_volume_state 30 "$fctl" healthy
size=$("$NBDINFO" --size "$f_uri")
truncate -s "$size" "$tmpdir/fexpected"
write_random "$f_uri" "$tmpdir/fexpected" 0 $(( 2 * MiB ))
kill_replica 3
write_random "$f_uri" "$tmpdir/fexpected" $(( 8 * MiB )) $(( 2 * MiB ))
wait_leg_state 10 "$fctl" 2 failed
restart_replica 3
wait_leg_state 30 "$fctl" 2 uptodate
wait_volume_state 10 "$fctl" healthy
compare_legs "$tmpdir/fexpected" "$f_uri" "$tmpdir/local.img" \
  "$(with_certs "$r2_uri")" "$(with_certs "$r3_uri")"
test "$(tls_connections "$tmpdir/f.log")" -ge 8
