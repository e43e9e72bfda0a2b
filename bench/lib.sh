# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash disable=SC2034
# (SC2034: the variables set here are read by the scripts that source it)
#
# bench/lib.sh: what bench/run, bench/cpucost, bench/rebuild,
# bench/scale, bench/tls, bench/tcp and bench/async share; sourced,
# never run.
#
# It gives a script a private work directory, starts the systems under
# test on Unix sockets in it, and stops, by PID, exactly the processes it
# started.  Rules:
# - Processes are started from the script's main shell (never inside
#   $(...) or a pipeline), so they are its children: `alive` checks the
#   parent too, so a PID reused by a stranger is never signalled.
# - Every wait is bounded: START_TIMEOUT for a server to answer,
#   STOP_GRACE between SIGTERM and SIGKILL; the scripts wrap each client
#   (fio, nbdcopy, nbdreq.py) in `timeout`.
# - Front-ends are stopped before replicas (nbdkit keeps serving the
#   clients connected when it gets SIGTERM, so a replica exits only once
#   its front-end is gone).
#
# Systems (start_system NAME); each exports one device on
# $WORK/NAME.sock, export name "":
#   L        nbdkit memory SIZE                         the direct replica, the limit
#   P1       nbdkit nbd plugin -> 1 memory replica      nbdkit's pass-through
#   Q3       qemu-storage-daemon quorum (vote-threshold=1, read-pattern=fifo)
#            over 3 nbd children -> 3 memory replicas
#   CN       our plugin over N memory replicas (metadata on: internal)
#   CNm0     the same with metadata=none
#   CNf      our filter over nbdkit memory (leg 0) and N-1 memory replicas
#   CNA      CN plus one asynchronous leg (async=URI), a memory replica
#            (CNAf, CNAm0 likewise)
#   NAMEs    NAME with its last replica behind nbdkit's delay filter
#            ($SLOW_DELAY): C3s (the third leg slow), C2As (the
#            asynchronous leg slow)
#   NAMEb    a second, identical instance of NAME (the A/A check)
#   NAME-TAG another instance of NAME (bench/scale: C3-c8)
# Controllers get control=$WORK/NAME.ctl and $C_ARGS; start_system waits
# until `nbdrep status` says healthy.
#
# Knobs (environment):
#   SIZE           size of every replica (nbdkit syntax, default 256M)
#   C_ARGS         extra parameters for every controller, e.g. "connections=8"
#   R_ARGS         extra nbdkit options for every replica, e.g. "--tls=on ..."
#   SLOW_DELAY     the delay filter's parameters for the slow replica of
#                  an NAMEs system (default "delay-write=5ms delay-zero=5ms")
#   PLUGIN FILTER NBDREP  the built plugin, filter and nbdrep (default:
#                  the build tree this bench/ directory belongs to)
#   START_TIMEOUT  seconds a server may take to answer (default 60)
#   STOP_GRACE     seconds between SIGTERM and SIGKILL (default 15)
#   KEEP_WORK=1    keep the work directory (server logs) at exit
#   PYTHON         a python3 with the libnbd bindings (default: found)

set -euo pipefail
export LC_ALL=C
export PYENV_VERSION=system      # pyenv shims: use the system python3

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$BENCH/.." && pwd)
PLUGIN=${PLUGIN:-$TOP/plugins/replicate/.libs/nbdkit-replicate-plugin.so}
FILTER=${FILTER:-$TOP/filters/replicate/.libs/nbdkit-replicate-filter.so}
NBDREP=${NBDREP:-$TOP/nbdrep/nbdrep}
SIZE=${SIZE:-256M}
C_ARGS=${C_ARGS:-}
R_ARGS=${R_ARGS:-}
SLOW_DELAY=${SLOW_DELAY:-delay-write=5ms delay-zero=5ms}
START_TIMEOUT=${START_TIMEOUT:-60}
STOP_GRACE=${STOP_GRACE:-15}
KEEP_WORK=${KEEP_WORK:-0}

