#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A store request is read as soon as it is done: the request loop
# (common/backupstore/multi.c, bs_multi_run) polls libcurl only if its
# first pass finished nothing.  Polled anyway, a transfer that pass
# completed left nothing to wake the poll, which slept out its whole
# timeout (1 s) before the result was read: a backup-verify of a tiny
# backup took 0.01, 1 or 2 s by chance.
#
# A WebDAV store (nginx), a backup of 2 MiB (32 blocks); then ten backup-verify
# runs, which must take under 3 s together (each about 0.02 s here;
# with the sleep most took 1 s or more).

source ./functions.sh
source "$abs_top_srcdir/tests/backup-functions.sh"
set -euo pipefail
set -x

requires_nbdsh
requires_webdav

start_nginx
start_replica 0 --file 16M
start_replica 1 --file 16M
ctl=$tmpdir/c.ctl
start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl"
T=$DAV_URL/backups
"$NBDSH" -u "$c_uri" -c "
import os
h.pwrite(os.urandom(2097152), 0)
h.flush()"
"$NBDREP" backup "$ctl" "$T" --block-size 64K --name one

start=$(date +%s%N)
for i in $(seq 1 10); do
  "$NBDREP" backup-verify "$T" one
done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "ten backup-verify runs: $ms ms"
test "$ms" -lt 3000
