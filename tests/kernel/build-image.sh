#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# build-image.sh: build the guest that the kernel-path tests boot under
# qemu (vm-run.sh): a Debian kernel that has nbd.ko (and, from trixie on,
# ublk_drv.ko) and an initramfs holding the programs the guest tests run,
# all copied from this host with the shared libraries they need.
#
#   build-image.sh [--cache DIR] [--kernel NAME] [--refresh]
#
# --cache DIR    where everything goes (default: $VM_CACHE, else
#                ${TMPDIR:-/tmp}/nbdkit-replicate-vm).  It must not be
#                inside a git work tree: it holds ~300 MB of build output.
# --kernel NAME  which kernel:
#                  host   (default) what this machine's apt sources call
#                         linux-image-amd64 (Debian 12: 6.1, has nbd.ko);
#                  SUITE  e.g. trixie: linux-image-amd64 of that Debian
#                         suite, fetched through a private apt state under
#                         the cache, without touching the system's apt
#                         sources (Debian 13: 6.12, has ublk_drv.ko too);
#                  FILE.deb  a linux-image-*.deb already downloaded.
# --refresh      look the kernel package up again even if one is cached
#                (for a SUITE this runs apt-get update on the private
#                state; the host kernel is looked up every time anyway).
#
# Only what changed is rebuilt; a run with everything up to date takes a
# second or two.  Outputs, in the cache:
#   userland.cpio   the programs (busybox for the basics, bash, GNU
#                   coreutils/findutils/diffutils/tar, nbdkit with all its
#                   plugins and filters, nbdinfo/nbdcopy, nbd-client,
#                   e2fsprogs, fio, git, jq), their libraries, the
#                   workload corpus (/corpus, see workload.sh) and /init;
#   userland.list   every path in userland.cpio (vm-run.sh adds only
#                   the libraries an added program needs beyond these);
#   kernel-KVER/    vmlinux (the ELF kernel, booted through its PVH entry
#                   point: no firmware, no decompression in the guest) or
#                   bzImage when the kernel has no PVH entry, modules.cpio
#                   (MODULES below and their dependencies,
#                   uncompressed, with a modules.dep for busybox modprobe);
#   NAME.kernel     the KVER that NAME resolved to.
# The project's own files (the plugin, nbdrep, the guest scripts) are not
# in the image: vm-run.sh adds them at every boot.
#
# Host packages: qemu-system-x86 busybox-static cpio xz-utils zstd kmod
# and the programs above (nbdkit libnbd-bin nbd-client e2fsprogs fio git
# jq).  A first build downloads a ~70-100 MB kernel package with
# `apt-get download`.