WRAP_FRONT=()        # command prefix for front-end processes (cpucost)
WRAP_REPLICA=()      # the same for replica processes
WRAP_FORKS=0         # 1: the wrapper forks the server (perf stat)

# Legs on TCP across network namespaces (bench/tcp, netns_setup): with
# LEG_NETNS set to a prefix, replica I of a system serves TCP on
# 10.202.(I+1).2 in namespace PREFIX-hI, reached from PREFIX-ctl, where
# the front-end runs, over a veth pair; each replica gets its own port.
LEG_NETNS=
NEXT_PORT=10900
NETNS_MADE=()

declare -A ROLE=()        # pid -> front | replica | client, while we own it
declare -A FORKED=()      # pid -> 1 if the server is the wrapper's child
STARTED=()                # owned pids in start order
declare -A SYS_URI=()     # system -> URI of its device
declare -A SYS_PIDS=()    # system -> its pids (replicas first)
declare -A SYS_FRONT=()   # system -> pid of its front-end
declare -A SYS_CTL=()     # system -> control socket (controllers)
LAST_PID=

# say MSG...: progress on stderr.
say ()
{
  echo "# $(date +%T) $*" >&2
}

# die MSG...: fail the script.
die ()
{
  echo "$(basename "$0"): $*" >&2
  exit 1
}

# need TOOL...: fail naming the Debian package of the first missing tool.
need ()
{
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 && continue
    case $t in
      qemu-storage-daemon) die "missing $t (apt-get install qemu-system-common)" ;;
      nbdcopy|nbdinfo) die "missing $t (apt-get install libnbd-bin)" ;;
      perf) die "missing $t (apt-get install linux-perf)" ;;
      *) die "missing $t (apt-get install $t)" ;;
    esac
  done
}

# pick_python: set PY to a python3 that can import nbd (python3-libnbd).
pick_python ()
{
  local p
  for p in ${PYTHON:-} /usr/bin/python3 $(type -ap python3); do
    if "$p" -c 'import nbd' >/dev/null 2>&1; then
      PY=$p
      return 0
    fi
  done
  die "no python3 with the libnbd bindings (apt-get install python3-libnbd)"
}

# check_build: fail unless the plugin, the filter and nbdrep are built.
check_build ()
{
  local f
  for f in "$PLUGIN" "$FILTER" "$NBDREP"; do
    [ -e "$f" ] || die "$f is missing: build the tree first (make -C $TOP)"
  done
}

