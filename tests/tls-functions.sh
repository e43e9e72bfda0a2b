# SPDX-License-Identifier: BSD-3-Clause
#
# tests/tls-functions.sh: keys, certificates and data helpers of the
# TLS tests (test-tls-*.sh), sourced after functions.sh with
#
#     source "$abs_top_srcdir/tests/tls-functions.sh"
#
# The keys are made in $tmpdir by psktool and certtool (gnutls-bin): the
# test is skipped (exit 77) without them.  Like functions.sh the helpers
# fail by returning non-zero, never by set -e.

requires command -v psktool
requires command -v certtool

# make_psk FILE USER...: add a fresh key for each USER to the PSK file
# FILE (created if missing).
make_psk ()
{
  local file=$1 user
  shift
  for user in "$@"; do
    psktool -u "$user" -p "$file" >/dev/null || return 1
  done
}

# _certtool ARGS...: certtool, quietly (it prints every certificate).
_certtool ()
{
  certtool "$@" >/dev/null 2>&1
}

# make_ca DIR: a certificate authority in DIR (ca-key.pem, ca-cert.pem).
make_ca ()
{
  mkdir -p "$1" || return 1
  printf 'cn = test CA %s\nca\ncert_signing_key\nexpiration_days = 2\n' \
    "$1" >"$1/ca.info"
  _certtool --generate-privkey --key-type=ecdsa --outfile "$1/ca-key.pem" &&
    _certtool --generate-self-signed --load-privkey "$1/ca-key.pem" \
      --template "$1/ca.info" --outfile "$1/ca-cert.pem"
}

# make_cert CA DIR ROLE [NAME]: in DIR, ROLE-key.pem and ROLE-cert.pem
# signed by the CA in directory CA, and that CA's ca-cert.pem: ROLE
# server makes a directory for nbdkit --tls-certificates=DIR (its
# certificate names NAME, default localhost, and 127.0.0.1), ROLE client
# one for our tls-certificates=DIR (libnbd's layout).
make_cert ()
{
  local ca=$1 dir=$2 role=$3 name=${4:-localhost}
  mkdir -p "$dir" || return 1
  cp "$ca/ca-cert.pem" "$dir/" || return 1
  if [ "$role" = server ]; then
    printf 'cn = %s\ndns_name = %s\nip_address = 127.0.0.1\ntls_www_server\n' \
      "$name" "$name" >"$dir/$role.info"
  else
    printf 'cn = client\ntls_www_client\n' >"$dir/$role.info"
  fi
  printf 'encryption_key\nsigning_key\nexpiration_days = 2\n' >>"$dir/$role.info"
  _certtool --generate-privkey --key-type=ecdsa \
    --outfile "$dir/$role-key.pem" &&
    _certtool --generate-certificate --load-ca-certificate "$ca/ca-cert.pem" \
      --load-ca-privkey "$ca/ca-key.pem" \
      --load-privkey "$dir/$role-key.pem" --template "$dir/$role.info" \
      --outfile "$dir/$role-cert.pem"
}

# tls_connections LOG: how many leg connections LOG says were made with
# TLS (the controller's debug message).
tls_connections ()
{
  grep -c 'connected with TLS, commands through libnbd' "$1"
}
