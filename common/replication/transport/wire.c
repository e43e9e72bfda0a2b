/* SPDX-License-Identifier: BSD-3-Clause */
/* The wire: the engine speaks NBD's transmission phase itself on a
 * connection whose handshake libnbd has done.
 *
 * Why.  Through libnbd a 4 KiB write to a leg costs two send system
 * calls (the header, then the payload), a reply costs at least one
 * receive of 16 bytes, and every call takes the handle's lock,
 * allocates a command and runs its state machine.  Here a request is
 * one sendmsg (header and payload together) and one receive of up to
 * RBUF_SIZE bytes picks up every reply that has arrived.  libnbd keeps
 * what it does well: connecting (URIs, TLS, option negotiation) and
 * reading the export's capabilities.  A TLS connection stays with
 * libnbd entirely (its bytes are encrypted), as does every connection
 * when the debug flag -D replicate.wire=0 is given.
 *
 * Commands in flight are entries of a table indexed by the low 32 bits
 * of the NBD handle; the high 32 bits are the entry's generation, so a
 * stale or invented handle from a server is recognised and treated as
 * the protocol error it is (the connection is dropped, never a buffer
 * written).  A command leaves the table only when its reply is
 * complete, or when the connection dies.
 *
 * Sending.  Any thread: under w->lock a command gets its entry and
 * joins the send queue (a list through the entries).  One thread at a
 * time is the sender (w->sending): it sends the queue in order, as
 * many commands per sendmsg as are queued, and drops the lock around
 * the system call.  That call is most of what issuing costs (it wakes
 * the server's thread); held through it, the lock put the reader and
 * other issuers to sleep: with three legs at queue depth 32, dropping
 * it saves a quarter of the futex calls per request.  When nobody
 * drives the poller (low queue depth: the issuer is about to read its
 * own replies) there is no reader to put to sleep, and a command on an
 * idle connection is sent at once under the lock (send_alone), without
 * the queue's bookkeeping or a second lock round trip.  A thread whose
 * command finds a sender at work leaves it queued and goes on, and the
 * sender takes it in its next sendmsg.  The sender makes at most
 * SEND_ROUNDS calls per turn.  What it leaves, or what the socket does
 * not take, waits for EPOLLOUT (c->want_write and a kick, as for
 * libnbd), and then wire_on_writable sends it.
 *
 * Deferring to the driver.  While the poller's driver is in the middle
 * of an iteration (reading replies, waking issuers), an issuer does not
 * send: it leaves its command queued, and the driver sends every
 * connection's queue when the iteration ends (poller.c).  Under load
 * the driver is busy most of the time, so the commands of several
 * requests leave in one sendmsg per connection, and the server finds
 * them in one receive; an idle volume's driver sleeps in epoll_wait,
 * and the issuer sends at once as before.
 *
 * Payloads are not copied: the issuer's buffer lives until its
 * completion, and a reply to a command not yet sent whole is refused
 * as a protocol error, so no completion comes before the server has
 * read it all.  A reply can overtake the sender's count of the bytes
 * its sendmsg took (the lock is dropped meanwhile): the reader then
 * waits on w->sent_cond for the count (await_count) before it
 * judges.  Headers are copied into the sender's stack for the call,
 * because the table may grow, and move, while the lock is dropped.
 *
 * Corking.  A thread that starts a batch of requests (the ublk queue
 * thread, for every request one io_uring wait brought) calls wire_cork
 * first: its commands then stay queued, the connections they went to
 * are remembered (at most WIRE_CORK_MAX), and wire_uncork sends each
 * connection's queue in one sendmsg.  Three legs and eight requests:
 * three system calls instead of twenty-four.  Commands other threads
 * issue meanwhile on a held connection queue behind and go out with
 * the batch.  A held connection keeps its leg's issue window entered
 * (leg->users, see leg.c), so leg_close cannot close it before
 * wire_uncork.
 *
 * Receiving: wire-recv.c, the reader (the connection's driver only).
 * wire-int.h has what both halves share (the table, the reader's state).
 *
 * Death.  End of file, a receive or send error, or a protocol error:
 * the socket is shut down, w->dead set under the lock (after which no
 * command is accepted), and every command in the table completes with
 * ENOTCONN.  On a Unix socket conn_shutdown's shutdown(2) is noticed
 * here as end of file, so aborting a connection works as it did with
 * libnbd.  On TCP the socket is shut down for sending only, so that
 * the server's late replies are received rather than answered with a
 * reset (drain.c reads them to the server's FIN): an abort, or a send
 * error, has the driver run wire_abort instead (poller_want_abort), and
 * a send or receive error is remembered (wire_saw_error).
 *
 * Lock order: w->lock is a leaf; completions run without it.  Nobody
 * waits for the reader, so its wait for a sender, whose sendmsg does
 * not block, always ends.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "internal.h"
#include "poller.h"
#include "leg.h"
#include "ioreq.h"
#include "wire.h"
#include "wire-int.h"
#include "cleanup.h"

int replicate_debug_wire = 1;   /* exported by the plugin.syms / filter.syms */