# make_work: create the work directory $WORK and the exit handling.
make_work ()
{
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/nbdrep-bench.XXXXXX")
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# on_exit: stop everything we started, remove the namespaces
# netns_setup made; remove $WORK unless KEEP_WORK=1.
on_exit ()
{
  local rc=$?
  set +eu
  trap '' INT TERM
  stop_all
  netns_remove
  if [ "$KEEP_WORK" = 1 ]; then
    echo "# work directory kept: $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}

# alive PID: is PID a running (not zombie) child of this shell?
alive ()
{
  local stat state ppid
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  read -r state ppid _ <<<"${stat##*) }"
  [ "$state" != Z ] && [ "$ppid" = "$$" ]
}

# wait_gone PID SECS: wait until PID has exited, at most SECS seconds.
wait_gone ()
{
  local i
  for (( i = 0; i < $2 * 10; i++ )); do
    alive "$1" || return 0
    sleep 0.1
  done
  ! alive "$1"
}

# spawn ROLE LOG CMD...: start CMD in the background as ours; sets LAST_PID.
spawn ()
{
  local role=$1 log=$2
  shift 2
  "$@" </dev/null >>"$log" 2>&1 &
  LAST_PID=$!
  ROLE[$LAST_PID]=$role
  STARTED+=("$LAST_PID")
}

# stop_pid PID: SIGTERM our process PID (the server, not perf, when
# wrapped by perf stat), wait STOP_GRACE s, then SIGKILL; reap it.
stop_pid ()
{
  local pid=$1 kids=()
  [ -n "${ROLE[$pid]-}" ] || return 0
  if alive "$pid"; then
    if [ -n "${FORKED[$pid]-}" ]; then
      read -r -a kids <"/proc/$pid/task/$pid/children" || true
    fi
    if [ ${#kids[@]} -gt 0 ]; then
      kill -TERM "${kids[@]}" 2>/dev/null || true
    else
      kill -TERM "$pid" 2>/dev/null || true
    fi
    if ! wait_gone "$pid" "$STOP_GRACE"; then
      say "pid $pid (${ROLE[$pid]}) still up $STOP_GRACE s after SIGTERM: SIGKILL"
      if [ ${#kids[@]} -gt 0 ]; then
        kill -KILL "${kids[@]}" 2>/dev/null || true
      fi
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  unset "ROLE[$pid]" "FORKED[$pid]"
}

# stop_all: stop every process we own: clients and front-ends (newest
# first), then replicas.
stop_all ()
{
  local i pid
  for (( i = ${#STARTED[@]} - 1; i >= 0; i-- )); do
    pid=${STARTED[i]}
    if [ "${ROLE[$pid]-}" != replica ]; then stop_pid "$pid"; fi
  done
  for (( i = ${#STARTED[@]} - 1; i >= 0; i-- )); do
    stop_pid "${STARTED[i]}"
  done
  STARTED=()
}

# uri_of SOCK: the NBD URI of the export on Unix socket SOCK.
uri_of ()
{
  echo "nbd+unix:///?socket=$1"
}

# wait_nbd SOCK PID: wait until an NBD server answers on SOCK; fail if
# PID dies or START_TIMEOUT passes.
wait_nbd ()
{
  local deadline=$(( SECONDS + START_TIMEOUT ))
  while [ "$SECONDS" -le "$deadline" ]; do
    if [ -S "$1" ] &&
       timeout 10 nbdinfo --size "$(uri_of "$1")" >/dev/null 2>&1; then
      return 0
    fi
    alive "$2" || return 1
    sleep 0.2
  done
  return 1
}

# start_server ROLE NAME CMD...: start nbdkit-like CMD (which serves on
# $WORK/NAME.sock) with the wrapper of ROLE, wait until it answers.
start_server ()
{
  local role=$1 name=$2 wrap=()
  shift 2
  if [ "$role" = replica ]; then
    wrap=("${WRAP_REPLICA[@]}")
  else
    wrap=("${WRAP_FRONT[@]}")
  fi
  rm -f "$WORK/$name.sock"
  echo "== $(date +%T) ${wrap[*]} $*" >>"$WORK/$name.log"
  spawn "$role" "$WORK/$name.log" "${wrap[@]}" "$@"
  if [ ${#wrap[@]} -gt 0 ] && [ "$WRAP_FORKS" = 1 ]; then
    FORKED[$LAST_PID]=1
  fi
  if ! wait_nbd "$WORK/$name.sock" "$LAST_PID"; then
    say "$name did not start; the end of $WORK/$name.log:"
    tail -n 5 "$WORK/$name.log" >&2
    return 1
  fi
}

# in_netns NS CMD...: run CMD in network namespace NS only (nsenter:
# "ip netns exec" would also give it a mount namespace of its own).
in_netns ()
{
  local ns=$1
  shift
  nsenter "--net=/run/netns/$ns" -- "$@"
}

# netns_setup PREFIX N: namespaces PREFIX-ctl and PREFIX-h0 ...
# PREFIX-h(N-1), host I joined to ctl by a veth pair on 10.202.(I+1).0/30
# (nothing else routed), and LEG_NETNS=PREFIX.  Needs root.
netns_setup ()
{
  local prefix=$1 n=$2 i a
  NETNS_MADE=("$prefix-ctl")
  ip netns add "$prefix-ctl" || return 1
  in_netns "$prefix-ctl" ip link set lo up
  for (( i = 0; i < n; i++ )); do
    a=10.202.$(( i + 1 ))
    ip netns add "$prefix-h$i" || return 1
    NETNS_MADE+=("$prefix-h$i")
    in_netns "$prefix-h$i" ip link set lo up
    ip link add "nb$$h$i" netns "$prefix-ctl" type veth \
      peer name eth0 netns "$prefix-h$i"
    in_netns "$prefix-ctl" ip addr add "$a.1/30" dev "nb$$h$i"
    in_netns "$prefix-ctl" ip link set "nb$$h$i" up
    in_netns "$prefix-h$i" ip addr add "$a.2/30" dev eth0
    in_netns "$prefix-h$i" ip link set eth0 up
  done
  LEG_NETNS=$prefix
}

# netns_remove: remove what netns_setup made (the veths go with them).
netns_remove ()
{
  local ns
  for ns in "${NETNS_MADE[@]-}"; do
    [ -z "$ns" ] || ip netns del "$ns" 2>/dev/null
  done
  NETNS_MADE=()
}

# wait_tcp URI PID: wait until the NBD server at URI answers from the
# front-end's namespace; fail if PID dies or START_TIMEOUT passes.
wait_tcp ()
{
  local deadline=$(( SECONDS + START_TIMEOUT ))
  while [ "$SECONDS" -le "$deadline" ]; do
    if timeout 10 nsenter "--net=/run/netns/$LEG_NETNS-ctl" -- \
         nbdinfo --size "$1" >/dev/null 2>&1; then
      return 0
    fi
    alive "$2" || return 1
    sleep 0.2
  done
  return 1
}

# start_replicas SYS N SIZE [SLOW]: N nbdkit memory replicas SYS-r0 ...
# (with $R_ARGS), on Unix sockets, or on TCP in their hosts' namespaces
# with LEG_NETNS; with SLOW=1 the last one behind the delay filter
# ($SLOW_DELAY).  Sets REPLICA_URIS, REPLICA_QEMU (the same legs as
# qemu's nbd driver names them) and appends their pids to SYS_PIDS[SYS].
start_replicas ()
{
  local sys=$1 n=$2 size=$3 slow=${4:-0} i addr port
  local -a extra delay
  REPLICA_URIS=() REPLICA_QEMU=()
  for (( i = 0; i < n; i++ )); do
    read -r -a extra <<<"$R_ARGS"
    delay=()
    if [ "$slow" = 1 ] && [ "$i" = $(( n - 1 )) ]; then
      extra+=(--filter=delay)
      read -r -a delay <<<"$SLOW_DELAY"
    fi
    if [ -n "$LEG_NETNS" ]; then
      addr=10.202.$(( i + 1 )).2 port=$NEXT_PORT
      NEXT_PORT=$(( NEXT_PORT + 1 ))
      echo "== $(date +%T) $sys-r$i on $addr:$port" >>"$WORK/$sys-r$i.log"
      spawn replica "$WORK/$sys-r$i.log" nsenter "--net=/run/netns/$LEG_NETNS-h$i" -- \
        nbdkit -f -i "$addr" -p "$port" "${extra[@]}" memory "size=$size" \
        "${delay[@]}"
      wait_tcp "nbd://$addr:$port" "$LAST_PID" || {
        say "$sys-r$i did not start"; return 1; }
      REPLICA_URIS+=("nbd://$addr:$port")
      REPLICA_QEMU+=("server.type=inet,server.host=$addr,server.port=$port")
    else
      start_server replica "$sys-r$i" \
        nbdkit -f -U "$WORK/$sys-r$i.sock" "${extra[@]}" memory "size=$size" \
        "${delay[@]}" || return 1
      REPLICA_URIS+=("$(uri_of "$WORK/$sys-r$i.sock")")
      REPLICA_QEMU+=("server.type=unix,server.path=$WORK/$sys-r$i.sock")
    fi
    SYS_PIDS[$sys]="${SYS_PIDS[$sys]-} $LAST_PID"
  done
}

# healthy CTL: does `nbdrep status` say the volume is healthy?
healthy ()
{
  timeout 10 "$NBDREP" status "$1" >/dev/null 2>&1
}

# settled CTL: no leg resyncs and every asynchronous leg replicates
# (its first catch-up, at the start, would otherwise run under the
# measured requests).
settled ()
{
  timeout 10 "$NBDREP" status --json "$1" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
sys.exit(any(l.get("resync") or
             (l.get("async") or {}).get("state", "replicating") != "replicating"
             for l in s["legs"]))'
}

# wait_healthy CTL PID: wait until the volume is healthy and settled (a
# controller with metadata=none rebuilds legs 1.. at every start).
wait_healthy ()
{
  local deadline=$(( SECONDS + START_TIMEOUT ))
  while [ "$SECONDS" -le "$deadline" ]; do
    healthy "$1" && settled "$1" && return 0
    alive "$2" || return 1
    sleep 0.2
  done
  return 1
}

# system_base NAME: the system NAME is an instance of (NAMEb -> NAME,
# NAME-TAG -> NAME).
system_base ()
{
  local s=${1%%-*}
  if [[ $s =~ ^(L|P1|Q3|C[0-9]+A?(f|m0)?s?)b$ ]]; then
    echo "${s%b}"
  else
    echo "$s"
  fi
}

# front_cmd SYS BASE: set FRONT to the front-end command of system SYS
# (its replicas are started and in REPLICA_URIS; with CNA... the last
# one is the asynchronous leg).
front_cmd ()
{
  local sys=$1 base=$2 sock=$WORK/$1.sock u i
  local -a extra async=()
  read -r -a extra <<<"$C_ARGS"
  if [[ $base =~ ^C[0-9]+A ]]; then
    async=("async=${REPLICA_URIS[-1]}")
    unset 'REPLICA_URIS[-1]'
  fi
  case $base in
    L) FRONT=(nbdkit -f -U "$sock" memory "size=$SIZE") ;;
    P1) FRONT=(nbdkit -f -U "$sock" nbd "uri=${REPLICA_URIS[0]}") ;;
    Q3)
      FRONT=(qemu-storage-daemon)
      for i in 0 1 2; do
        FRONT+=(--blockdev "driver=nbd,node-name=r$i,${REPLICA_QEMU[i]}")
      done
      FRONT+=(--blockdev "driver=quorum,node-name=q,vote-threshold=1,read-pattern=fifo,children.0=r0,children.1=r1,children.2=r2"
              --nbd-server "addr.type=unix,addr.path=$sock"
              --export "type=nbd,id=e0,node-name=q,name=,writable=on") ;;
    C*f|C*fs)
      FRONT=(nbdkit -f -U "$sock" "--filter=$FILTER" memory "size=$SIZE")
      for u in "${REPLICA_URIS[@]}"; do FRONT+=("replica=$u"); done
      FRONT+=("${async[@]}" "control=${SYS_CTL[$sys]}" "${extra[@]}") ;;
    C*)
      FRONT=(nbdkit -f -U "$sock" "$PLUGIN" "${REPLICA_URIS[@]}" "${async[@]}"
             "control=${SYS_CTL[$sys]}" "${extra[@]}")
      [[ $base == *m0* ]] && FRONT+=(metadata=none) ;;
  esac
}

# start_system NAME: start system NAME (see the top); sets SYS_URI[NAME].
start_system ()
{
  local sys=$1 base n=0 slow=0
  base=$(system_base "$1")
  if [[ $base =~ ^C([1-9][0-9]*)(A?)(f|m0)?(s?)$ ]]; then
    n=${BASH_REMATCH[1]}
    [ "${BASH_REMATCH[3]}" = f ] && n=$(( n - 1 ))
    [ -z "${BASH_REMATCH[2]}" ] || n=$(( n + 1 ))
    [ -z "${BASH_REMATCH[4]}" ] || slow=1
    SYS_CTL[$sys]=$WORK/$sys.ctl
  else
    case $base in
      L) n=0 ;;
      P1) n=1 ;;
      Q3) n=3 ;;
      *) say "unknown system $sys"; return 1 ;;
    esac
  fi
  SYS_PIDS[$sys]=""
  start_replicas "$sys" "$n" "$SIZE" "$slow" || return 1
  front_cmd "$sys" "$base"
  [ -z "$LEG_NETNS" ] ||
    FRONT=(nsenter "--net=/run/netns/$LEG_NETNS-ctl" -- "${FRONT[@]}")
  [ -z "${SYS_CTL[$sys]-}" ] || rm -f "${SYS_CTL[$sys]}"
  start_server front "$sys" "${FRONT[@]}" || return 1
  SYS_PIDS[$sys]="${SYS_PIDS[$sys]} $LAST_PID"
  SYS_FRONT[$sys]=$LAST_PID
  if [ -n "${SYS_CTL[$sys]-}" ] &&
     ! wait_healthy "${SYS_CTL[$sys]}" "$LAST_PID"; then
    say "$sys did not become healthy within $START_TIMEOUT s"
    return 1
  fi
  SYS_URI[$sys]=$(uri_of "$WORK/$sys.sock")
}

# stop_system NAME: stop its front-end, then its replicas.
stop_system ()
{
  local pid
  stop_pid "${SYS_FRONT[$1]-}"
  for pid in ${SYS_PIDS[$1]-}; do stop_pid "$pid"; done
  unset "SYS_URI[$1]" "SYS_PIDS[$1]" "SYS_FRONT[$1]" "SYS_CTL[$1]"
}

# cpu_ticks PID...: user+system clock ticks used so far by these
# processes, all their threads included (fields 14 and 15 of stat).
cpu_ticks ()
{
  local pid stat total=0
  local -a f
  for pid in "$@"; do
    read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
    read -r -a f <<<"${stat##*) }"
    total=$(( total + f[11] + f[12] ))
  done
  echo "$total"
}

# job_spec JOB: set J_RW J_BS J_QD J_NJ (fio rw, block size, queue
# depth per connection, connections) for JOB.
job_spec ()
{
  case $1 in
    randread)  J_RW=randread;  J_BS=4k;  J_QD=32; J_NJ=2 ;;
    randwrite) J_RW=randwrite; J_BS=4k;  J_QD=32; J_NJ=2 ;;
    seqwrite)  J_RW='write';   J_BS=64k; J_QD=8;  J_NJ=1 ;;
    seqread)   J_RW='read';    J_BS=1M;  J_QD=4;  J_NJ=1 ;;
    lat1)      J_RW=randwrite; J_BS=4k;  J_QD=1;  J_NJ=1 ;;
    *) die "unknown job $1" ;;
  esac
}

