/* SPDX-License-Identifier: BSD-3-Clause */
/* One connection to a leg: connecting, aborting, closing.
 *
 * Life cycle: conn_connect (blocking, with a deadline: libnbd does the
 * handshake, TLS included (tls.c); then, unless the connection is TLS,
 * the engine's wire takes over its commands) -> poller_attach (poller.c:
 * the volume's poller drives it from now on) -> requests ->
 * conn_shutdown (abort: the socket is shut down, the wire or libnbd
 * fails every command in flight) -> conn_close (detached from the
 * poller, nothing in flight, then closed: libnbd, still in its ready
 * state, says goodbye; the socket of a connection that ended abruptly
 * is kept by its leg until the server has closed it, drain.c).
 *
 * A connection that fails is either unreachable (retried) or refused:
 * its TLS setup cannot work (tls.c says which from libnbd's message).
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <libnbd.h>

#include "internal.h"
#include "conn.h"
#include "drain.h"
#include "poller.h"
#include "cleanup.h"
#include "tls.h"
#include "wire.h"

/* Is fd a TCP socket? */
static bool
is_tcp (int fd)
{
  int domain;
  socklen_t len = sizeof domain;

  return getsockopt (fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
    (domain == AF_INET || domain == AF_INET6);
}

/* Has the server of the TCP socket fd closed its end, by its FIN
 * (before or after ours)?  Only states that say so for certain count.
 */
static bool
tcp_peer_closed (int fd)
{
  struct tcp_info ti;
  socklen_t len = sizeof ti;

  if (getsockopt (fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1)
    return false;
  return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_LAST_ACK ||
    ti.tcpi_state == TCP_CLOSING;
}

/* Wait until the handle's socket is ready for what libnbd wants, at
 * most timeout_ms, then let libnbd proceed (used while nobody else
 * drives the handle: connecting, disconnecting).  Returns -1 on error.
 */
static int
step_connect (struct nbd_handle *nbd, int timeout_ms)
{
  struct pollfd pfd;
  unsigned dir = nbd_aio_get_direction (nbd);
  int r;

  pfd.fd = nbd_aio_get_fd (nbd);
  if (pfd.fd == -1)
    return -1;
  pfd.events = 0;
  if (dir & LIBNBD_AIO_DIRECTION_READ)
    pfd.events |= POLLIN;
  if (dir & LIBNBD_AIO_DIRECTION_WRITE)
    pfd.events |= POLLOUT;
  pfd.revents = 0;
  r = poll (&pfd, 1, timeout_ms);
  if (r == -1)
    return errno == EINTR ? 0 : -1;
  if (r == 0)
    return 0;
  if (pfd.revents & (POLLIN | POLLHUP | POLLERR))
    return nbd_aio_notify_read (nbd);
  if (pfd.revents & POLLOUT)
    return nbd_aio_notify_write (nbd);
  return 0;
}

/* The wire speaks NBD's compact headers only: a libnbd that would
 * negotiate extended headers (1.18 and later) is told not to.
 */
static int
refuse_extended_headers (struct nbd_handle *nbd UNUSED)
{
#ifdef LIBNBD_HAVE_NBD_SET_REQUEST_EXTENDED_HEADERS
  if (replicate_debug_wire)
    return nbd_set_request_extended_headers (nbd, false);
#endif
  return 0;
}

/* Does the engine carry this connection's commands itself (wire.c)?
 * Not under TLS, whose bytes only libnbd can read and write, nor with
 * extended headers.
 */
static bool
use_wire (struct nbd_handle *nbd)
{
#ifdef LIBNBD_HAVE_NBD_GET_EXTENDED_HEADERS_NEGOTIATED
  if (nbd_get_extended_headers_negotiated (nbd) == 1)
    return false;
#endif
  return replicate_debug_wire && nbd_get_tls_negotiated (nbd) != 1;
}

/* Connect to the leg's URI, finishing the handshake before the
 * deadline (timeout seconds).  Returns a connection not yet attached to
 * a poller, or NULL with the reason in err; then *refused (if refused
 * is not NULL) tells a TLS setup that cannot work (the reason starts
 * "TLS: ") from a leg that may answer later.
 */
struct conn *
conn_connect (struct leg *leg, double timeout, bool *refused,
              char *err, size_t errlen)
{
  struct conn *c;
  struct nbd_handle *nbd;
  uint64_t deadline = now_ns () + (uint64_t) (timeout * 1e9);
  bool tls_wrong = false;
  const char *msg;
  char why[256];

  nbd = nbd_create ();
  if (nbd == NULL) {
    snprintf (err, errlen, "nbd_create: %s", nbd_get_error ());
    goto out;
  }
  if (tls_setup_handle (nbd, &leg->v->cfg.tls, leg->uri, why,
                        sizeof why) == -1) {
    tls_wrong = true;
    snprintf (err, errlen, "TLS: %s", why);
    nbd_close (nbd);
    goto out;
  }
  if (nbd_add_meta_context (nbd, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1 ||
      nbd_set_pread_initialize (nbd, false) == -1 ||
      refuse_extended_headers (nbd) == -1 ||
      nbd_aio_connect_uri (nbd, leg->uri) == -1)
    goto fail;

  while (!nbd_aio_is_ready (nbd)) {
    uint64_t now = now_ns ();
    if (nbd_aio_is_dead (nbd) || nbd_aio_is_closed (nbd))
      goto fail;
    if (now >= deadline) {
      snprintf (err, errlen, "connection timed out after %gs", timeout);
      nbd_close (nbd);
      goto out;
    }
    if (step_connect (nbd, (int) ((deadline - now) / 1000000) + 1) == -1)
      goto fail;
  }

  c = calloc (1, sizeof *c);
  if (c == NULL) {
    snprintf (err, errlen, "calloc: %s", strerror (errno));
    nbd_close (nbd);
    goto out;
  }
  /* Our own descriptor of the socket: libnbd closes its descriptor
   * when the connection dies, and that number may then be reused by
   * any other file (a client's socket!).  Shutting down or polling
   * through this duplicate always reaches this socket.
   */
  c->fd = fcntl (nbd_aio_get_fd (nbd), F_DUPFD_CLOEXEC, 0);
  if (c->fd == -1) {
    snprintf (err, errlen, "dup: %s", strerror (errno));
    free (c);
    nbd_close (nbd);
    goto out;
  }
  c->leg = leg;
  c->nbd = nbd;
  c->tcp = is_tcp (c->fd);
  if (use_wire (nbd)) {
    bool structured = nbd_get_structured_replies_negotiated (nbd) == 1;

    c->wire = wire_new (c->fd, structured, c->tcp);
    if (c->wire == NULL) {
      snprintf (err, errlen, "calloc: %s", strerror (errno));
      close (c->fd);
      free (c);
      nbd_close (nbd);
      goto out;
    }
  }
  nbdkit_debug ("%s: connected%s, commands through %s", leg->uri,
                nbd_get_tls_negotiated (nbd) == 1 ? " with TLS" : "",
                c->wire ? "the engine's wire" : "libnbd");
  return c;

 fail:
  msg = nbd_get_error ();
  tls_wrong = msg != NULL && tls_refusal (msg);
  snprintf (err, errlen, "%s%s", tls_wrong ? "TLS: " : "",
            msg ? msg : "the connection ended");
  nbd_close (nbd);
 out:
  if (refused)
    *refused = tls_wrong;
  return NULL;
}

/* Abort the connection: every command in flight fails (their
 * completions run with ENOTCONN, in the poller).  A wire on TCP is shut
 * down for sending only and its driver told to fail its commands: the
 * socket stays open for reading, so that the server's late replies are
 * received, not answered with a reset (drain.c).  Any other connection
 * is shut down both ways, which libnbd and the wire see as end of file;
 * a TLS one on TCP notes first whether the server had closed its end
 * already.  Safe to call from any thread, any number of times, until
 * conn_close (c->fd is our own duplicate, valid until then).
 */
void
conn_shutdown (struct conn *c)
{
  int how = SHUT_RDWR;

  atomic_store (&c->aborted, true);
  if (c->tcp && c->wire)
    how = SHUT_WR;
  else if (c->tcp && tcp_peer_closed (c->fd))
    atomic_store (&c->peer_fin, true);
  if (shutdown (c->fd, how) == -1 && errno != ENOTCONN)
    nbdkit_debug ("shutdown: %m");
  if (how == SHUT_WR)
    poller_want_abort (c);
}

/* Say goodbye (NBD_CMD_DISC) to a live server, waiting at most a
 * second for it to be sent: a hung server must not hang us.
 */
static void
disconnect_politely (struct nbd_handle *nbd)
{
  uint64_t deadline = now_ns () + 1000000000;

  if (!nbd_aio_is_ready (nbd) || nbd_aio_disconnect (nbd, 0) == -1)
    return;
  while (!nbd_aio_is_closed (nbd) && !nbd_aio_is_dead (nbd) &&
         now_ns () < deadline)
    if (step_connect (nbd, 100) == -1)
      return;
}

/* Did the connection end other than by our goodbye: aborted by us, or
 * dead (the server may be gone, or only the socket)?  Then its server
 * may still be working on requests it had read (drain.c).
 */
static bool
ended_abruptly (struct conn *c)
{
  if (atomic_load (&c->aborted))
    return true;
  if (c->wire)
    return wire_is_dead (c->wire);
  return !nbd_aio_is_ready (c->nbd);
}

/* What is known of the socket of a connection that ended abruptly,
 * for drain.c: a wire on TCP was shut down for sending only and can be
 * read to its end, unless it saw a reset or a timeout; TLS on TCP
 * counts only if the server closed its end first.
 */
static enum drain_how
drain_how_of (struct conn *c)
{
  if (!c->tcp)
    return DRAIN_UNIX;
  if (c->wire)
    return wire_saw_error (c->wire) ? DRAIN_UNKNOWABLE : DRAIN_READABLE;
  if (atomic_load (&c->peer_fin) || tcp_peer_closed (c->fd))
    return DRAIN_PEER_CLOSED;
  return DRAIN_UNKNOWABLE;
}

/* Close the connection and free it.  Nothing may be in flight.  The
 * socket of a connection that ended abruptly goes to its leg, which
 * keeps it until the server has closed it (drain.c).
 */
void
conn_close (struct conn *c)
{
  enum drain_how how = DRAIN_UNIX;
  bool abrupt;

  if (c == NULL)
    return;
  poller_detach (c);
  abrupt = ended_abruptly (c);
  if (abrupt)
    how = drain_how_of (c);
  else
    disconnect_politely (c->nbd);
  nbd_close (c->nbd);
  wire_free (c->wire);
  if (abrupt)
    drain_adopt (c->leg, c->fd, how);
  else
    close (c->fd);
  free (c);
}
