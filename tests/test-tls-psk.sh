#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Legs over TLS with pre-shared keys (nbdkit --tls=require --tls-psk),
# in both shapes (DESIGN.md section 15).
#
# Plugin: legs 0 and 1 are plain nbd+unix URIs made TLS by the
# parameters (tls=require tls-psk=FILE tls-username=alice); leg 2 names
# its own user and key file in its URI (nbds+unix://bob@/?socket=...
# &tls-psk-file=...), which win over the parameters' (its server knows
# only bob, with another key).  Data written through the controller is
# read back, every leg holds it (read over TLS by nbdcopy) and every
# leg connection negotiated TLS.  Leg 1 is killed, more is written, it
# is restarted and resynced over TLS: all legs equal again.  nbdrep
# inspect reads leg 1 with --tls-psk/--tls-username and leg 2 by its
# URI, and fails on leg 1 without TLS options.
# Filter: leg 0 a local file, legs 1 and 2 TLS replicas by the
# parameters; data written, every leg equal.

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

psk=$tmpdir/keys.psk
make_psk "$psk" alice
make_psk "$tmpdir/bob.psk" bob

# uri_alice N: replica N's URI with alice's key in it (for nbdcopy).
uri_alice ()
{
  echo "nbds+unix://alice@/?socket=$tmpdir/r$1.sock&tls-psk-file=$psk"
}
uri_bob2="nbds+unix://bob@/?socket=$tmpdir/r2.sock&tls-psk-file=$tmpdir/bob.psk"

# --- Plugin shape.
start_replica 0 --file 32M -- --tls=require --tls-psk="$psk"
start_replica 1 --file 32M -- --tls=require --tls-psk="$psk"
start_replica 2 --file 32M -- --tls=require --tls-psk="$tmpdir/bob.psk"
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" "$uri_bob2" \
  tls=require tls-psk="$psk" tls-username=alice control="$ctl"
wait_volume_state 30 "$ctl" healthy
size=$("$NBDINFO" --size "$c_uri")
truncate -s "$size" "$tmpdir/expected"
write_random "$c_uri" "$tmpdir/expected" 0 $(( 2 * MiB ))
write_random "$c_uri" "$tmpdir/expected" $(( 9 * MiB + 4096 )) $(( 1 * MiB ))
compare_legs "$tmpdir/expected" "$c_uri" "$(uri_alice 0)" "$(uri_alice 1)" \
  "$uri_bob2"
# Three legs, connections=4 each: every connection negotiated TLS.
test "$(tls_connections "$tmpdir/c.log")" -ge 12

# A leg killed, written around, restarted: resynced over TLS.
kill_replica 1
write_random "$c_uri" "$tmpdir/expected" $(( 4 * MiB )) $(( 2 * MiB ))
wait_leg_state 10 "$ctl" 1 failed
restart_replica 1
wait_leg_state 30 "$ctl" 1 uptodate
wait_volume_state 10 "$ctl" healthy
test "$(nbdrep_status_get "$ctl" 's["legs"][1]["last_resync"]["kind"]')" = \
  incremental
compare_legs "$tmpdir/expected" "$c_uri" "$(uri_alice 0)" "$(uri_alice 1)" \
  "$uri_bob2"

# nbdrep inspect over TLS: by the options, by the URI; not without.
"$NBDREP" inspect --tls=require --tls-psk="$psk" --tls-username=alice \
  "$r1_uri" >"$tmpdir/inspect.out"
grep -q '^superblock: copy [01] (seq [0-9]*) is current' "$tmpdir/inspect.out"
"$NBDREP" inspect --json "$uri_bob2" >"$tmpdir/inspect.json"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["superblock"]' \
  "$tmpdir/inspect.json"
rc=0
"$NBDREP" inspect "$r1_uri" 2>"$tmpdir/inspect.err" || rc=$?
cat "$tmpdir/inspect.err"
test "$rc" -eq 1
grep -qF "server requires TLS encryption first" "$tmpdir/inspect.err"
stop_controller c

# --- Filter shape: the local leg 0 and two TLS replicas.
start_replica 3 --file 32M -- --tls=require --tls-psk="$psk"
start_replica 4 --file 32M -- --tls=require --tls-psk="$psk"
truncate -s 32M "$tmpdir/local.img"
fctl=$tmpdir/f.ctl
start_controller f --filter="$FILTER" file "$tmpdir/local.img" \
  replica="$r3_uri" replica="$r4_uri" \
  tls=require tls-psk="$psk" tls-username=alice control="$fctl"
wait_volume_state 30 "$fctl" healthy
size=$("$NBDINFO" --size "$f_uri")
truncate -s "$size" "$tmpdir/fexpected"
write_random "$f_uri" "$tmpdir/fexpected" 4096 $(( 3 * MiB ))
compare_legs "$tmpdir/fexpected" "$f_uri" "$tmpdir/local.img" \
  "$(uri_alice 3)" "$(uri_alice 4)"
test "$(tls_connections "$tmpdir/f.log")" -ge 8