set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
prog=${0##*/}
cache=${VM_CACHE:-${TMPDIR:-/tmp}/nbdkit-replicate-vm}
kernel=host
refresh=no

# Programs the guest tests need (names on PATH); the build fails without
# any of them.
REQUIRED_PROGRAMS="bash nbdkit nbdinfo nbdcopy nbd-client mke2fs mkfs.ext4
  e2fsck fsck.ext4 dumpe2fs tune2fs fio git jq
  cat cp mv rm ln mkdir rmdir ls stat touch truncate dd sync sha256sum
  sort uniq head tail wc tr cut tee sleep timeout date env seq mktemp
  readlink realpath basename dirname chmod od du df comm nproc
  find xargs cmp diff tar"
# Programs copied when the host has them.
OPTIONAL_PROGRAMS="nbddump strace"
# Kernel modules put in the image (with their dependencies), and those
# /init loads at boot; tests modprobe the others.  crc32c_generic is what
# ext4 asks for ("crypto-crc32c") when it mounts.  unix_diag and
# tcp_diag answer the controller's sock_diag queries about an aborted
# connection's socket (common/replication/transport/drain.c); the
# kernel loads them on the first query, as on a full system.
MODULES="nbd ext4 loop ublk_drv crc32c_generic unix_diag tcp_diag"
BOOT_MODULES="crc32c_generic ext4 nbd loop"

# Print an error and exit 1.
die ()
{
  echo "$prog: $*" >&2
  exit 1
}

# Print a progress message.
say ()
{
  echo "$prog: $*"
}

# Print the usage (the header of this file).
usage ()
{
  sed -n '4,/^$/s/^# \{0,1\}//p' "$0"
}

# Check the host tools the build itself uses.
check_host_tools ()
{
  local tool
  for tool in busybox cpio dpkg-deb apt-get apt-cache depmod modprobe ldd \
              ldconfig xz sha256sum; do
    command -v "$tool" >/dev/null ||
      die "the host has no $tool (apt-get install busybox-static cpio kmod xz-utils)"
  done
  # The guest has no libraries for busybox: it must be the static one.
  if ldd "$(command -v busybox)" >/dev/null 2>&1; then
    die "busybox is linked dynamically: apt-get install busybox-static"
  fi
}

# Refuse a cache inside a git work tree (it would end up in commits).
check_cache_dir ()
{
  mkdir -p "$cache"
  cache=$(cd "$cache" && pwd)
  if git -C "$cache" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    die "$cache is inside a git work tree: use --cache with a directory outside"
  fi
}

# apt_suite ARGS...: apt-get with a private state for Debian suite
# $kernel under the cache (sources, lists and archives of its own).
apt_suite ()
{
  local dir=$cache/apt-$kernel
  "$@" -o Dir::Etc::SourceList="$dir/sources.list" \
       -o Dir::Etc::SourceParts=/dev/null \
       -o Dir::State::Lists="$dir/lists" \
       -o Dir::Cache="$dir/cache" \
       -o APT::Sandbox::User=root
}

# Print the kernel package (linux-image-KVER) that linux-image-amd64
# depends on, from the system's apt lists or the private ones for a suite.
resolve_kernel_package ()
{
  local dir=$cache/apt-$kernel
  if [ "$kernel" = host ]; then
    apt-cache depends linux-image-amd64 2>/dev/null |
      awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
    return 0
  fi
  if [ "$refresh" = yes ] || [ ! -d "$dir/lists" ] ||
     [ -z "$(ls "$dir/lists" 2>/dev/null)" ]; then
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    echo "deb http://deb.debian.org/debian $kernel main" >"$dir/sources.list"
    say "apt-get update for Debian $kernel (private state in $dir)" >&2
    apt_suite apt-get -q update >&2
  fi
  apt_suite apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}

# download_kernel PACKAGE DIR: apt-get download PACKAGE into DIR; print
# the .deb's path.
download_kernel ()
{
  local pkg=$1 dir=$2
  rm -rf "$dir" && mkdir -p "$dir"
  say "downloading $pkg" >&2
  if [ "$kernel" = host ]; then
    (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root "$pkg") >&2 || return 1
  else
    (cd "$dir" && apt_suite apt-get download -q "$pkg") >&2 || return 1
  fi
  ls "$dir"/"$pkg"_*.deb
}

# le32 FILE OFFSET: print the little-endian 32-bit number at OFFSET.
le32 ()
{
  od -An -t u4 -j "$2" -N 4 --endian=little "$1" | tr -d ' '
}

# extract_vmlinux BZIMAGE OUT: unpack the ELF kernel inside a bzImage.
# The boot protocol's setup header says where the compressed payload is:
# setup_sects (byte 0x1f1) + 1 sectors of real-mode code, then the
# protected-mode part; payload_offset (0x248) and payload_length (0x24c)
# are relative to it.  The payload ends with the 4-byte uncompressed size,
# which is left out.  Fails if the payload is not xz, zstd or gzip.
extract_vmlinux ()
{
  local bz=$1 out=$2 sects start len magic
  sects=$(od -An -t u1 -j $(( 0x1f1 )) -N 1 "$bz" | tr -d ' ')
  [ "$sects" -ne 0 ] || sects=4
  start=$(( (sects + 1) * 512 + $(le32 "$bz" $(( 0x248 ))) ))
  len=$(( $(le32 "$bz" $(( 0x24c ))) - 4 ))
  magic=$(od -An -t x1 -j "$start" -N 4 "$bz" | tr -d ' ')
  case $magic in
    fd377a58) tail -c +"$(( start + 1 ))" "$bz" | head -c "$len" | xz -dc >"$out" ;;
    28b52ffd) tail -c +"$(( start + 1 ))" "$bz" | head -c "$len" | zstd -dcq >"$out" ;;
    1f8b*)    tail -c +"$(( start + 1 ))" "$bz" | head -c "$len" | gzip -dc >"$out" ;;
    *) return 1 ;;
  esac
  [ "$(od -An -c -N 4 "$out" | tr -d ' ')" = '177ELF' ]
}

