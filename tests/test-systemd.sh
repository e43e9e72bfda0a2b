#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The systemd units of systemd/ (as make builds them, with this tree's
# nbdkit and nbdrep paths): systemd-analyze verify accepts every one of
# them without a word, then their command lines, expanded from the
# example configuration files by systemd-exec.py as systemd would expand
# them, run here: two replica servers (nbdkit-replica@.service, socket
# activated on the path of nbdkit-replica@.socket), the controller over
# them (nbdkit-replicate@.service, socket activated on the path of
# nbdkit-replicate@.socket), whose ExecStartPost must return once it
# answers; data written through the NBD socket is on both legs; the
# metrics unit writes a textfile that promtool accepts, with the
# volume label; the verify unit finds the legs equal; and with a leg
# killed, the metrics say degraded and the verify unit still runs.
# Paths: /etc/nbdkit-replicate, /run and node_exporter's directory map
# into $tmpdir.  Where systemd is PID 1 and we are root,
# test-systemd-live.sh starts the same units with systemd.

source ./functions.sh
set -euo pipefail
set -x

requires systemd-analyze --version
requires python3 --version
requires promtool --version
requires_nbdsh

units_src=$abs_top_srcdir/systemd
units_build=$abs_top_builddir/systemd
sx=("python3" "$abs_top_srcdir/tests/systemd-exec.py")