# prefill SYS: write data over the whole device through its export, so
# that reads hit data and writes overwrite.
prefill ()
{
  local size t0
  size=$(timeout 10 nbdinfo --size "${SYS_URI[$1]}") || return 1
  t0=$(now_ns)
  timeout 600 nbdcopy -- [ nbdkit --exit-with-parent pattern "size=$size" ] \
    "${SYS_URI[$1]}" || return 1
  say "$1 pre-filled ($size bytes) in $(( ($(now_ns) - t0) / 1000000 )) ms"
}

FIO_COLUMNS=$'system\tbase\tjob\tconns\tqd\tiops\tmibps\tlat_us\tp99_us\tsrv_cpu_us_op\tios\tload1\trc'
declare -A MULTICONN=()    # system -> 1 if it advertises multi-conn

# fio_measure TSV SYS JOB FIELD...: one fio run of JOB against SYS
# (RAMP s unmeasured, then RUNTIME s); appends to TSV the FIELDs, then
# the columns of $FIO_COLUMNS.  A system without multi-conn gets one
# connection with the whole queue depth.  The server CPU is the
# user+sys time of the system's processes from the end of the ramp to
# the end of fio, per request fio completed in its measured window.
fio_measure ()
{
  local tsv=$1 sys=$2 job=$3 qd nj json load c0 c1 rc=0 fpid
  local -a pids
  shift 3
  job_spec "$job"
  if [ -z "${MULTICONN[$sys]-}" ]; then
    MULTICONN[$sys]=0
    if timeout 10 nbdinfo --can multi-conn "${SYS_URI[$sys]}"; then
      MULTICONN[$sys]=1
    fi
  fi
  qd=$J_QD nj=$J_NJ
  if [ "$nj" -gt 1 ] && [ "${MULTICONN[$sys]}" != 1 ]; then
    qd=$(( qd * nj )); nj=1
  fi
  read -r -a pids <<<"${SYS_PIDS[$sys]}"
  json=$WORK/fio.json
  rm -f "$json"
  read -r load _ </proc/loadavg
  spawn client "$WORK/fio.log" timeout $(( RAMP + RUNTIME + 60 )) \
    fio --output-format=json --output="$json" --name="$job" \
        --ioengine=nbd --uri="${SYS_URI[$sys]}" \
        --rw="$J_RW" --bs="$J_BS" --iodepth="$qd" --numjobs="$nj" \
        --group_reporting --time_based --runtime="$RUNTIME" \
        --ramp_time="$RAMP" --norandommap --randrepeat=0
  fpid=$LAST_PID
  sleep "$RAMP"
  c0=$(cpu_ticks "${pids[@]}")
  wait "$fpid" || rc=$?
  unset "ROLE[$fpid]"
  c1=$(cpu_ticks "${pids[@]}")
  [ -z "${FIO_KEEP-}" ] || cp "$json" "$FIO_KEEP" 2>/dev/null || true
  printf '%s\t' "$@" "$sys" "$(system_base "$sys")" "$job" "$nj" "$qd" >>"$tsv"
  printf '%s\t%s\t%s\n' \
    "$("$PY" "$BENCH/report.py" fio "$json" "$J_RW" $(( c1 - c0 )) "$(getconf CLK_TCK)")" \
    "$load" "$rc" >>"$tsv"
  say "$* $sys $job: $(tail -n 1 "$tsv" | awk -F'\t' -v k=$# '{printf "IOPS %s MiB/s %s lat %s us, server CPU %s us/op, load %s, rc %s", $(k+6), $(k+7), $(k+8), $(k+10), $(k+12), $(k+13)}')"
}

