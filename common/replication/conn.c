/* SPDX-License-Identifier: BSD-3-Clause */
/* One libnbd connection to a leg, and the poller thread that drives it.
 *
 * Workers issue commands with nbd_aio_* straight from their own thread
 * (libnbd sends at once when the connection is idle); the poller waits
 * for the socket to become readable and lets libnbd read replies and
 * run completion callbacks.  A worker kicks the poller (an eventfd)
 * only when libnbd is left with bytes to send, so a 4 KiB request
 * costs no kick at all in the common case.
 *
 * Life cycle: conn_connect (blocking, with a deadline) -> conn_start
 * (poller running) -> conn_stop (poller joined, connection kept, used
 * before nbdkit forks) -> conn_start again ... -> conn_shutdown (abort:
 * the socket is shut down, libnbd fails every command in flight, the
 * poller exits) -> conn_close (after the poller is gone and nothing is
 * in flight).
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <libnbd.h>

#include "internal.h"
#include "cleanup.h"

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

/* Connect to the leg's URI, finishing the handshake before the
 * deadline (timeout seconds).  Returns a connection with no poller
 * running, or NULL with the reason in err.
 */
struct conn *
conn_connect (struct leg *leg, double timeout, char *err, size_t errlen)
{
  struct conn *c;
  struct nbd_handle *nbd;
  uint64_t deadline = now_ns () + (uint64_t) (timeout * 1e9);

  nbd = nbd_create ();
  if (nbd == NULL) {
    snprintf (err, errlen, "nbd_create: %s", nbd_get_error ());
    return NULL;
  }
  if (nbd_add_meta_context (nbd, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1 ||
      nbd_set_pread_initialize (nbd, false) == -1 ||
      nbd_aio_connect_uri (nbd, leg->uri) == -1)
    goto fail;

  while (!nbd_aio_is_ready (nbd)) {
    uint64_t now = now_ns ();
    if (nbd_aio_is_dead (nbd) || nbd_aio_is_closed (nbd))
      goto fail;
    if (now >= deadline) {
      snprintf (err, errlen, "connection timed out after %gs", timeout);
      nbd_close (nbd);
      return NULL;
    }
    if (step_connect (nbd, (int) ((deadline - now) / 1000000) + 1) == -1)
      goto fail;
  }

  c = calloc (1, sizeof *c);
  if (c == NULL) {
    snprintf (err, errlen, "calloc: %s", strerror (errno));
    nbd_close (nbd);
    return NULL;
  }
  c->kick_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->kick_fd == -1) {
    snprintf (err, errlen, "eventfd: %s", strerror (errno));
    free (c);
    nbd_close (nbd);
    return NULL;
  }
  /* Our own descriptor of the socket: libnbd closes its descriptor
   * when the connection dies, and that number may then be reused by
   * any other file (a client's socket!).  Shutting down or polling
   * through this duplicate always reaches this socket.
   */
  c->fd = fcntl (nbd_aio_get_fd (nbd), F_DUPFD_CLOEXEC, 0);
  if (c->fd == -1) {
    snprintf (err, errlen, "dup: %s", strerror (errno));
    close (c->kick_fd);
    free (c);
    nbd_close (nbd);
    return NULL;
  }
  c->leg = leg;
  c->nbd = nbd;
  return c;

 fail:
  snprintf (err, errlen, "%s", nbd_get_error ());
  nbd_close (nbd);
  return NULL;
}

/* Wake the poller. */
static void
kick (struct conn *c)
{
  uint64_t one = 1;

  if (write (c->kick_fd, &one, sizeof one) == -1 && errno != EAGAIN)
    nbdkit_debug ("conn kick: %m");
}

/* Kick the poller if libnbd has bytes left to send (a partial write
 * that needs POLLOUT).  Called by workers after issuing a command.
 */
void
conn_kick_if_needed (struct conn *c)
{
  if (nbd_aio_get_direction (c->nbd) & LIBNBD_AIO_DIRECTION_WRITE)
    kick (c);
}

/* Drain the kick eventfd. */
static void
drain_kicks (struct conn *c)
{
  uint64_t n;

  if (read (c->kick_fd, &n, sizeof n) == -1 && errno != EAGAIN)
    nbdkit_debug ("conn drain: %m");
}

/* The poller: wait on the socket and the kick fd, let libnbd read and
 * write.  Exits when stopped or when the connection is dead or closed
 * (libnbd has then completed every command in flight with an error).
 */
static void *
poller (void *arg)
{
  struct conn *c = arg;
  struct pollfd fds[2];

  for (;;) {
    unsigned dir;

    if (atomic_load (&c->stop))
      break;
    if (nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd))
      break;
    dir = nbd_aio_get_direction (c->nbd);
    fds[0].fd = c->fd;
    fds[0].events = 0;
    if (dir & LIBNBD_AIO_DIRECTION_READ)
      fds[0].events |= POLLIN;
    if (dir & LIBNBD_AIO_DIRECTION_WRITE)
      fds[0].events |= POLLOUT;
    fds[0].revents = 0;
    fds[1].fd = c->kick_fd;
    fds[1].events = POLLIN;
    fds[1].revents = 0;

    if (poll (fds, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("poll: %m");
      break;
    }
    if (fds[1].revents & POLLIN)
      drain_kicks (c);
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
      nbd_aio_notify_read (c->nbd);
    else if (fds[0].revents & POLLOUT)
      nbd_aio_notify_write (c->nbd);
  }
  return NULL;
}

/* Start the poller thread. */
int
conn_start (struct conn *c)
{
  int r;

  atomic_store (&c->stop, false);
  r = pthread_create (&c->poller, NULL, poller, c);
  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  c->poller_running = true;
  return 0;
}

/* Stop and join the poller; the connection stays open.  Nothing may be
 * in flight unless the connection is already being shut down.
 */
void
conn_stop (struct conn *c)
{
  if (!c->poller_running)
    return;
  atomic_store (&c->stop, true);
  kick (c);
  pthread_join (c->poller, NULL);
  c->poller_running = false;
}

/* Abort the connection: shut the socket down so that libnbd fails every
 * command in flight (their callbacks run with ENOTCONN) and the poller
 * exits.  Safe to call from any thread, any number of times, until
 * conn_close (c->fd is our own duplicate, valid until then).
 */
void
conn_shutdown (struct conn *c)
{
  if (shutdown (c->fd, SHUT_RDWR) == -1 && errno != ENOTCONN)
    nbdkit_debug ("shutdown: %m");
  kick (c);
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

/* Close the connection and free it.  The poller must have exited
 * (conn_stop) and nothing may be in flight.
 */
void
conn_close (struct conn *c)
{
  if (c == NULL)
    return;
  conn_stop (c);
  disconnect_politely (c->nbd);
  nbd_close (c->nbd);
  close (c->fd);
  close (c->kick_fd);
  free (c);
}
