#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdrep attach and detach without a kernel NBD device (the kernel tests,
# tests/kernel/guest-nbdrep-attach.sh, attach for real): usage errors
# (exit 2 with a hint), and where the kernel has no nbd driver the
# refusal naming it (exit 1).  Also what attach checks on every
# connection: the controller (plugin and filter shapes) describes its
# export as "nbdkit-replicate volume UUID", its volume's UUID; and what
# the controller's status shows of a device's connections, which attach
# names "nbdrep-attach:/dev/nbdN" (two connections held by nbdsh).

set -euo pipefail
source ./functions.sh
# functions.sh reads unset associative-array members in its cleanup
# hooks, which set -u would abort.
set +u
set -x

requires_nbdinfo
requires_nbdsh
requires jq --version

# expect STATUS PATTERN CMD...: run nbdrep CMD..., which must exit with
# STATUS and print a line matching the grep PATTERN on stderr.
expect ()
{
  local status=$1 pattern=$2 rc=0
  shift 2
  "$NBDREP" "$@" >"$tmpdir/out" 2>"$tmpdir/err" || rc=$?
  cat "$tmpdir/err"
  if [ "$rc" -ne "$status" ]; then
    echo "$0: nbdrep $*: exit status $rc, expected $status" >&2
    return 1
  fi
  if ! grep -q -- "$pattern" "$tmpdir/err"; then
    echo "$0: nbdrep $*: stderr does not match: $pattern" >&2
    return 1
  fi
}

sock=$tmpdir/none.sock
expect 2 'missing operand' attach "$sock"
expect 2 'missing operand' detach
expect 2 "unexpected operand 'x'" detach /dev/nbd0 x
expect 2 "'/dev/sda' is not an NBD device" attach "$sock" /dev/sda
expect 2 "'nbd' is not an NBD device" attach "$sock" nbd
expect 2 "'/dev/nbd1x' is not an NBD device" detach /dev/nbd1x
expect 2 "'nbd-1' is not an NBD device" detach nbd-1
expect 2 "'nbd01' is not an NBD device" detach nbd01
expect 2 "'/dev/nbd0x1' is not an NBD device" detach /dev/nbd0x1
expect 2 "--connections '0' is not a whole number from 1 to 64" \
  attach --connections 0 "$sock" /dev/nbd0
expect 2 "--connections '65' is not a whole number from 1 to 64" \
  attach --connections 65 "$sock" /dev/nbd0
expect 2 "--dead-timeout 'soon' is not a whole number" \
  attach --dead-timeout soon "$sock" /dev/nbd0
expect 2 "--timeout '0' is not a whole number" \
  attach --timeout 0 "$sock" /dev/nbd0
expect 2 "unrecognized option '--bogus'" attach --bogus "$sock" /dev/nbd0
"$NBDREP" attach --help | grep -q -- '--dead-timeout SECS'
"$NBDREP" --help | grep -q 'nbdrep detach DEVICE'

# Without the nbd driver (this test's usual machine: no nbd.ko), both
# refuse before anything else, naming the missing driver.
if [ -e /sys/module/nbd ]; then
  echo "$0: the nbd driver is loaded here: its refusal is not checked"
else
  expect 1 "nbdrep: /dev/nbd0: the kernel has no NBD driver (no \"nbd\" generic netlink family): load it with 'modprobe nbd'" \
    attach "$sock" /dev/nbd0
  expect 1 'nbdrep: /dev/nbd3: the kernel has no NBD driver' detach nbd3
fi

# The export description that attach checks, in both shapes.
start_replica 0 64M
start_replica 1 64M
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
wait_volume_state 60 "$ctl" healthy
uuid=$("$NBDREP" status --json "$ctl" | jq -r .volume.uuid)
nbdinfo --json "$c_uri" | jq -r '.exports[0].description' >"$tmpdir/desc"
[ "$(cat "$tmpdir/desc")" = "nbdkit-replicate volume $uuid" ]
kernel_status ()
{
  export_uri="nbd+unix:///nbdrep-attach:/dev/nbd5?socket=$tmpdir/$1.sock"
  "$NBDSH" -c "
import nbd, subprocess
hs = []
for i in range(2):
    h = nbd.NBD()
    h.connect_uri('$export_uri')
    hs.append(h)
subprocess.run(['$NBDREP', 'status', '--json', '$2'], check=True,
               stdout=open('$tmpdir/held.json', 'w'))
subprocess.run(['$NBDREP', 'status', '$2'], check=True,
               stdout=open('$tmpdir/held.txt', 'w'))
"
  jq -c .volume.kernel "$tmpdir/held.json" >"$tmpdir/kernel"
  [ "$(cat "$tmpdir/kernel")" = '[{"device":"/dev/nbd5","connections":2}]' ]
  grep -qx '  kernel /dev/nbd5 attached (nbdrep attach), 2 connection(s)' \
    "$tmpdir/held.txt"
  # Gone with the connections.
  wait_until 10 sh -c "'$NBDREP' status --json '$2' | jq -e '.volume.kernel == []'"
}
kernel_status c "$ctl"
stop_controller c

fctl=$tmpdir/f.ctl
truncate -s 64M "$tmpdir/f0.img"
start_replica 2 64M
start_controller f --filter="$FILTER" file "$tmpdir/f0.img" \
  replica="$r2_uri" control="$fctl"
wait_volume_state 60 "$fctl" healthy
fuuid=$("$NBDREP" status --json "$fctl" | jq -r .volume.uuid)
[ "$fuuid" != "$uuid" ]
nbdinfo --json "$f_uri" | jq -r '.exports[0].description' >"$tmpdir/desc"
[ "$(cat "$tmpdir/desc")" = "nbdkit-replicate volume $fuuid" ]
kernel_status f "$fctl"
stop_controller f
