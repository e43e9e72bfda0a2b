/* SPDX-License-Identifier: BSD-3-Clause */
/* The poller: one thread driving every leg connection of a volume.
 *
 * Workers issue commands straight from their own threads (the wire,
 * wire.c, or libnbd on TLS connections, sends at once when nothing is
 * queued).  The poller waits, with epoll, for any connection to become
 * readable, has the wire (or libnbd) read the replies and run the
 * completions, and then wakes the workers whose requests completed
 * (conn_wake_deferred: after libnbd has let go of the handle lock).
 * One thread for all legs means that replies from several legs
 * arriving together cost one wake-up of the poller, and more
 * connections per leg cost no more threads.
 *
 * A connection is registered for EPOLLIN always, and for EPOLLOUT only
 * while it has bytes left to send.  An issuer whose send was partial
 * sets the connection's want_write flag and kicks the poller (an
 * eventfd), which then adds EPOLLOUT; the poller removes it once the
 * connection no longer wants to write.  A dead connection is removed
 * from epoll by the poller.  After handling a libnbd connection the
 * poller asks libnbd only for its direction (a command queued while a
 * reply was being read is sent from inside notify_read and may leave
 * bytes to send); whether it died is asked only when libnbd reported
 * an error or the socket hung up: a dead connection whose socket stays
 * readable keeps reporting events until it is removed, so it cannot be
 * missed.  A wire says both with two atomic loads, asked every time.
 *
 * Detaching a connection (before closing it) takes it out of epoll and
 * then waits until the poller has finished the loop iteration it may
 * be in, so the poller never touches a freed connection.
 *
 * The thread is stopped before nbdkit forks (threads do not survive a
 * fork) and started again after; the epoll set and the connections in
 * it carry over.
 *
 * Adoption.  An event loop of our own that already sleeps in the
 * kernel (the ublk frontend's first queue, which sleeps in io_uring)
 * can take the poller's place: poller_adopt stops the thread and gives
 * the loop the epoll descriptor to watch; the loop calls poller_drive
 * whenever it is readable, and poller_release starts the thread again.
 * A request that loop started is then completed by the loop's own
 * thread, which reads the reply: no thread hand-off at all.  One driver
 * at a time (the thread or the adopter), so the connections still have
 * one reader; `running` means that somebody drives (conn_detach waits
 * for the driver's next iteration either way).
 */

#include <config.h>

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <libnbd.h>

#include "internal.h"
#include "cleanup.h"
#include "array.h"
#include "wire.h"

#define MAX_EVENTS 64

struct poller {
  int epfd;
  int kick_fd;
  pthread_t thread;
  bool thread_running;          /* the poller thread exists */
  _Atomic bool running;         /* somebody drives: thread or adopter */
  _Atomic bool stop;
  _Atomic uint64_t loops;       /* iterations completed */
  pthread_mutex_t lock;         /* conns[] */
  struct conn **conns;
  size_t nr_conns, cap_conns;
};

/* Create a poller (no thread yet).  Returns NULL after nbdkit_error. */
struct poller *
poller_new (void)
{
  struct poller *p = calloc (1, sizeof *p);
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

  if (p == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  p->epfd = epoll_create1 (EPOLL_CLOEXEC);
  p->kick_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->epfd == -1 || p->kick_fd == -1 ||
      epoll_ctl (p->epfd, EPOLL_CTL_ADD, p->kick_fd, &ev) == -1) {
    nbdkit_error ("poller: %m");
    poller_free (p);
    return NULL;
  }
  pthread_mutex_init (&p->lock, NULL);
  return p;
}

/* Free a poller whose thread is stopped and which has no connection. */
void
poller_free (struct poller *p)
{
  if (p == NULL)
    return;
  if (p->epfd >= 0)
    close (p->epfd);
  if (p->kick_fd >= 0)
    close (p->kick_fd);
  free (p->conns);
  free (p);
}

/* Wake the poller. */
static void
kick (struct poller *p)
{
  uint64_t one = 1;

  if (write (p->kick_fd, &one, sizeof one) == -1 && errno != EAGAIN)
    nbdkit_debug ("poller kick: %m");
}

/* Has the connection died? */
static bool
conn_is_dead (struct conn *c)
{
  if (c->wire)
    return wire_is_dead (c->wire);
  return nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd);
}

/* Does the connection have bytes waiting to be sent? */
static bool
conn_wants_write (struct conn *c)
{
  if (c->wire)
    return wire_wants_write (c->wire);
  return nbd_aio_get_direction (c->nbd) & LIBNBD_AIO_DIRECTION_WRITE;
}

/* Register for what the connection wants now (poller thread, or
 * before the thread runs); if it may have died (check_dead), take a
 * dead connection out of epoll.
 */
