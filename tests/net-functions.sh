# SPDX-License-Identifier: BSD-3-Clause
# Test hosts made of network namespaces (source after functions.sh).
#
# net_setup HOST...: a namespace for the controller ($net_ctl) and one
# per replica host, each host joined to the controller's namespace by a
# veth pair on a /30 of its own in 10.201.0.0/16 (host K: 10.201.K.1 on
# the controller's side, 10.201.K.2 on the host's).  Nothing is routed
# anywhere else: the namespaces have no other interface, so nothing a
# test sends leaves them.  Everything is removed at exit, also when the
# test fails.  Without root, ip or iptables, or where namespaces cannot
# be made, the test is skipped (exit 77) saying why.
#
# start_host_replica N HOST PORT [-- NBDKIT-ARGS...]: start_replica N in
# HOST's namespace, on TCP HOST-ADDRESS:PORT (rN_uri is nbd://...), with
# one worker thread per connection (-t 1): these replicas are cut off
# while they send replies, and nbdkit before 1.33.10 aborts when a
# client hangs up while two of its threads are sending ("raw_send_socket:
# Assertion `sock >= 0' failed", see test-fault-pause.sh); seen in
# test-net-flap under ASan.  restart_replica N restarts it there.
#
# partition HOST / heal HOST: drop every packet to and from HOST (in its
# namespace, both ways: silence, no reset) / let them through again.
#
# net_recreate HOST: HOST torn down and made again (a replaced machine).
#
# In the controller's namespace: CONTROLLER_NETNS=$net_ctl for
# start_controller (clients reach it by its Unix socket, which every
# namespace sees), and the legs compare_legs reads (legs_netns, set by
# net_setup).

net_hosts=()
net_ctl=

# Run a command in network namespace NS, and in no other namespace of
# its own: not "ip netns exec", whose new mount namespace would keep a
# copy of every mount of the moment (this machine's mounts are private:
# nothing propagates), pinning the filesystems other tests mount and
# unmount meanwhile (test-kernel-nbdfuse's loop device).
in_netns ()
{
  local ns=$1
  shift
  nsenter "--net=/run/netns/$ns" -- "$@"
}

# The address of HOST (as named to net_setup) seen from the controller.
host_address ()
{
  local k
  for k in "${!net_hosts[@]}"; do
    if [ "${net_hosts[$k]}" = "$1" ]; then
      echo "10.201.$(( k + 1 )).2"
      return 0
    fi
  done
  echo "$0: no test host named $1" >&2
  return 1
}

# The namespace of HOST.
host_netns ()
{
  echo "nbdrep-$$-$1"
}

# Remove every namespace net_setup made (their veths go with them).
_net_cleanup ()
{
  local h
  for h in "${net_hosts[@]}"; do
    ip netns del "$(host_netns "$h")" 2>/dev/null
  done
  [ -z "$net_ctl" ] || ip netns del "$net_ctl" 2>/dev/null
  return 0
}

# Skip the test (exit 77), saying why.
_net_skip ()
{
  echo "$0: test skipped: $*" >&2
  exit 77
}

# _net_make_host K HOST: namespace, veth pair and addresses of host K.
_net_make_host ()
{
  local k=$1 ns a veth
  ns=$(host_netns "$2")
  a=10.201.$k
  veth=nr$$h$k
  ip netns add "$ns" || return 1
  in_netns "$ns" ip link set lo up
  ip link add "$veth" netns "$net_ctl" type veth peer name eth0 netns "$ns"
  in_netns "$net_ctl" ip addr add "$a.1/30" dev "$veth"
  in_netns "$net_ctl" ip link set "$veth" up
  in_netns "$ns" ip addr add "$a.2/30" dev eth0
  in_netns "$ns" ip link set eth0 up
}

net_setup ()
{
  local h
  [ "$(id -u)" = 0 ] || _net_skip "network namespaces need root"
  command -v ip >/dev/null || _net_skip "ip (iproute2) is not installed"
  command -v iptables >/dev/null || _net_skip "iptables is not installed"
  net_ctl=nbdrep-$$-ctl
  legs_netns=$net_ctl
  cleanup_fn _net_cleanup
  ip netns add "$net_ctl" 2>/dev/null ||
    _net_skip "cannot make a network namespace here"
  in_netns "$net_ctl" ip link set lo up
  for h in "$@"; do
    net_hosts+=("$h")
    _net_make_host "${#net_hosts[@]}" "$h"
    if ! in_netns "$(host_netns "$h")" iptables -L INPUT >/dev/null 2>&1; then
      _net_skip "iptables cannot filter in a namespace here"
    fi
  done
}

# net_recreate HOST: tear HOST's namespace down (its link with it) and
# make it again, as a host that is replaced: same name, same address.
# Stop its servers first.
net_recreate ()
{
  local k
  for k in "${!net_hosts[@]}"; do
    [ "${net_hosts[$k]}" = "$1" ] || continue
    ip netns del "$(host_netns "$1")"
    _net_make_host "$(( k + 1 ))" "$1"
    return
  done
  echo "$0: no test host named $1" >&2
  return 1
}

start_host_replica ()
{
  local n=$1 host=$2 port=$3 rc=0 restart
  local -a args
  shift 3
  restart=$(printf '%q ' start_host_replica "$n" "$host" "$port" "$@")
  nbdkit_wrapper=(nsenter "--net=/run/netns/$(host_netns "$host")" --)
  args=("$@")
  case " ${args[*]} " in
    *" -- "*) args+=(-t 1) ;;
    *) args+=(-- -t 1) ;;
  esac
  server_address=$(host_address "$host") &&
    start_replica "$n" --port "$port" "${args[@]}" || rc=$?
  nbdkit_wrapper=()
  server_address=
  _restart_cmd[r$n]=$restart
  return "$rc"
}

partition ()
{
  local ns
  ns=$(host_netns "$1")
  in_netns "$ns" iptables -I INPUT -i eth0 -j DROP
  in_netns "$ns" iptables -I OUTPUT -o eth0 -j DROP
}

heal ()
{
  local ns
  ns=$(host_netns "$1")
  in_netns "$ns" iptables -F INPUT
  in_netns "$ns" iptables -F OUTPUT
}
