/* SPDX-License-Identifier: BSD-3-Clause */
/* TLS to a leg: setting up a libnbd handle, and telling a TLS setup
 * that cannot work from a server that cannot be reached.
 *
 * tls_setup_handle is the one place where a handle that opens a leg
 * gets the TLS parameters: the engine's connections (conn.c) and
 * nbdrep's inspect and backup readers, which link this file but not
 * the engine (it uses libnbd and the parameter parsers only).  It runs
 * before nbd_connect_uri or nbd_aio_connect_uri, which apply what the
 * URI says afterwards, so the URI wins: an nbds scheme requires TLS,
 * USER@ replaces tls-username.  As in nbdkit-nbd-plugin, an unset tls=
 * is on when another tls key is given and off otherwise; tls-verify
 * and tls-username reach libnbd only when given.  A URI naming its own
 * credentials (tls-certificates= or tls-psk-file=) gets neither of
 * ours: libnbd would use a PSK file rather than certificates, whoever
 * named which.  Local files in URIs are allowed (libnbd refuses them
 * unless asked).  tls-certificates=DIR must hold a readable
 * ca-cert.pem: libnbd would otherwise go on silently to its default
 * directories ($HOME/.pki/libnbd, or /etc/pki/libnbd for root) and
 * then to the system's CAs, and report the wrong certificate.
 *
 * tls_refusal: libnbd gives no structured reason for a failed
 * connection, only its message, and the errno of a missing PSK file is
 * that of a missing socket.  The messages its TLS code sets (lib/crypto.c
 * and the STARTTLS and GO states, alike from libnbd 1.14 to 1.2x) are
 * recognised after the "nbd_API: " context: any gnutls_* call
 * (gnutls_handshake: a wrong key, an identity or a certificate the
 * other side does not accept; the credentials; record I/O while
 * connecting: with TLS 1.3 a server that does not accept our
 * certificate says so only after our side of the handshake is done, by
 * closing the session during the option negotiation), the PSK file
 * ("open: FILE", "FILE: getline failed", a user name not in it), a
 * server refusing TLS when it is required, and one requiring it when
 * it is off.  A server that dies in the middle of a handshake looks
 * like one refusing it: callers retry refusals slowly, not never.
 */

#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "params-text.h"
#include "tls.h"

_Static_assert (TLS_MODE_OFF == LIBNBD_TLS_DISABLE &&
                TLS_MODE_ON == LIBNBD_TLS_ALLOW &&
                TLS_MODE_REQUIRE == LIBNBD_TLS_REQUIRE,
                "enum tls_mode is libnbd's");

/* The libnbd TLS mode of t. */
static int
tls_mode_of (const struct tls_params *t)
{
  if (t->mode != TLS_MODE_UNSET)
    return t->mode;
  if (t->certificates || t->verify >= 0 || t->username || t->psk)
    return LIBNBD_TLS_ALLOW;
  return LIBNBD_TLS_DISABLE;
}

/* Can DIR/ca-cert.pem be read?  Else err says why. */
static int
check_ca_cert (const char *dir, char *err, size_t errlen)
{
  char path[PATH_MAX];

  if ((size_t) snprintf (path, sizeof path, "%s/ca-cert.pem", dir)
      >= sizeof path)
    errno = ENAMETOOLONG;
  else if (access (path, R_OK) == 0)
    return 0;
  snprintf (err, errlen, "tls-certificates=%s: cannot read %s/ca-cert.pem: "
            "%s", dir, dir, strerror (errno));
  return -1;
}

/* Set up nbd for uri (see the design note). */
int
tls_setup_handle (struct nbd_handle *nbd, const struct tls_params *t,
                  const char *uri, char *err, size_t errlen)
{
  bool own = config_uri_names_tls_files (uri);
  const char *certs = own ? NULL : t->certificates;
  const char *psk = own ? NULL : t->psk;
  int mode = tls_mode_of (t);

  if (nbd_set_uri_allow_local_file (nbd, true) == -1 ||
      nbd_set_tls (nbd, mode) == -1 ||
      (certs && nbd_set_tls_certificates (nbd, certs) == -1) ||
      (t->verify >= 0 && nbd_set_tls_verify_peer (nbd, t->verify) == -1) ||
      (t->username && nbd_set_tls_username (nbd, t->username) == -1) ||
      (psk && nbd_set_tls_psk_file (nbd, psk) == -1)) {
    snprintf (err, errlen, "%s", nbd_get_error ());
    return -1;
  }
  if (certs && mode != LIBNBD_TLS_DISABLE)
    return check_ca_cert (certs, err, errlen);
  return 0;
}

/* msg without libnbd's "nbd_API: " context in front. */
static const char *
skip_context (const char *msg)
{
  size_t n = strcspn (msg, ": ");

  if (strncmp (msg, "nbd_", 4) == 0 && strncmp (msg + n, ": ", 2) == 0)
    return msg + n + 2;
  return msg;
}

/* Is msg libnbd's report of a TLS setup that cannot work (see the
 * design note)?
 */
bool
tls_refusal (const char *msg)
{
  static const char *const starts[] = {
    "gnutls_", "open: ", "handshake: server refused TLS",
    "handshake: server requires TLS",
  };
  static const char *const contains[] = {
    ": getline failed", " was not found in PSK file",
  };
  const char *p = skip_context (msg);
  size_t i;

  for (i = 0; i < ARRAY_SIZE (starts); i++)
    if (strncmp (p, starts[i], strlen (starts[i])) == 0)
      return true;
  for (i = 0; i < ARRAY_SIZE (contains); i++)
    if (strstr (p, contains[i]) != NULL)
      return true;
  return false;
}