/* Each thread's cork (wire_cork), NULL when it has none.  A
 * pthread key rather than a __thread variable: the plugin is dlopened,
 * so a __thread variable would live in dynamically allocated TLS,
 * which thread sanitizers mistake for a race when a thread exits.
 */
static pthread_key_t cork_key;
static pthread_once_t cork_key_once = PTHREAD_ONCE_INIT;

/* Create the cork key (once). */
static void
make_cork_key (void)
{
  if (pthread_key_create (&cork_key, NULL) != 0)
    abort ();
}

/* Take over a connection's transmission phase (see wire.h). */
struct wire *
wire_new (int fd, bool structured, bool tcp)
{
  struct wire *w = calloc (1, sizeof *w);

  if (w == NULL)
    return NULL;
  pthread_once (&cork_key_once, make_cork_key);
  w->fd = fd;
  w->structured = structured;
  w->tcp = tcp;
  w->free_head = w->out_head = w->out_tail = NO_ENTRY;
  pthread_mutex_init (&w->lock, NULL);
  pthread_cond_init (&w->sent_cond, NULL);
  w->state = R_HEADER;
  w->dst = w->hdr;
  w->need = SIMPLE_SIZE;
  return w;
}

/* Free the wire of a connection with nothing in flight. */
void
wire_free (struct wire *w)
{
  if (w == NULL)
    return;
  pthread_mutex_destroy (&w->lock);
  pthread_cond_destroy (&w->sent_cond);
  free (w->ents);
  free (w->pbuf);
  free (w);
}

/* ---- the table (w->lock held) ---------------------------------------- */

/* Double the table, threading the new entries onto the free list. */
static int
grow_table (struct wire *w)
{
  uint32_t n = w->cap ? w->cap * 2 : 64, i;
  struct entry *e;

  if (n <= w->cap)
    return -1;
  e = realloc (w->ents, n * sizeof *e);
  if (e == NULL)
    return -1;
  memset (&e[w->cap], 0, (n - w->cap) * sizeof *e);
  for (i = w->cap; i < n; ++i)
    e[i].next = i + 1 < n ? i + 1 : w->free_head;
  w->free_head = w->cap;
  w->ents = e;
  w->cap = n;
  return 0;
}

/* Take a free entry.  Returns its index, or NO_ENTRY. */
static uint32_t
alloc_entry (struct wire *w)
{
  uint32_t i;

  if (w->free_head == NO_ENTRY && grow_table (w) == -1)
    return NO_ENTRY;
  i = w->free_head;
  w->free_head = w->ents[i].next;
  w->ents[i].gen++;
  return i;
}

/* ---- sending --------------------------------------------------------- */

/* Add what is left of entry e to iov (at most two vectors), its
 * header from hdr, a copy of e->hdr; returns how many were added.
 */
static int
entry_iov (const struct entry *e, unsigned char *hdr, struct iovec *iov)
{
  size_t total = wire_size (e);
  int n = 0;

  if (e->sent < REQ_SIZE)
    iov[n++] = (struct iovec) {
      .iov_base = hdr + e->sent, .iov_len = REQ_SIZE - e->sent };
  if (total > REQ_SIZE) {
    size_t done = e->sent > REQ_SIZE ? e->sent - REQ_SIZE : 0;
    iov[n++] = (struct iovec) {
      .iov_base = (char *) e->buf + done, .iov_len = e->count - done };
  }
  return n;
}

/* n bytes of the queue went out: advance its entries, popping those
 * sent whole.
 */
static void
advance_queue (struct wire *w, size_t n)
{
  while (n > 0 && w->out_head != NO_ENTRY) {
    struct entry *e = &w->ents[w->out_head];
    size_t left = wire_size (e) - e->sent;

    if (n < left) {
      e->sent += n;
      return;
    }
    e->sent += left;
    n -= left;
    w->out_head = e->next;
  }
  if (w->out_head == NO_ENTRY)
    w->out_tail = NO_ENTRY;
}

/* sendmsg of cnt vectors, without waiting.  Returns the bytes sent, or
 * -1 (errno).
 */
static ssize_t
send_iov (struct wire *w, struct iovec *iov, size_t cnt)
{
  struct msghdr msg = { .msg_iov = iov, .msg_iovlen = cnt };
  ssize_t n;

  do
    n = sendmsg (w->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n == -1 && errno == EINTR);
  if (n == -1)
    note_socket_error (w, errno);
  return n;
}

