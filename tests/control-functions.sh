# SPDX-License-Identifier: BSD-3-Clause
# tests/control-functions.sh: what the tests of the control server
# (test-control-*.sh, test-backup-hold.sh) share; sourced after
# functions.sh.

requires python3 -c 'import json'

# start_control_volume: replicas 0 and 1 and controller c over them,
# its control socket at $ctl ($tmpdir/c.ctl); wait until it is healthy.
start_control_volume ()
{
  ctl=$tmpdir/c.ctl
  start_replica 0 || return 1
  start_replica 1 || return 1
  start_controller c "$PLUGIN" "$r0_uri" "$r1_uri" control="$ctl" ||
    return 1
  wait_volume_state 60 "$ctl" healthy
}

# control_python <<'EOF' ... EOF: run the Python script on stdin with
# tests/control_raw.py (raw control-socket clients, and ctl: the socket
# path) importable.
control_python ()
{
  PYTHONPATH=$abs_top_srcdir/tests PYTHONDONTWRITEBYTECODE=1 python3 - "$ctl"
}
