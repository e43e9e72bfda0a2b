/* SPDX-License-Identifier: BSD-3-Clause */
/* The poller: one epoll loop driving the leg connections of a volume,
 * run by its thread or by an issuer waiting for its request.  Every
 * synchronous leg's connections are on the volume's poller; an
 * asynchronous leg has one of its own (see "A leg's own poller").
 *
 * Workers issue commands straight from their own threads (the wire,
 * wire.c, or libnbd on TLS connections, sends at once when nothing is
 * queued).  The poller waits, with epoll, for any connection to become
 * readable, has the wire (or libnbd) read the replies and run the
 * completions, and then wakes the workers whose requests completed
 * (ioreq_wake_deferred: after libnbd has let go of the handle lock).
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
 * then, if somebody drives, waits until the loop iteration it may be
 * in has finished, so no driver touches a freed connection.
 *
 * The thread is stopped before nbdkit forks (threads do not survive a
 * fork) and started again after; the epoll set and the connections in
 * it carry over.
 *
 * Leader and followers.  Driving is a token (p->driving): whoever
 * holds it runs the loop's iterations, so the connections still have
 * one reader at a time.  An issuer that waits for its request
 * (ioreq_wait) takes the token if nobody holds it and drives itself
 * until its request is complete: it reads its own replies, and at low
 * queue depth no other thread is woken at all (the poller thread would
 * have been woken by the reply, and would then have woken the issuer).
 * An issuer that finds the token taken sleeps as a follower
 * (p->followers counts them; the completion that wakes one uncounts
 * it), and the holder's iterations complete its request.  A leader
 * whose request is complete gives the token back and, if followers are
 * left, wakes the poller thread, which drives while there are any
 * (at high queue depth it keeps the token, as before).  Giving back and
 * joining are ordered like Dekker's: the leader stores the token free
 * and then reads the count, a follower counts itself and then tries
 * the token, so one of them sees the other.  The thread itself sleeps
 * on a futex (thread_seq) when nobody needs it.  Nobody drives an idle
 * volume then, so the monitor runs one iteration at each tick
 * (poller_look) to hear of connections that ended.  -D
 * replicate.lead=0 leaves all the driving to the thread.
 *
 * Deferred sends.  While it handles an iteration's events the driver
 * sets p->busy, and an issuer on a wire then leaves its command queued
 * instead of sending it (wire.c); send_deferred sends every
 * connection's queue once the events are handled.  Under load the
 * driver is busy most of the time, so several requests' commands leave
 * in one sendmsg per connection, and the server reads them in one go;
 * with three legs at queue depth 32 that halves the sendmsg calls and
 * cuts the replicas' context switches by a third.  An idle driver
 * sleeps in epoll_wait, not busy, and the issuer sends at once.
 * Lock order: p->lock, then a wire's lock.
 *
 * Scheduling.  With sched=auto the thread's policy follows the number
 * of followers at each iteration, and so does an issuer's when it
 * leads or sleeps (sched.c): SCHED_BATCH at depth, so that the issuers
 * it wakes do not preempt it in the middle of an iteration (with the
 * sends deferred to it still queued), SCHED_OTHER for a lone request.
 *
 * Adoption.  An event loop of our own that already sleeps in the
 * kernel (the ublk frontend's first queue, which sleeps in io_uring)
 * can take the poller's place: poller_adopt stops the thread, takes
 * the token for good and gives the loop the epoll descriptor to watch;
 * the loop calls poller_drive whenever it is readable, and
 * poller_release gives the token back and starts the thread again.  A
 * request that loop started is then completed by the loop's own
 * thread, which reads the reply: no thread hand-off at all.  A volume
 * with a ublk frontend has requests nobody waits for (ioreq on_done),
 * so before its queues start its issuers stop leading
 * (poller_use_thread): from then on the thread, or the adopter, drives
 * all the time.
 *
 * A leg's own poller.  An asynchronous leg's connections are driven by
 * a poller of their own (leg.c, leg_own_poller), in thread mode from
 * its creation: its thread reads the replies of a leg that may answer
 * milliseconds late, so that no client request's issuer reads them
 * while it leads the volume's poller, and none waits for them as a
 * follower.  The leg's sender waits on that poller, and no request
 * goes both to such a leg and to another (ioreq.c, "One poller per
 * request").  Its thread runs whenever the volume's does (leg.c,
 * legs_start_pollers).
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <libnbd.h>

#include "internal.h"
#include "poller.h"
#include "thread-sched.h"
#include "ioreq.h"
#include "cleanup.h"
#include "array.h"
#include "rangelock.h"
#include "wire.h"
#include "thread-name.h"

int replicate_debug_lead = 1;   /* exported by the plugin.syms / filter.syms */