/* Point iov at the queue's unsent bytes from its head, as many
 * commands as MAX_IOV allows, their headers copied to hdrs (w->lock
 * held).  Returns the number of vectors.
 */
static size_t
gather (struct wire *w, struct iovec *iov, unsigned char (*hdrs)[REQ_SIZE])
{
  size_t cnt = 0, k = 0;
  uint32_t i;

  for (i = w->out_head; i != NO_ENTRY && cnt + 2 <= MAX_IOV;
       i = w->ents[i].next, ++k) {
    memcpy (hdrs[k], w->ents[i].hdr, REQ_SIZE);
    cnt += entry_iov (&w->ents[i], hdrs[k], iov + cnt);
  }
  return cnt;
}

/* Counts were updated: let a reader waiting for them look again. */
static void
counted (struct wire *w)
{
  if (w->send_waited) {
    w->send_waited = false;
    pthread_cond_broadcast (&w->sent_cond);
  }
}

/* Be the sender (see the top; w->lock held, dropped around each
 * sendmsg): send the queue in order without waiting, unless another
 * thread is sending it.  Returns 1 when nothing is left to this
 * thread, 0 when the rest must wait for EPOLLOUT, -1 (errno) on error.
 */
static int
flush_queue (struct wire *w)
{
  struct iovec iov[MAX_IOV];
  unsigned char hdrs[MAX_IOV][REQ_SIZE];    /* a vector or two each */
  unsigned round;
  int r = 1, e = 0;

  if (atomic_load (&w->sending))
    return 1;
  atomic_store (&w->sending, true);
  for (round = 0; w->out_head != NO_ENTRY && !w->corked; ++round) {
    size_t cnt;
    ssize_t n;

    if (round == SEND_ROUNDS) {
      r = 0;
      break;
    }
    cnt = gather (w, iov, hdrs);
    pthread_mutex_unlock (&w->lock);
    n = send_iov (w, iov, cnt);
    e = errno;
    pthread_mutex_lock (&w->lock);
    if (n == -1) {
      r = e == EAGAIN || e == EWOULDBLOCK ? 0 : -1;
      break;
    }
    advance_queue (w, n);
    counted (w);
  }
  if (w->out_head == NO_ENTRY)
    atomic_store (&w->out_pending, false);
  atomic_store (&w->sending, false);
  counted (w);
  errno = e;
  return r;
}

/* Send entry i alone, at once, with the lock held (nothing queued,
 * nobody sending, nobody reading replies): the common case at low
 * queue depth, where the issuer then reads its own replies, without
 * the queue's bookkeeping or a second lock round trip.  Returns true if
 * it went out whole; else e->sent says how much did, and the caller
 * queues the rest.
 */
static bool
send_alone (struct wire *w, uint32_t i)
{
  struct entry *e = &w->ents[i];
  struct iovec iov[2];
  ssize_t n = send_iov (w, iov, entry_iov (e, e->hdr, iov));

  if (n > 0)
    e->sent = n;
  return e->sent == wire_size (e);
}

/* Send what c's queue holds (w->lock held).  Returns true if bytes are
 * left for EPOLLOUT.  After a send error the reader fails every
 * command, these included: a Unix socket is shut down (end of file for
 * the reader), a TCP one is left to the driver (see Death).
 */
static bool
push (struct conn *c)
{
  struct wire *w = c->wire;
  int r = flush_queue (w);

  if (r == -1 && w->tcp)
    poller_want_abort (c);
  else if (r == -1)
    shutdown (w->fd, SHUT_RDWR);
  return r == 0;
}

/* Append entry i to the send queue. */
static void
enqueue (struct wire *w, uint32_t i)
{
  w->ents[i].next = NO_ENTRY;
  if (w->out_tail == NO_ENTRY)
    w->out_head = i;
  else
    w->ents[w->out_tail].next = i;
  w->out_tail = i;
  atomic_store (&w->out_pending, true);
}

/* Fill entry i for a command and its request header. */
static void
fill_entry (struct wire *w, uint32_t i, struct ioslot *s, uint16_t type,
            uint16_t flags, void *buf, uint64_t offset, uint32_t count)
{
  struct entry *e = &w->ents[i];

  e->slot = s;
  e->buf = buf;
  e->offset = offset;
  e->count = count;
  e->type = type;
  e->sent = 0;
  e->err = 0;
  e->seen = 0;
  put_be (e->hdr, NBD_REQUEST_MAGIC, 4);
  put_be (e->hdr + 4, flags, 2);
  put_be (e->hdr + 6, type, 2);
  put_be (e->hdr + 8, ((uint64_t) e->gen << 32) | i, 8);
  put_be (e->hdr + 16, offset, 8);
  put_be (e->hdr + 24, count, 4);
}

