/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/replication/transport/tls.c.
 *
 * refusal_cases: libnbd's messages after a failed connection (as the
 * engine and nbdrep saw them with libnbd 1.14 against nbdkit 1.32),
 * each a TLS setup that cannot work (a refusal) or not.  setup_cases:
 * TLS parameters and a URI applied to a fresh handle, checked through
 * libnbd's getters (the TLS mode, peer verification, user name) and
 * the error for a certificates directory without ca-cert.pem.
 */

#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <libnbd.h>

#include "tls.h"
#include "unit.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])

struct refusal_case {
  const char *msg;
  bool refusal;
};

static const struct refusal_case refusal_cases[] = {
  /* A wrong key, or an identity the server does not have. */
  { "nbd_aio_notify_read: gnutls_handshake: The TLS connection was "
    "non-properly terminated. (-1/1)", true },
  /* A certificate the client does not trust. */
  { "nbd_aio_notify_read: gnutls_handshake: Error in the certificate "
    "verification. (-1/2)", true },
  { "gnutls_certificate_set_x509_trust_file: /d/ca-cert.pem: Error while "
    "reading file.", true },
  /* The PSK file: missing, a directory, without our user name. */
  { "nbd_aio_notify_write: open: /k.psk: No such file or directory", true },
  { "nbd_aio_notify_read: /k: getline failed: Is a directory", true },
  { "nbd_aio_notify_read: /k.psk: username carol was not found in PSK "
    "file: Invalid argument", true },
  /* A client certificate the server does not accept (TLS 1.3: seen
   * after the handshake, during the option negotiation).
   */
  { "nbd_aio_notify_read: gnutls_record_send: Error in the push "
    "function.", true },
  /* TLS required by one side only. */
  { "nbd_aio_notify_read: handshake: server refused TLS, but handle TLS "
    "setting is 'require' (2): Operation not supported", true },
  { "nbd_connect_uri: handshake: server requires TLS encryption first: "
    "Operation not supported", true },

  /* A server that cannot be reached, or has no such export. */
  { "nbd_aio_connect_uri: connect: Connection refused", false },
  { "nbd_aio_connect_uri: connect: No such file or directory", false },
  { "nbd_aio_notify_read: recv: Connection reset by peer", false },
  { "nbd_aio_notify_read: handshake: server has no export named 'x': "
    "No such file or directory", false },
  { "connection timed out after 10s", false },
  { "nbd_aio_notify_read: magic: open: x", false },
  { "", false },
};

/* The refusal table. */
static void
test_refusals (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (refusal_cases); row++)
    CHECKF (tls_refusal (refusal_cases[row].msg) ==
            refusal_cases[row].refusal, "row %zu: %s", row,
            refusal_cases[row].msg);
}

struct setup_case {
  struct tls_params t;
  const char *uri;
  const char *error;            /* NULL = set up, else the error */
  int mode, verify;             /* nbd_get_tls, nbd_get_tls_verify_peer */
  const char *username;         /* nbd_get_tls_username, NULL = any */
};

#define UNSET TLS_MODE_UNSET, NULL, -1, NULL, NULL
#define NO_CA "/nonexistent/tls-dir"

static const struct setup_case setup_cases[] = {
  /* Off unless a tls key is given; then on. */
  { { UNSET }, "nbd://a", NULL, LIBNBD_TLS_DISABLE, 1, NULL },
  { { TLS_MODE_UNSET, NULL, -1, "alice", NULL }, "nbd://a", NULL,
    LIBNBD_TLS_ALLOW, 1, "alice" },
  { { TLS_MODE_UNSET, NULL, 0, NULL, NULL }, "nbd://a", NULL,
    LIBNBD_TLS_ALLOW, 0, NULL },
  { { TLS_MODE_UNSET, NULL, -1, NULL, "/k" }, "nbd://a", NULL,
    LIBNBD_TLS_ALLOW, 1, NULL },
  { { TLS_MODE_REQUIRE, NULL, -1, NULL, NULL }, "nbd://a", NULL,
    LIBNBD_TLS_REQUIRE, 1, NULL },
  { { TLS_MODE_OFF, NULL, -1, "alice", "/k" }, "nbd://a", NULL,
    LIBNBD_TLS_DISABLE, 1, "alice" },
  /* A certificates directory must hold ca-cert.pem ... */
  { { TLS_MODE_ON, NO_CA, -1, NULL, NULL }, "nbd://a",
    "tls-certificates=" NO_CA ": cannot read " NO_CA "/ca-cert.pem: "
    "No such file or directory", 0, 0, NULL },
  /* ... unless TLS is off, or the URI names its own files. */
  { { TLS_MODE_OFF, NO_CA, -1, NULL, NULL }, "nbd://a", NULL,
    LIBNBD_TLS_DISABLE, 1, NULL },
  { { TLS_MODE_ON, NO_CA, -1, NULL, NULL }, "nbds://a/?tls-psk-file=/k",
    NULL, LIBNBD_TLS_ALLOW, 1, NULL },
};

/* Apply one setup case to a fresh handle and check what libnbd got. */
static void
run_setup_case (size_t row, const struct setup_case *c)
{
  struct nbd_handle *nbd = nbd_create ();
  char err[256] = "";
  int r;

  CHECK (nbd != NULL);
  if (nbd == NULL)
    return;
  r = tls_setup_handle (nbd, &c->t, c->uri, err, sizeof err);
  if (c->error) {
    CHECKF (r == -1, "row %zu: set up", row);
    CHECKF (strcmp (err, c->error) == 0, "row %zu: '%s'", row, err);
  }
  else {
    char *user = nbd_get_tls_username (nbd);

    CHECKF (r == 0, "row %zu: %s", row, err);
    CHECKF (nbd_get_tls (nbd) == c->mode, "row %zu: mode %d", row,
            nbd_get_tls (nbd));
    CHECKF (nbd_get_tls_verify_peer (nbd) == c->verify, "row %zu: verify",
            row);
    CHECKF (c->username == NULL ||
            (user && strcmp (user, c->username) == 0),
            "row %zu: user %s", row, user ? user : "(null)");
    free (user);
  }
  nbd_close (nbd);
}

/* A certificates directory with ca-cert.pem is accepted. */
static void
test_ca_present (void)
{
  char dir[] = "/tmp/unit-tls.XXXXXX", path[64];
  struct tls_params t = { TLS_MODE_ON, dir, -1, NULL, NULL };
  struct nbd_handle *nbd = nbd_create ();
  char err[256] = "";
  FILE *fp;

  CHECK (nbd != NULL && mkdtemp (dir) != NULL);
  snprintf (path, sizeof path, "%s/ca-cert.pem", dir);
  fp = fopen (path, "w");
  CHECK (fp != NULL);
  if (fp)
    fclose (fp);
  CHECKF (tls_setup_handle (nbd, &t, "nbd://a", err, sizeof err) == 0,
          "%s", err);
  unlink (path);
  rmdir (dir);
  nbd_close (nbd);
}

/* Run every table. */
int
main (void)
{
  size_t row;

  test_refusals ();
  for (row = 0; row < ARRAY_SIZE (setup_cases); row++)
    run_setup_case (row, &setup_cases[row]);
  test_ca_present ();
  return unit_exit ("unit-tls");
}