# build_modules PKGROOT KVER OUT: pack MODULES and their dependencies,
# uncompressed, with modules.dep, into the cpio OUT (paths under usr/lib:
# the image is /usr-merged).
build_modules ()
{
  local pkgroot=$1 kver=$2 out=$3 stage mod ko rel
  stage=$(dirname "$out")/modules-stage
  rm -rf "$stage"
  mkdir -p "$stage/usr/lib/modules/$kver"
  ln -s usr/lib "$stage/lib"
  for mod in $MODULES; do
    modprobe -d "$pkgroot" -S "$kver" --show-depends "$mod" 2>/dev/null ||
      say "note: kernel $kver has no module $mod (built in or not configured)" >&2
  done | awk '$1 == "insmod" { print $2 }' | sort -u | while read -r ko; do
    rel=${ko#"$pkgroot"/}
    rel=usr/${rel#usr/}
    mkdir -p "$stage/$(dirname "$rel")"
    cp "$ko" "$stage/$rel"
  done
  find "$stage/usr/lib/modules" -name '*.ko.xz' -exec xz -d {} +
  find "$stage/usr/lib/modules" -name '*.ko.zst' -exec zstd -dq --rm {} +
  cp "$pkgroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} \
     "$stage/usr/lib/modules/$kver/"
  depmod -b "$stage" "$kver"
  (cd "$stage" && find usr | sort | cpio -o -H newc -R 0:0 --quiet) >"$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$stage"
}

# build_kernel: make sure kernel-KVER/ holds the kernel NAME resolves to.
build_kernel ()
{
  local deb pkg kver kdir pkgroot config
  if [ "${kernel%.deb}" != "$kernel" ]; then
    deb=$(realpath "$kernel")
    pkg=$(dpkg-deb -f "$deb" Package)
  else
    pkg=$(resolve_kernel_package)
    if [ -z "$pkg" ]; then
      [ -s "$cache/$kernel.kernel" ] ||
        die "cannot resolve linux-image-amd64 for '$kernel' (run apt-get update?)"
      say "cannot resolve linux-image-amd64 now: using the cached $(cat "$cache/$kernel.kernel")"
      pkg=linux-image-$(cat "$cache/$kernel.kernel")
    fi
  fi
  case $pkg in
    linux-image-[0-9]*) ;;
    *) die "$pkg is not a linux-image-VERSION package" ;;
  esac
  kver=${pkg#linux-image-}
  kdir=$cache/kernel-$kver
  if [ -s "$kdir/modules.cpio" ] && { [ -s "$kdir/vmlinux" ] || [ -s "$kdir/bzImage" ]; } &&
     [ "$(cat "$kdir/modules.list" 2>/dev/null)" = "$MODULES" ]; then
    echo "$kver" >"$cache/${kernel##*/}.kernel"
    say "kernel $kver is up to date in $kdir"
    return 0
  fi
  rm -rf "$kdir"
  mkdir -p "$kdir"
  # Mirrors drop a kernel package soon after the next point release:
  # with old lists, update them (the system's or the suite's) once.
  if [ -z "${deb:-}" ] && ! deb=$(download_kernel "$pkg" "$cache/download"); then
    rm -rf "$kdir" "$cache/download"
    [ "$refresh" = no ] || die "cannot download $pkg"
    say "cannot download $pkg: updating the package lists and trying again"
    refresh=yes
    [ "$kernel" != host ] || apt-get -q update >&2
    build_kernel
    return
  fi
  pkgroot=$kdir/package
  dpkg-deb -x "$deb" "$pkgroot"
  rm -rf "$cache/download"
  # Debian 12 ships /lib/modules, 13 /usr/lib/modules.
  [ -d "$pkgroot/lib/modules" ] || ln -s usr/lib "$pkgroot/lib"
  depmod -b "$pkgroot" "$kver"
  config=$pkgroot/boot/config-$kver
  cp "$config" "$kdir/config"
  if grep -q '^CONFIG_PVH=y' "$config" &&
     extract_vmlinux "$pkgroot/boot/vmlinuz-$kver" "$kdir/vmlinux.tmp"; then
    mv "$kdir/vmlinux.tmp" "$kdir/vmlinux"
  else
    rm -f "$kdir/vmlinux.tmp"
    say "no PVH entry point in $kver: the guest boots the bzImage (slower)"
    cp "$pkgroot/boot/vmlinuz-$kver" "$kdir/bzImage"
  fi
  build_modules "$pkgroot" "$kver" "$kdir/modules.cpio"
  echo "$MODULES" >"$kdir/modules.list"
  rm -rf "$pkgroot"
  echo "$kver" >"$cache/${kernel##*/}.kernel"
  say "kernel $kver built in $kdir ($(grep -E '^CONFIG_BLK_DEV_(NBD|UBLK)=' "$kdir/config" | tr '\n' ' '))"
}

# Print the path of each program of a list found on this host; fail
# (naming it) if a required one is missing.
program_paths ()
{
  local name path
  for name in $REQUIRED_PROGRAMS; do
    path=$(command -v "$name") || die "the host has no $name (see the package list in $prog)"
    echo "$path"
  done
  for name in $OPTIONAL_PROGRAMS; do
    command -v "$name" || true
  done
}

# Print the path of every plugin and filter of this host's nbdkit.
nbdkit_modules ()
{
  local plugindir
  plugindir=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
  find "$plugindir" "$(dirname "$plugindir")/filters" -name '*.so' | sort
}

# Print the stamp of the userland: the contents of this script and of the
# workload script (not their paths: every build tree shares the cache),
# and every file copied in (path, size, time), so that a package upgrade
# rebuilds it.
userland_stamp ()
{
  {
    cat "$0" "$here/workload.sh" | sha256sum
    program_paths | xargs -r realpath | xargs -r stat -c '%n %s %Y'
    nbdkit_modules | xargs -r stat -L -c '%n %s %Y'
    stat -L -c '%n %s %Y' "$(command -v busybox)"
  } | sha256sum | cut -d' ' -f1
}

# copy_elf FILE: copy FILE (symlinks resolved) into the stage at the same
# path, with every library ldd says it needs.
copy_elf ()
{
  local file=$1 lib libs
  mkdir -p "$stage$(dirname "$file")"
  cp -L "$file" "$stage$file"
  libs=$(ldd "$file" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }') || true
  for lib in $libs; do
    [ -e "$stage$lib" ] && continue
    mkdir -p "$stage$(dirname "$lib")"
    cp -L "$lib" "$stage$lib"
  done
}

# write_init: the guest's PID 1.  It mounts the basics, loads the boot
# modules, runs /test/run (added by vm-run.sh) with /test/env and
# /test/args, prints its exit status as @@KTEST-EXIT=N@@ and powers off.
write_init ()
{
  cat >"$stage/init" <<'EOF'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin HOME=/root TMPDIR=/tmp LC_ALL=C
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o size=80% tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
ip link set lo up
hostname ktest
echo "ktest: init at $(cut -d' ' -f1 /proc/uptime)s, kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB"
for m in $(cat /etc/ktest-modules); do
  modprobe "$m" || echo "ktest: modprobe $m failed"
done
rc=127
if [ -x /test/run ]; then
  cd /test
  # Through a pipe, as on the host: programs print no progress meters.
  { bash -c 'set -a; . /test/env; set +a; . /test/args; exec /test/run "$@"' \
      </dev/null 2>&1; echo "$?" >/run/ktest-status; } | cat
  rc=$(cat /run/ktest-status)
else
  echo "ktest: no /test/run"
fi
echo "ktest: test exited with status $rc at $(cut -d' ' -f1 /proc/uptime)s"
if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
  echo "ktest: last kernel messages:"
  dmesg | tail -n 60
fi
echo "@@KTEST-EXIT=$rc@@"
# -n: no sync(), which would wait out a dead NBD device's timeout.
poweroff -n -f
EOF
  chmod 755 "$stage/init"
}

# link_busybox: a link for every busybox applet that no copied program
# already provides (/usr/sbin/modprobe matters: the kernel runs it).
link_busybox ()
{
  local applet name dir
  cp "$(command -v busybox)" "$stage/usr/bin/busybox"
  for applet in $(busybox --list-full); do
    name=${applet##*/}
    case $applet in
      sbin/*|usr/sbin/*) dir=usr/sbin ;;
      *) dir=usr/bin ;;
    esac
    [ -e "$stage/usr/bin/$name" ] || [ -e "$stage/usr/sbin/$name" ] ||
      ln -s /usr/bin/busybox "$stage/$dir/$name"
  done
}

# build_userland: make userland.cpio unless its stamp is current.
build_userland ()
{
  local stamp path
  stamp=$(userland_stamp)
  if [ -s "$cache/userland.cpio" ] && [ "$(cat "$cache/userland.stamp" 2>/dev/null)" = "$stamp" ]; then
    say "userland is up to date in $cache"
    return 0
  fi
  say "building the userland"
  stage=$cache/userland-stage
  rm -rf "$stage"
  mkdir -p "$stage"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,tmp,run,root,mnt,test}
  for path in bin sbin lib lib64; do ln -s "usr/$path" "$stage/$path"; done
  for path in $(program_paths); do copy_elf "$path"; done
  for path in $(nbdkit_modules); do copy_elf "$path"; done
  # glibc dlopen()s libgcc_s for thread cancellation and unwinding.
  copy_elf "$(ldconfig -p | awk '/libgcc_s\.so\.1 .*x86-64/ { print $NF; exit }')"
  link_busybox
  echo "$BOOT_MODULES" | tr ' ' '\n' >"$stage/etc/ktest-modules"
  echo 'root:x:0:0:root:/root:/bin/bash' >"$stage/etc/passwd"
  echo 'root:x:0:' >"$stage/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$stage/etc/hosts"
  echo 'hosts: files' >"$stage/etc/nsswitch.conf"
  write_init
  "$here/workload.sh" corpus "$stage/corpus"
  (cd "$stage" && find . | sort | cpio -o -H newc -R 0:0 --quiet) >"$cache/userland.cpio.tmp"
  (cd "$stage" && find . | sort) >"$cache/userland.list"
  mv "$cache/userland.cpio.tmp" "$cache/userland.cpio"
  echo "$stamp" >"$cache/userland.stamp"
  rm -rf "$stage"
  say "userland built: $(du -h "$cache/userland.cpio" | cut -f1)"
}

while [ $# -gt 0 ]; do
  case $1 in
    --cache) cache=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --refresh) refresh=yes; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

check_host_tools
check_cache_dir
build_kernel
build_userland