/* Under cork k, hold c's queue until wire_uncork (w->lock held;
 * called inside the leg's issue window).  Returns false if the cork
 * cannot take another connection.
 */
static bool
cork_hold (struct wire_cork *k, struct conn *c)
{
  struct wire *w = c->wire;

  if (w->corked)
    return true;
  if (k->n == WIRE_CORK_MAX)
    return false;
  w->corked = true;
  atomic_fetch_add (&c->leg->users, 1);   /* as leg_enter, already inside */
  k->conns[k->n++] = c;
  return true;
}

/* Send one command (see wire.h). */
int
wire_issue (struct conn *c, uint16_t type, uint16_t flags, void *buf,
            uint64_t offset, uint32_t count, struct ioslot *s)
{
  struct wire *w = c->wire;
  struct wire_cork *k = pthread_getspecific (cork_key);
  bool want = false;
  uint32_t i;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);

    if (atomic_load (&w->dead))
      return ENOTCONN;
    i = alloc_entry (w);
    if (i == NO_ENTRY)
      return ENOMEM;
    fill_entry (w, i, s, type, flags, buf, offset, count);
    /* Nobody else sending and nobody reading replies: send it now,
     * under the lock.  Else it is queued, and sent now with the lock
     * dropped only if nothing is queued before it, nobody holds the
     * queue and the driver is not in the middle of an iteration: else
     * the cork's owner, the sender at work, EPOLLOUT or the driver at
     * the end of its iteration (poller_defer_send) sends it.
     */
    if (k == NULL && !w->corked && w->out_head == NO_ENTRY &&
        !atomic_load (&w->sending) && poller_nobody_drives (c) &&
        send_alone (w, i))
      return 0;
    enqueue (w, i);
    if ((k && cork_hold (k, c)) || w->corked || w->out_head != i ||
        poller_defer_send (c))
      return 0;
    want = push (c);
  }
  if (want)
    poller_want_write (c);
  return 0;
}

/* Hold this thread's commands in their queues (see wire.h). */
void
wire_cork (struct wire_cork *k)
{
  pthread_once (&cork_key_once, make_cork_key);
  k->n = 0;
  pthread_setspecific (cork_key, k);
}

/* Send every queue held since wire_cork, one system call per
 * connection for all its commands.
 */
void
wire_uncork (struct wire_cork *k)
{
  unsigned i;

  pthread_setspecific (cork_key, NULL);
  for (i = 0; i < k->n; ++i) {
    struct conn *c = k->conns[i];
    struct wire *w = c->wire;
    bool want;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);
      w->corked = false;
      want = push (c);
    }
    if (want)
      poller_want_write (c);
    leg_leave (c->leg);         /* the last access to c */
  }
  k->n = 0;
}

/* The socket can take more: send the queue in order (the driver). */
void
wire_on_writable (struct conn *c)
{
  struct wire *w = c->wire;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);

  if (!w->corked)
    push (c);
}

/* Does the driver need to wait for EPOLLOUT?  Not while a sender is at
 * work: it sends the queue, or asks for EPOLLOUT when it stops.
 */
bool
wire_wants_write (const struct wire *w)
{
  return atomic_load (&w->out_pending) && !atomic_load (&w->dead) &&
    !atomic_load (&w->corked) && !atomic_load (&w->sending);
}

/* Are commands queued, to be sent? */
bool
wire_has_queued (const struct wire *w)
{
  return atomic_load (&w->out_pending);
}

/* Has the connection died? */
bool
wire_is_dead (const struct wire *w)
{
  return atomic_load (&w->dead);
}

/* Did a send or receive fail other than by our own shutdown (a reset,
 * a timeout)?
 */
bool
wire_saw_error (const struct wire *w)
{
  return atomic_load (&w->saw_error);
}

/* ---- completing -------------------------------------------------------- */

/* The connection is dead: refuse new commands and fail every command
 * in the table.  No command can enter once dead is set, so one pass
 * over the table finds them all.
 */
void
wire_fail_all (struct conn *c)
{
  struct wire *w = c->wire;
  uint32_t i, cap;

  shutdown (w->fd, w->tcp ? SHUT_WR : SHUT_RDWR);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);
    atomic_store (&w->dead, true);
    w->out_head = w->out_tail = NO_ENTRY;
    atomic_store (&w->out_pending, false);
    while (atomic_load (&w->sending))   /* its sendmsg reads payloads */
      await_count (w);
    cap = w->cap;
  }
  for (i = 0; i < cap; ++i) {
    struct ioslot *s = NULL;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);
      if (w->ents[i].slot)
        s = free_entry (w, i);
    }
    if (s)
      ioreq_slot_done (s, ENOTCONN);
  }
}