#define MAX_EVENTS 64

struct poller {
  int epfd;
  int kick_fd;
  pthread_t thread;
  bool thread_running;          /* the poller thread exists */
  _Atomic bool stop;
  _Atomic bool driving;         /* the token: somebody drives */
  _Atomic bool lead_ok;         /* issuers may lead */
  _Atomic int followers;        /* issuers asleep on unfinished requests */
  _Atomic uint32_t thread_seq;  /* futex word: the thread, look again */
  _Atomic uint64_t loops;       /* iterations completed */
  _Atomic bool busy;            /* the driver handles events: defer sends */
  _Atomic bool deferred;        /* an issuer deferred a send meanwhile */
  _Atomic bool aborts;          /* a wire was flagged for wire_abort */
  bool sched_auto;              /* the thread's policy follows the depth */
  bool own;                     /* a leg's own (poller_new_own) */
  pthread_mutex_t lock;         /* conns[] */
  struct conn **conns;
  size_t nr_conns, cap_conns;
};

/* Create a poller (no thread yet); with sched_auto its thread's policy
 * follows the queue depth (sched.c).  Returns NULL after nbdkit_error.
 */
struct poller *
poller_new (bool sched_auto)
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
  atomic_init (&p->lead_ok, replicate_debug_lead != 0);
  p->sched_auto = sched_auto;
  return p;
}

/* Create a leg's own poller (see the design note): its thread drives
 * always, under a name of its own (leg_poller_thread).
 */
struct poller *
poller_new_own (void)
{
  struct poller *p = poller_new (false);

  if (p == NULL)
    return NULL;
  poller_use_thread (p);
  p->own = true;
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
 * dead connection out of epoll.  Without add_out, EPOLLOUT is kept or
 * dropped but not added: a wire's commands queued while the driver is
 * busy are sent by send_deferred at the end of the iteration, which
 * adds it if that send is partial, so adding it now would only cost
 * two epoll_ctl calls.
 */
static void
update_events (struct poller *p, struct conn *c, bool check_dead,
               bool add_out)
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
  if ((add_out || (c->events & EPOLLOUT)) && conn_wants_write (c))
    want |= EPOLLOUT;
  if (want == c->events)
    return;
  ev.events = want;
  if (epoll_ctl (p->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
    c->events = want;
}

/* Abort up to max of the wires flagged for it (poller_want_abort),
 * outside p->lock (their completions run), but in this iteration,
 * which a detach waits for.  Returns how many were flagged.
 */
static size_t
abort_flagged (struct poller *p, size_t max)
{
  struct conn *todo[16];
  size_t i, n = 0;

  assert (max <= sizeof todo / sizeof todo[0]);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&p->lock);
    for (i = 0; i < p->nr_conns && n < max; ++i)
      if (atomic_exchange (&p->conns[i]->want_abort, false))
        todo[n++] = p->conns[i];
  }
  for (i = 0; i < n; ++i) {
    wire_abort (todo[i]);
    ioreq_wake_deferred (todo[i]);
    update_events (p, todo[i], true, false);
  }
  return n;
}

/* A kick: drain it and look at the connections workers flagged. */
static void
handle_kick (struct poller *p)
{
  uint64_t n;
  size_t i;

  if (read (p->kick_fd, &n, sizeof n) == -1 && errno != EAGAIN)
    nbdkit_debug ("poller drain: %m");
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&p->lock);
    for (i = 0; i < p->nr_conns; ++i)
      if (atomic_exchange (&p->conns[i]->want_write, false))
        update_events (p, p->conns[i], true, true);
  }
  if (atomic_exchange (&p->aborts, false))
    while (abort_flagged (p, 16) == 16)
      ;
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
    ioreq_wake_deferred (c);
    update_events (p, c, true, false);
    return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
    r = nbd_aio_notify_read (c->nbd);
  else if (events & EPOLLOUT)
    r = nbd_aio_notify_write (c->nbd);
  ioreq_wake_deferred (c);
  retire_failed (c);
  update_events (p, c, r == -1 || (events & (EPOLLHUP | EPOLLERR)), true);
}