# The units, as installed, in one directory; nbdrep's installed path
# (from the verify unit) is replaced by the one of this build, which
# systemd-analyze checks is executable.
mkdir "$tmpdir/units"
cp "$units_build"/*@.service "$units_src"/*@.socket "$units_src"/*@.timer \
   "$tmpdir/units/"
mapfile -t argv < <("${sx[@]}" expand "$tmpdir/units/nbdrep-verify@.service" \
                      vol ExecStart)
installed_nbdrep=${argv[0]}
test "$(basename "$installed_nbdrep")" = nbdrep
sed -i "s|$installed_nbdrep|$NBDREP|g" "$tmpdir/units/"*
ls "$tmpdir/units"
test "$(ls "$tmpdir/units" | wc -l)" -eq 8

# systemd-analyze verify: exit status 0 and nothing said (unknown keys
# and the like are only warnings).
(cd "$tmpdir/units" &&
   systemd-analyze verify --man=no \
     ./nbdkit-replica@r0.socket ./nbdkit-replica@r0.service \
     ./nbdkit-replicate@vol.socket ./nbdkit-replicate@vol.service \
     ./nbdrep-verify@vol.service ./nbdrep-verify@vol.timer \
     ./nbdrep-metrics@vol.service ./nbdrep-metrics@vol.timer \
     >"$tmpdir/verify.out" 2>&1) || { cat "$tmpdir/verify.out"; exit 1; }
cat "$tmpdir/verify.out"
test ! -s "$tmpdir/verify.out"

# The configuration: the example files with this test's paths.
mkdir -p "$tmpdir/etc" "$tmpdir/textfile"
maps=(--map "/etc/nbdkit-replicate=$tmpdir/etc" --map "/run=$tmpdir/run"
      --map "/var/lib/prometheus/node-exporter=$tmpdir/textfile"
      --map "/srv/nbdkit-replicate=$tmpdir")
for r in r0 r1; do
  sed "s|/srv/nbdkit-replicate/r0.img|/srv/nbdkit-replicate/$r.img|" \
    "$units_src/replica-example.env" >"$tmpdir/etc/replica-$r.env"
  truncate -s 64M "$tmpdir/$r.img"
done
legs="nbd+unix:///?socket=/run/nbdkit-replicate/replica-r0.sock nbd+unix:///?socket=/run/nbdkit-replicate/replica-r1.sock"
sed "s|^CONTROLLER=\"replicate [^\"]*\"|CONTROLLER=\"$PLUGIN $legs\"|" \
  "$units_src/example.conf" >"$tmpdir/etc/vol.conf"
grep -q "^CONTROLLER=\"$PLUGIN nbd" "$tmpdir/etc/vol.conf"

# start_unit NAME UNIT INSTANCE: start the ExecStart of UNIT@INSTANCE
# (ours: -f -v -P added, as for every server of the tests) on the
# socket of its .socket unit; NAME for stop_server and kill_server.
start_unit ()
{
  local name=$1 unit=$2 instance=$3 sock
  local -a argv nbdkit_wrapper=()
  mapfile -t argv < <("${sx[@]}" expand "$tmpdir/units/$unit@.service" \
                        "$instance" ExecStart "${maps[@]}")
  test "$(basename "${argv[0]}")" = nbdkit
  test -x "${argv[0]}"
  sock=$("${sx[@]}" listen "$tmpdir/units/$unit@.socket" "$instance" \
           "${maps[@]}")
  nbdkit_wrapper=("${sx[@]}" activate "$sock")
  if [ "$SANITIZER" != no ] && [ "$unit" = nbdkit-replicate ]; then
    nbdkit_wrapper=(env "ACTIVATE_PRELOAD=$(_sanitizer_runtime)"
                    "${nbdkit_wrapper[@]}")
  fi
  start_nbdkit -P "$tmpdir/$name.pid" "${argv[@]:1}" || return 1
  _server_pid[$name]=$nbdkit_pid
  [ "$unit" != nbdkit-replica ] || _is_replica[$nbdkit_pid]=1
}

start_unit r0 nbdkit-replica r0
start_unit r1 nbdkit-replica r1
test -S "$tmpdir/run/nbdkit-replicate/replica-r0.sock"
start_unit vol nbdkit-replicate vol
ctl=$tmpdir/run/nbdkit-replicate/vol.ctl
vol_uri="nbd+unix:///?socket=$tmpdir/run/nbdkit-replicate/vol.sock"

# ExecStartPost returns once the controller answers (bounded).
timeout 60 "${sx[@]}" run "$tmpdir/units/nbdkit-replicate@.service" vol \
  ExecStartPost "${maps[@]}"
"$NBDREP" status "$ctl"
wait_volume_state 30 "$ctl" healthy
test "$(nbdrep_status_get "$ctl" 's["volume"]["legs"]')" = 2

# The controller serves on its socket, onto both legs.
"$NBDSH" -u "$vol_uri" -c '
h.pwrite(b"systemd!" * 8192, 1048576)
h.flush()
assert h.pread(65536, 1048576) == b"systemd!" * 8192
'
for r in r0 r1; do
  "$NBDSH" -u "nbd+unix:///?socket=$tmpdir/run/nbdkit-replicate/replica-$r.sock" \
    -c 'assert h.pread(65536, 1048576) == b"systemd!" * 8192'
done

# The metrics unit writes a textfile node_exporter can read, the volume
# label on every sample, and leaves no temporary file.
"${sx[@]}" run "$tmpdir/units/nbdrep-metrics@.service" vol ExecStart "${maps[@]}"
prom=$tmpdir/textfile/nbdkit-replicate-vol.prom
promtool check metrics <"$prom"
grep -q '^nbdkit_replicate_volume_state{volume="vol",state="healthy"} 1$' "$prom"
if grep -v '^#' "$prom" | grep -v '{volume="vol"'; then
  echo "$0: samples without the volume label"; exit 1
fi
test "$(ls "$tmpdir/textfile")" = nbdkit-replicate-vol.prom

# The verify unit: equal legs, exit status 0.
timeout 120 "${sx[@]}" run "$tmpdir/units/nbdrep-verify@.service" vol \
  ExecStart "${maps[@]}"

# A replica killed: the metrics unit reports the volume degraded.
kill_server r1
wait_leg_state 30 "$ctl" 1 failed
"${sx[@]}" run "$tmpdir/units/nbdrep-metrics@.service" vol ExecStart "${maps[@]}"
grep -q '^nbdkit_replicate_volume_state{volume="vol",state="degraded"} 1$' "$prom"
grep -q '^nbdkit_replicate_leg_state{volume="vol",leg="1",state="failed"} 1$' "$prom"

# With the controller gone the metrics unit fails and keeps the file.
stop_server vol
test ! -S "$ctl"
cp "$prom" "$tmpdir/before.prom"
if "${sx[@]}" run "$tmpdir/units/nbdrep-metrics@.service" vol ExecStart \
     "${maps[@]}"; then
  echo "$0: the metrics unit succeeded without a controller"; exit 1
fi
cmp "$prom" "$tmpdir/before.prom"
test "$(ls "$tmpdir/textfile")" = nbdkit-replicate-vol.prom
