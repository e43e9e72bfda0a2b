#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# tests/test-deb.sh TARBALL: the Debian packages, built, checked,
# installed, used and removed (make check-deb; needs root and the build
# dependencies of debian/control, debhelper and lintian).
#
# From the release tarball (make dist) in a temporary directory:
# dpkg-buildpackage -us -uc -b with DEB_BUILD_OPTIONS=nocheck (make
# check has run on the same sources); lintian on the result, failing on
# any error or warning; the three packages installed with apt-get (which
# would add their missing dependencies); then, against what is
# installed: the plugin and the filter load by name, the filter package
# depends on the nbdkit version it was built for, the units pass
# systemd-analyze verify with their installed paths, promtool accepts
# the installed alert rules, the completion is where bash-completion
# looks, and tests/demo.sh runs with DEMO_INSTALLED=1 (`nbdkit
# replicate ...`, nbdrep from PATH).  At exit, whatever happened, the
# packages this test installed (ours and the dependencies apt-get added
# for them, nothing else) are purged and the directory removed.  It
# refuses to start if one of our packages is installed already.

set -euo pipefail

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "usage: $0 TARBALL" >&2
  exit 2
fi
tarball=$(realpath "$1")
if [ "$(id -u)" -ne 0 ]; then
  echo "test-deb: SKIP: needs root (apt-get install, apt-get purge)"
  exit 77
fi
for tool in dpkg-buildpackage dh lintian apt-get; do
  command -v "$tool" >/dev/null ||
    { echo "test-deb: $tool is missing (apt-get install debhelper lintian)"; exit 1; }
done

ours=(nbdrep nbdkit-replicate-plugin nbdkit-replicate-filter)

# Is package $1 installed?
installed ()
{
  [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]
}

for p in "${ours[@]}"; do
  if installed "$p"; then
    echo "test-deb: $p is installed already; this test installs and removes it: purge it first"
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/test-deb.XXXXXX")
added=()            # packages this test installed, purged at exit

# At exit: purge what we installed, remove the directory.
cleanup ()
{
  local rc=$? p left=()
  trap '' INT TERM
  for p in "${added[@]}"; do
    # Installed, half installed or its configuration left: purge it.
    case $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true) in
      ''|?n*) ;;
      *) left+=("$p") ;;
    esac
  done
  if [ ${#left[@]} -gt 0 ]; then
    echo "test-deb: purging ${left[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${left[@]}" ||
      { echo "test-deb: FAIL: could not purge ${left[*]}"; rc=1; }
  fi
  for p in "${ours[@]}"; do
    if installed "$p"; then
      echo "test-deb: FAIL: $p is still installed"
      rc=1
    fi
  done
  rm -rf "$work"
  [ "$rc" -eq 0 ] && echo "test-deb: PASS" || echo "test-deb: FAIL"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

echo "test-deb: building the packages from $(basename "$tarball")"
tar -xzf "$tarball" -C "$work"
src=$(echo "$work"/nbdkit-replicate-*/)
(cd "$src" &&
   DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc)" \
     dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1) ||
  { tail -n 60 "$work/build.log"; echo "test-deb: dpkg-buildpackage failed"; exit 1; }
debs=()
for p in "${ours[@]}"; do
  debs+=("$(echo "$work/${p}_"*.deb)")
  [ -f "${debs[-1]}" ] || { echo "test-deb: no package $p was built"; exit 1; }
done
ls -l "$work"/*.deb

echo "test-deb: lintian"
lintian --fail-on error,warning "$work"/*.changes

# apt-get's plan, before it runs: it must only add packages (ours and
# their missing dependencies), which are then the ones to purge.
plan=$(apt-get install -s "${debs[@]}")
if grep -q '^Inst [^ ]* \[' <<<"$plan"; then
  echo "$plan"
  echo "test-deb: installing would upgrade packages of this machine: not done"
  exit 1
fi
mapfile -t added < <(sed -n 's/^Inst \([^ ]*\) .*/\1/p' <<<"$plan")
echo "test-deb: installing ${added[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${debs[@]}"
for p in "${ours[@]}"; do installed "$p"; done

echo "test-deb: the installed files"
nbdkit replicate --version
nbdkit --filter=replicate memory 1M --version | grep -x "replicate $(nbdkit --version | awk '{print $2}')"
nbdkit backup --version
nbdkit_version=$(nbdkit --version | awk '{print $2}')
dpkg-query -W -f='${Depends}\n' nbdkit-replicate-filter |
  grep -F "nbdkit (>= $nbdkit_version), nbdkit (<< $nbdkit_version.~)"
test -x /usr/bin/nbdrep
man -w nbdrep nbdkit-replicate-plugin nbdkit-replicate-filter nbdkit-backup-plugin
completions=$(pkg-config --variable=completionsdir bash-completion 2>/dev/null ||
              echo /usr/share/bash-completion/completions)
test -f "$completions/nbdrep"
rules=/usr/share/nbdkit-replicate/prometheus/nbdkit-replicate.rules.yml
test -f "$rules"
if command -v promtool >/dev/null; then promtool check rules "$rules"; fi
test -f /usr/share/doc/nbdrep/examples/example.conf
test -f /usr/share/doc/nbdrep/examples/replica-example.env
if command -v systemd-analyze >/dev/null; then
  out=$(cd /lib/systemd/system && systemd-analyze verify --man=no \
          nbdkit-replica@r0.socket nbdkit-replica@r0.service \
          nbdkit-replicate@vol.socket nbdkit-replicate@vol.service \
          nbdrep-verify@vol.service nbdrep-verify@vol.timer \
          nbdrep-metrics@vol.service nbdrep-metrics@vol.timer 2>&1)
  [ -z "$out" ] || { echo "$out"; echo "test-deb: systemd-analyze verify complained"; exit 1; }
fi

echo "test-deb: the demo against the installed plugin"
(cd "$work" && DEMO_INSTALLED=1 bash "$src/tests/demo.sh")