/* The iteration's events are handled: stop deferring issuers' sends,
 * then send what they queued meanwhile, if anybody did.  Clearing busy
 * before reading deferred pairs with poller_defer_send, which sets
 * deferred before it reads busy, so a deferred command is always seen
 * here.
 */
static void
send_deferred (struct poller *p)
{
  size_t i;

  atomic_store (&p->busy, false);
  if (!atomic_load (&p->deferred) || !atomic_exchange (&p->deferred, false))
    return;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&p->lock);
  for (i = 0; i < p->nr_conns; ++i) {
    struct conn *c = p->conns[i];

    if (c->wire && wire_has_queued (c->wire)) {
      wire_on_writable (c);
      update_events (p, c, false, true);
    }
  }
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
  if (n > 0)
    atomic_store (&p->busy, true);
  for (i = 0; i < n; ++i) {
    if (evs[i].data.ptr == NULL)
      handle_kick (p);
    else
      handle_conn (p, evs[i].data.ptr, evs[i].events);
  }
  if (n > 0)
    send_deferred (p);
  atomic_fetch_add (&p->loops, 1);
  return 0;
}

/* Take the token if nobody holds it. */
static bool
take (struct poller *p)
{
  bool held = false;

  return atomic_compare_exchange_strong (&p->driving, &held, true);
}

/* Have the thread look again whether it is needed. */
static void
wake_thread (struct poller *p)
{
  atomic_fetch_add (&p->thread_seq, 1);
  futex_wake (&p->thread_seq, 1);
}

/* Does the volume need the thread to drive: followers wait, or
 * issuers may not lead?
 */
static bool
needs_thread (struct poller *p)
{
  return atomic_load (&p->followers) > 0 || !atomic_load (&p->lead_ok);
}

/* The followers counted now (a wake-up may uncount one before it is
 * counted, so the count can dip below zero for a moment).
 */
static unsigned
followers_now (int n)
{
  return n > 0 ? (unsigned) n : 0;
}

/* Set the thread's policy for the depth it drives at (sched.c): lone
 * while at most one issuer waits for it.
 */
static void
adapt_thread (struct poller *p)
{
  unsigned depth = followers_now (atomic_load (&p->followers));

  sched_adapt (depth <= 1, depth);
}

/* The poller thread: drives while it is needed and the token is free,
 * else sleeps until woken.
 */
static void *
poller_thread (void *arg)
{
  struct poller *p = arg;

  while (!atomic_load (&p->stop)) {
    uint32_t seq = atomic_load (&p->thread_seq);
    int r;

    if (!needs_thread (p) || !take (p)) {
      futex_wait (&p->thread_seq, seq, NULL);
      continue;
    }
    if (p->sched_auto)
      adapt_thread (p);
    r = iterate (p, -1);
    atomic_store (&p->driving, false);
    if (r == -1)
      break;
  }
  return NULL;
}

/* The thread of a leg's own poller: the same loop, named apart for
 * profilers and debuggers (bench/cpucost counts it with the leg's
 * sender, off the synchronous path).
 */
static void *
leg_poller_thread (void *arg)
{
  return poller_thread (arg);
}

/* Start the thread. */
int
poller_start (struct poller *p)
{
  int r;

  if (p->thread_running)
    return 0;
  atomic_store (&p->stop, false);
  r = pthread_create (&p->thread, NULL,
                      p->own ? leg_poller_thread : poller_thread, p);
  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  thread_name (p->thread, p->own ? "rep-legpoller" : "rep-poller");
  p->thread_running = true;
  return 0;
}