static void
update_events (struct poller *p, struct conn *c, bool check_dead)
{
  struct epoll_event ev = { .data.ptr = c };
  uint32_t want;

  if (atomic_load (&c->dead))
    return;
  if (check_dead && conn_is_dead (c)) {
    epoll_ctl (p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    atomic_store (&c->dead, true);
    return;
  }
  want = EPOLLIN;
  if (conn_wants_write (c))
    want |= EPOLLOUT;
  if (want == c->events)
    return;
  ev.events = want;
  if (epoll_ctl (p->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
    c->events = want;
}

/* A kick: drain it and look at the connections workers flagged. */
static void
handle_kick (struct poller *p)
{
  uint64_t n;
  size_t i;

  if (read (p->kick_fd, &n, sizeof n) == -1 && errno != EAGAIN)
    nbdkit_debug ("poller drain: %m");
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&p->lock);
  for (i = 0; i < p->nr_conns; ++i)
    if (atomic_exchange (&p->conns[i]->want_write, false))
      update_events (p, p->conns[i], true);
}

/* Retire the failed commands the completion callback left behind. */
static void
retire_failed (struct conn *c)
{
  int64_t cookie;

  if (atomic_exchange (&c->unretired, 0) == 0)
    return;
  while ((cookie = nbd_aio_peek_command_completed (c->nbd)) > 0)
    nbd_aio_command_completed (c->nbd, (uint64_t) cookie);
}

/* Let the wire or libnbd act on what the socket is ready for. */
static void
handle_conn (struct poller *p, struct conn *c, uint32_t events)
{
  int r = 0;

  if (c->wire) {
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
      wire_on_readable (c);
    if (events & EPOLLOUT)
      wire_on_writable (c);
    conn_wake_deferred (c);
    update_events (p, c, true);
    return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
    r = nbd_aio_notify_read (c->nbd);
  else if (events & EPOLLOUT)
    r = nbd_aio_notify_write (c->nbd);
  conn_wake_deferred (c);
  retire_failed (c);
  update_events (p, c, r == -1 || (events & (EPOLLHUP | EPOLLERR)));
}

/* One iteration: wait up to timeout_ms (-1: for ever) for events and
 * handle them.  Returns -1 if epoll failed.
 */
static int
iterate (struct poller *p, int timeout_ms)
{
  struct epoll_event evs[MAX_EVENTS];
  int n = epoll_wait (p->epfd, evs, MAX_EVENTS, timeout_ms), i;

  if (n == -1 && errno != EINTR) {
    nbdkit_error ("epoll_wait: %m");
    return -1;
  }
  for (i = 0; i < n; ++i) {
    if (evs[i].data.ptr == NULL)
      handle_kick (p);
    else
      handle_conn (p, evs[i].data.ptr, evs[i].events);
  }
  atomic_fetch_add (&p->loops, 1);
  return 0;
}

/* The poller thread. */
static void *
poller_thread (void *arg)
{
  struct poller *p = arg;

  while (!atomic_load (&p->stop))
    if (iterate (p, -1) == -1)
      break;
  return NULL;
}

/* Start the thread. */
int
poller_start (struct poller *p)
{
  int r;

  if (p->running)
    return 0;
  atomic_store (&p->stop, false);
  r = pthread_create (&p->thread, NULL, poller_thread, p);
  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  p->thread_running = true;
  p->running = true;
  return 0;
}

/* Stop and join the thread; the connections stay registered. */
void
poller_stop (struct poller *p)
{
  if (!p->thread_running)
    return;
  atomic_store (&p->stop, true);
  kick (p);
  pthread_join (p->thread, NULL);
  p->thread_running = false;
  p->running = false;
}

/* Take over the driving from the thread (see the note).  Returns the
 * epoll descriptor to watch for readability.
 */
int
poller_adopt (struct poller *p)
{
  poller_stop (p);
  p->running = true;
  return p->epfd;
}

/* The adopter's iteration, once the descriptor is readable. */
void
poller_drive (struct poller *p)
{
  iterate (p, 0);
}

/* Give the driving back to a new thread.  Returns 0 or -1 (nobody
 * drives then: the volume's requests would hang, so the caller says
 * so).
 */
int
poller_release (struct poller *p)
{
  p->running = false;
  return poller_start (p);
}

/* Register a connection. */
int
conn_attach (struct conn *c, struct poller *p)
{
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&p->lock);
  struct conn **a = array_reserve_one (p->conns, p->nr_conns, &p->cap_conns,
                                       sizeof *a, 16);

  if (a == NULL) {
    nbdkit_error ("realloc: %m");
    return -1;
  }
  p->conns = a;
  c->events = EPOLLIN;
  c->poller = p;
  if (epoll_ctl (p->epfd, EPOLL_CTL_ADD, c->fd, &ev) == -1) {
    nbdkit_error ("epoll_ctl: %m");
    c->poller = NULL;
    return -1;
  }
  p->conns[p->nr_conns++] = c;
  return 0;
}

/* Unregister a connection and wait until the poller cannot be using
 * it any more.
 */
void
conn_detach (struct conn *c)
{
  struct poller *p = c->poller;
  uint64_t loops;
  size_t i;

  if (p == NULL)
    return;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&p->lock);
    for (i = 0; i < p->nr_conns; ++i)
      if (p->conns[i] == c) {
        p->conns[i] = p->conns[--p->nr_conns];
        break;
      }
    if (!atomic_load (&c->dead))
      epoll_ctl (p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  }
  c->poller = NULL;
  if (!p->running)
    return;
  loops = atomic_load (&p->loops);
  kick (p);
  while (atomic_load (&p->loops) == loops && p->running)
    sched_yield ();
}

/* An issuer left bytes to send: have the poller wait for the socket
 * to be writable.
 */
void
conn_want_write (struct conn *c)
{
  if (c->poller) {
    atomic_store (&c->want_write, true);
    kick (c->poller);
  }
}

/* After issuing a command through libnbd: if libnbd is left with bytes
 * to send, have the poller wait for the socket to be writable.
 */
void
conn_kick_if_needed (struct conn *c)
{
  if (nbd_aio_get_direction (c->nbd) & LIBNBD_AIO_DIRECTION_WRITE)
    conn_want_write (c);
}
