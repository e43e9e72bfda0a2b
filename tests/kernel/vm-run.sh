#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# vm-run.sh: boot the image of build-image.sh under qemu and run one guest
# test in it, as root, streaming the guest's console to stdout.
#
#   vm-run.sh [OPTIONS] GUEST_SCRIPT [ARGS...]
#
# The exit status is the guest script's own (0 pass, 77 skipped, other
# failed), or:
#   77   a prerequisite the script declares (below) is missing on the host
#   124  the VM did not finish within the timeout (qemu is killed)
#   125  the VM stopped without reporting a status (a kernel panic or oops,
#        qemu crashed), or /init did not start in two boots
#
# Options:
#   --cache DIR      the image (default: $VM_CACHE, else
#                    ${TMPDIR:-/tmp}/nbdkit-replicate-vm); built with
#                    build-image.sh if missing
#   --kernel NAME    host, a Debian suite or a .deb (build-image.sh
#                    --kernel); default: the script's "kernel" directive,
#                    else host
#   --add SRC[:DST]  copy host file or directory SRC into the guest at DST
#                    (default: the same path), with the libraries its ELF
#                    files need that the image lacks; repeatable
#   --env NAME=VALUE set NAME in the guest test's environment; repeatable
#   --mem SIZE       guest RAM (default: directive "mem", else 2G)
#   --smp N          guest CPUs (default 2)
#   --timeout SECS   the whole VM (default: directive "timeout", else 600)
#   --boot-timeout S if /init has not started after S seconds, kill qemu
#                    and boot once more (default 120)
#   --log FILE       also write the console to FILE
#
# Directives: lines "# vm: KEY=VALUE" in GUEST_SCRIPT.
#   kernel=NAME, mem=SIZE, timeout=SECS   defaults for the options above
#   needs=VAR:PATH   the host file named by environment variable VAR is
#                    copied to PATH in the guest, and VAR=PATH is set there;
#                    if VAR is empty or not an executable file, exit 77
#                    saying so (e.g. needs=NBDUBLK:/usr/bin/nbdublk)
#
# Acceleration: TCG with one host thread (on 2 busy cores MTTCG measured
# slower), whatever /dev/kvm says: on our machines /dev/kvm exists but a
# nested KVM guest hangs early in boot (qemu aborts on MSR 0x10a with
# -cpu max or host; with -cpu host,-arch-capabilities the kernel stops
# after the PAT setup).  VM_ACCEL=kvm tries it anyway (with -cpu
# host,-arch-capabilities).  Never run two VMs at once on 2 cores.
#
# The guest sees the script as /test/run, its arguments, the environment
# from --env and needs= in /test/env, and the added files.  Its /tmp is a
# tmpfs, lo is up, there is no other network.

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
prog=${0##*/}
cache=${VM_CACHE:-${TMPDIR:-/tmp}/nbdkit-replicate-vm}
kernel='' mem='' smp=2 timeout='' boot_timeout=120 log=''
adds=() envs=()

# Print an error and exit with status $2 (default 1).
die ()
{
  echo "$prog: $1" >&2
  exit "${2:-1}"
}

# Print the usage (the header of this file).
usage ()
{
  sed -n '4,/^$/s/^# \{0,1\}//p' "$0"
}

# directive KEY: print the value of the script's "# vm: KEY=..." lines.
directive ()
{
  sed -n "s/^# vm: $1=//p" "$script"
}

# Apply the script's needs= directives: add each named host file, or
# exit 77 saying what is missing.
apply_needs ()
{
  local need var path file
  while read -r need; do
    [ -n "$need" ] || continue
    var=${need%%:*}
    path=${need#*:}
    file=${!var:-}
    [ -n "$file" ] ||
      die "$script needs \$$var (the path of a program) and it is not set: skipped" 77
    [ -f "$file" ] && [ -x "$file" ] ||
      die "$script needs \$$var: $file is not an executable file: skipped" 77
    adds+=("$file:$path")
    envs+=("$var=$path")
  done < <(directive needs)
}

# Load userland.list into the set of paths the image has.
load_image_paths ()
{
  local path
  declare -gA in_image=()
  while read -r path; do
    [ "$path" = . ] || in_image[${path#.}]=1
  done <"$cache/userland.list"
}

# usr_path PATH: print PATH with /bin, /sbin, /lib and /lib64 replaced by
# their /usr equivalents.  The image is /usr-merged: those four are links
# into /usr, and an overlay entry for one of them as a directory would
# replace the link (and hide the image's /lib/modules).
usr_path ()
{
  case $1 in
    /bin/*|/sbin/*|/lib/*|/lib64/*) echo "/usr$1" ;;
    *) echo "$1" ;;
  esac
}

# add_libraries FILE: copy the libraries ELF FILE needs that neither the
# image nor the overlay has into the overlay.
add_libraries ()
{
  local lib dst
  for lib in $(ldd "$1" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }'); do
    dst=$(usr_path "$lib")
    [ -z "${in_image[$dst]-}" ] && [ ! -e "$overlay$dst" ] || continue
    mkdir -p "$overlay$(dirname "$dst")"
    cp -L "$lib" "$overlay$dst"
  done
}

# add_file SRC DST: copy SRC (a file or directory) into the overlay at DST
# with the libraries of its ELF files.
add_file ()
{
  local src=$1 dst=$2 file
  [ -e "$src" ] || die "--add: $src does not exist"
  dst=$(usr_path "$dst")
  mkdir -p "$overlay$(dirname "$dst")"
  cp -aL "$src" "$overlay$dst"
  while IFS= read -r -d '' file; do
    if [ "$(head -c 4 "$file" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      add_libraries "$file"
    fi
  done < <(find "$overlay$dst" -type f -print0)
}

# build_initrd: the image's cpio archives followed by the overlay's (the
# kernel unpacks them in order, so the overlay wins).
build_initrd ()
{
  local spec src dst assign
  overlay=$work/overlay
  mkdir -p "$overlay/test"
  cp "$script" "$overlay/test/run"
  chmod 755 "$overlay/test/run"
  { printf 'set --'; printf ' %q' "$@"; echo; } >"$overlay/test/args"
  : >"$overlay/test/env"
  for assign in ${envs[@]+"${envs[@]}"}; do
    printf '%s=%q\n' "${assign%%=*}" "${assign#*=}" >>"$overlay/test/env"
  done
  load_image_paths
  for spec in ${adds[@]+"${adds[@]}"}; do
    src=${spec%%:*}
    dst=${spec#*:}
    [ "$dst" != "$spec" ] || dst=$(realpath "$src")
    add_file "$src" "$dst"
  done
  (cd "$overlay" && find . | sort | cpio -o -H newc -R 0:0 --quiet) >"$work/overlay.cpio"
  cat "$cache/userland.cpio" "$kdir/modules.cpio" "$work/overlay.cpio" >"$work/initrd"
}

# Print qemu's -accel value: $VM_ACCEL, else TCG.
pick_accel ()
{
  echo "${VM_ACCEL:-tcg,thread=single}"
}

# stop_qemu: kill our qemu (if it still runs) and reap it.
stop_qemu ()
{
  [ -n "${qemu_pid:-}" ] || return 0
  if kill -0 "$qemu_pid" 2>/dev/null; then
    kill -TERM "$qemu_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$qemu_pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL "$qemu_pid" 2>/dev/null || true
  fi
  wait "$qemu_pid" 2>/dev/null || true
  qemu_pid=
}

# Stop the console reader.
stop_reader ()
{
  [ -n "${reader_pid:-}" ] || return 0
  kill "$reader_pid" 2>/dev/null || true
  wait "$reader_pid" 2>/dev/null || true
  reader_pid=
}

# Exit hook: stop qemu and the reader, remove the work directory.
cleanup ()
{
  stop_qemu
  stop_reader
  rm -rf "$work"
}

# boot: boot once; print the console as it comes.  Returns 0 when qemu
# exited, 1 when the deadline passed, 2 when /init did not start in time.
boot ()
{
  local start=$SECONDS deadline=$(( SECONDS + timeout )) console=$work/console
  local kernel_file=$kdir/vmlinux cpu=max
  [ -s "$kernel_file" ] || kernel_file=$kdir/bzImage
  case $accel in kvm*) cpu=host,-arch-capabilities ;; esac
  : >"$console"
  qemu-system-x86_64 \
    -machine pc -accel "$accel" -cpu "$cpu" -smp "$smp" -m "$mem" \
    -nodefaults -no-user-config -display none -no-reboot -monitor none \
    -chardev "file,id=console,path=$console" -serial chardev:console \
    -kernel "$kernel_file" -initrd "$work/initrd" \
    -append "console=ttyS0 rdinit=/init panic=-1 oops=panic loglevel=4 quiet mitigations=off" \
    </dev/null >"$work/qemu.out" 2>&1 &
  qemu_pid=$!
  tail -n +1 -f --pid="$qemu_pid" "$console" | sed -u 's/\r$//' &
  reader_pid=$!
  while kill -0 "$qemu_pid" 2>/dev/null; do
    if ! grep -qa '^ktest: init at' "$console" &&
       [ $(( SECONDS - start )) -ge "$boot_timeout" ]; then
      echo "$prog: /init did not start within ${boot_timeout}s" >&2
      stop_qemu; stop_reader
      return 2
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$prog: the VM did not finish within ${timeout}s: killing it" >&2
      stop_qemu; stop_reader
      return 1
    fi
    sleep 0.5
  done
  wait "$qemu_pid" || echo "$prog: qemu exited with status $?: $(cat "$work/qemu.out")" >&2
  qemu_pid=
  wait "$reader_pid" 2>/dev/null || true
  reader_pid=
  return 0
}

while [ $# -gt 0 ]; do
  case $1 in
    --cache) cache=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --add) adds+=("$2"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --boot-timeout) boot_timeout=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) usage >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
script=$1
shift
[ -f "$script" ] || die "no guest script $script"

kernel=${kernel:-$(directive kernel)}
kernel=${kernel:-host}
mem=${mem:-$(directive mem)}
mem=${mem:-2G}
timeout=${timeout:-$(directive timeout)}
timeout=${timeout:-600}
apply_needs
command -v qemu-system-x86_64 >/dev/null ||
  die "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)" 77

if [ ! -s "$cache/userland.cpio" ] || [ ! -s "$cache/${kernel##*/}.kernel" ]; then
  "$here/build-image.sh" --cache "$cache" --kernel "$kernel"
fi
kdir=$cache/kernel-$(cat "$cache/${kernel##*/}.kernel")
[ -s "$kdir/modules.cpio" ] || die "$kdir has no kernel: run build-image.sh --kernel $kernel"

work=$(mktemp -d "${TMPDIR:-/tmp}/vm-run.XXXXXX")
qemu_pid='' reader_pid=''
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
build_initrd "$@"
accel=$(pick_accel)
echo "$prog: booting $(basename "$kdir") ($accel, $smp CPUs, $mem) for $script (timeout ${timeout}s)"

started=$SECONDS
result=2
for attempt in 1 2; do
  result=0
  boot || result=$?
  [ "$result" -eq 2 ] || break
  [ "$attempt" -eq 2 ] || echo "$prog: booting again" >&2
done
[ -z "$log" ] || tr -d '\r' <"$work/console" >"$log"

status=$(grep -ao '@@KTEST-EXIT=[0-9]*@@' "$work/console" | tail -n 1 | tr -dc 0-9) || true
echo "$prog: VM ran $(( SECONDS - started ))s; guest status ${status:-none}"
[ "$result" -ne 1 ] || exit 124
[ -n "$status" ] || die "the guest stopped without a status (see the console above)" 125
exit "$status"