/* Stop and join the thread; the connections stay registered. */
void
poller_stop (struct poller *p)
{
  if (!p->thread_running)
    return;
  atomic_store (&p->stop, true);
  wake_thread (p);
  kick (p);
  pthread_join (p->thread, NULL);
  p->thread_running = false;
}

/* From now on the thread (or an adopter) drives, never an issuer. */
void
poller_use_thread (struct poller *p)
{
  atomic_store (&p->lead_ok, false);
  wake_thread (p);
}

/* Take the token to drive from the calling thread, if issuers may
 * lead and nobody drives.
 */
bool
poller_try_lead (struct poller *p)
{
  return atomic_load (&p->lead_ok) && take (p);
}

/* One iteration by the leader, waiting up to timeout_ms (-1: no
 * limit).  Returns 0, or -1 if epoll failed.
 */
int
poller_lead (struct poller *p, int timeout_ms)
{
  return iterate (p, timeout_ms);
}

/* Give the token back; if somebody still needs a driver, wake the
 * thread.
 */
void
poller_end_lead (struct poller *p)
{
  atomic_store (&p->driving, false);
  if (needs_thread (p))
    wake_thread (p);
}

/* An issuer starts (poller_follow, which returns how many others were
 * waiting) or stops (poller_unfollow) waiting for somebody else to
 * complete its request.
 */
unsigned
poller_follow (struct poller *p)
{
  return followers_now (atomic_fetch_add (&p->followers, 1));
}

void
poller_unfollow (struct poller *p)
{
  atomic_fetch_sub (&p->followers, 1);
}

/* If nobody drives and issuers may lead, run one iteration without
 * waiting: what an idle volume's connections say (an end of stream)
 * is then heard.  Called by the monitor at each tick.
 */
void
poller_look (struct poller *p)
{
  if (p && poller_try_lead (p)) {
    iterate (p, 0);
    poller_end_lead (p);
  }
}

/* Take over the driving for good (see the note).  A leader in its term
 * gives the token back once its request is complete.  Returns the
 * epoll descriptor to watch for readability.
 */
int
poller_adopt (struct poller *p)
{
  poller_use_thread (p);
  poller_stop (p);
  while (!take (p))
    usleep (100);
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
  atomic_store (&p->driving, false);
  return poller_start (p);
}

/* Register a connection. */
int
poller_attach (struct conn *c, struct poller *p)
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
poller_detach (struct conn *c)
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
  if (!atomic_load (&p->driving))
    return;                     /* iterations happen only with the token */
  loops = atomic_load (&p->loops);
  kick (p);
  while (atomic_load (&p->loops) == loops && atomic_load (&p->driving))
    sched_yield ();
}

/* Is nobody driving the connection's poller (so no reader can want
 * the wire's lock while an issuer sends)?
 */
bool
poller_nobody_drives (const struct conn *c)
{
  return c->poller == NULL || !atomic_load (&c->poller->driving);
}

/* An issuer has queued a command: should it leave the sending to the
 * connection's driver, in the middle of an iteration (see the top)?
 * If so, the driver is told to look at the queues when it ends: busy
 * is read again after deferred is set (send_deferred clears busy and
 * then reads deferred), so either the driver sees deferred or the
 * issuer sees the driver idle and sends itself.  An idle driver costs
 * the issuer one load.
 */
bool
poller_defer_send (const struct conn *c)
{
  struct poller *p = c->poller;

  if (p == NULL || !atomic_load (&p->busy))
    return false;
  atomic_store (&p->deferred, true);
  return atomic_load (&p->busy);
}

/* An aborted wire on TCP, whose socket is not shut down for reading
 * (conn_shutdown, or a send error): have the driver fail its commands
 * (wire_abort).  Any thread.
 */
void
poller_want_abort (struct conn *c)
{
  if (c->poller) {
    atomic_store (&c->want_abort, true);
    atomic_store (&c->poller->aborts, true);
    kick (c->poller);
  }
}

/* An issuer left bytes to send: have the poller wait for the socket
 * to be writable.
 */
void
poller_want_write (struct conn *c)
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
poller_kick_if_needed (struct conn *c)
{
  if (nbd_aio_get_direction (c->nbd) & LIBNBD_AIO_DIRECTION_WRITE)
    poller_want_write (c);
}
