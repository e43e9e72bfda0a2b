#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The systemd units started by systemd itself, where systemd is PID 1
# (skipped elsewhere: test-systemd.sh runs their command lines without
# it).  Units of this build go to /run/systemd/system (runtime units,
# which take precedence over installed ones) and the configuration of a
# volume named after this test's pid to /etc/nbdkit-replicate; all of it
# is stopped and removed at exit.  Two socket-activated replicas, the
# controller over them (systemctl start returns once ExecStartPost has
# seen it answer), data through its NBD socket, the verify and metrics
# units, and Restart=on-failure: the controller killed with SIGKILL is
# started again by systemd and answers again.

source ./functions.sh
set -euo pipefail
set -x

requires_root
[ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ] || _skip "systemd as PID 1"
requires systemctl --version
requires_nbdsh
# systemd starts the controller without the sanitizer's runtime.
[ "$SANITIZER" = no ] || _skip "a build without sanitizer"

id=nbdrt$$
run=/run/nbdkit-replicate
units=(nbdkit-replica@.socket nbdkit-replica@.service
       nbdkit-replicate@.socket nbdkit-replicate@.service
       nbdrep-verify@.service nbdrep-metrics@.service)
created_etc=
[ -d /etc/nbdkit-replicate ] || created_etc=1

# At exit: stop what we started (the controller first), remove our files.
teardown ()
{
  systemctl stop "nbdkit-replicate@$id.service" "nbdkit-replicate@$id.socket"
  systemctl stop "nbdkit-replica@${id}r0.service" "nbdkit-replica@${id}r1.service"
  systemctl stop "nbdkit-replica@${id}r0.socket" "nbdkit-replica@${id}r1.socket"
  systemctl reset-failed "*@$id*" 2>/dev/null
  for u in "${units[@]}"; do
    # Only the files this test wrote (marked below).
    grep -qs "^# test-systemd-live $id\$" "/run/systemd/system/$u" &&
      rm -f "/run/systemd/system/$u"
  done
  rm -f "/etc/nbdkit-replicate/$id.conf" \
        "/etc/nbdkit-replicate/replica-${id}r0.env" \
        "/etc/nbdkit-replicate/replica-${id}r1.env"
  [ -z "$created_etc" ] || rmdir /etc/nbdkit-replicate
  systemctl daemon-reload
}

for u in "${units[@]}"; do
  if [ -e "/run/systemd/system/$u" ]; then
    _skip "/run/systemd/system/$u exists (another test run?)"
  fi
done
cleanup_fn teardown
mkdir -p /etc/nbdkit-replicate
for u in "${units[@]}"; do
  src=$abs_top_builddir/systemd/$u
  [ -f "$src" ] || src=$abs_top_srcdir/systemd/$u
  installed_nbdrep=$(sed -n 's|.*[ =]\(/[^ ]*/nbdrep\) .*|\1|p' "$src" | sed -n 1p)
  { echo "# test-systemd-live $id"
    if [ -n "$installed_nbdrep" ]; then
      sed "s|$installed_nbdrep|$NBDREP|g" "$src"
    else
      cat "$src"
    fi
  } >"/run/systemd/system/$u"
done
for r in r0 r1; do
  truncate -s 64M "$tmpdir/$r.img"
  echo "PLUGIN=\"file $tmpdir/$r.img\"" >"/etc/nbdkit-replicate/replica-$id$r.env"
done
cat >"/etc/nbdkit-replicate/$id.conf" <<CONF
CONTROLLER="$PLUGIN nbd+unix:///?socket=$run/replica-${id}r0.sock nbd+unix:///?socket=$run/replica-${id}r1.sock"
PARAMETERS="timeout=5"
TEXTFILE_DIR="$tmpdir"
CONF
systemctl daemon-reload

systemctl start "nbdkit-replica@${id}r0.socket" "nbdkit-replica@${id}r1.socket"
timeout 120 systemctl start "nbdkit-replicate@$id.socket" "nbdkit-replicate@$id.service"
ctl=$run/$id.ctl
"$NBDREP" status "$ctl"
wait_volume_state 30 "$ctl" healthy
"$NBDSH" -u "nbd+unix:///?socket=$run/$id.sock" -c '
h.pwrite(b"systemd!" * 8192, 0)
h.flush()
assert h.pread(65536, 0) == b"systemd!" * 8192
'
systemctl is-active "nbdkit-replica@${id}r0.service" "nbdkit-replica@${id}r1.service"

timeout 120 systemctl start "nbdrep-verify@$id.service"
systemctl start "nbdrep-metrics@$id.service"
grep -q "^nbdkit_replicate_volume_state{volume=\"$id\",state=\"healthy\"} 1$" \
  "$tmpdir/nbdkit-replicate-$id.prom"

# Restart=on-failure: a killed controller is started again.
pid=$(systemctl show -p MainPID --value "nbdkit-replicate@$id.service")
test "$pid" -gt 0
kill -KILL "$pid"
wait_until 60 sh -c "p=\$(systemctl show -p MainPID --value nbdkit-replicate@$id.service); [ \"\$p\" -gt 0 ] && [ \"\$p\" != $pid ]"
wait_until 60 "$NBDREP" status "$ctl"
"$NBDSH" -u "nbd+unix:///?socket=$run/$id.sock" -c '
assert h.pread(65536, 0) == b"systemd!" * 8192
'