# callgrind_wrap: set CALLGRIND to the command prefix that counts the
# instructions of a server into $WORK/cg.PID (valgrind keeps the PID).
callgrind_wrap ()
{
  CALLGRIND=(valgrind --tool=callgrind "--callgrind-out-file=$WORK/cg.%p")
}

# cg_total PID: the instructions callgrind counted in process PID.
cg_total ()
{
  awk '/^(totals|summary):/ {v = $2} END {print v}' "$WORK/cg.$1"
}

# rotated N K: the indexes 0..N-1 starting at K; reversed when REV=1.
rotated ()
{
  local n=$1 k=$2 i
  for (( i = 0; i < n; i++ )); do
    if [ "$REV" = 1 ]; then
      echo $(( (k + n - 1 - i) % n ))
    else
      echo $(( (k + i) % n ))
    fi
  done
}

# now_ns: the time in nanoseconds.
now_ns ()
{
  date +%s%N
}

# machine_header TITLE: the lines every table starts with.
machine_header ()
{
  local cpu rev
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
  rev=$(git -C "$TOP" describe --always --dirty 2>/dev/null || echo unknown)
  echo "$1"
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "machine: $(nproc) CPUs ($cpu), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, Linux $(uname -r)"
  echo "load average before (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "tree: $TOP at $rev"
  echo "tools: $(nbdkit --version | head -n 1); $(qemu-storage-daemon --version | head -n 1 | cut -d' ' -f1-3); $(fio --version); $(nbdcopy --version | head -n 1)"
}

# load_after: the closing line.
load_after ()
{
  echo "load average after (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
}
