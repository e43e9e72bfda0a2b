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
 * Sending.  Any thread: under w->lock a command gets its entry and,
 * if nothing is queued before it, is sent at once; otherwise, or for
 * what the socket does not take, it joins the send queue (a list
 * through the entries) and the poller is asked to wait for EPOLLOUT
 * (c->want_write and a kick, as for libnbd), then wire_on_writable
 * sends the rest in order, several commands per sendmsg.  Payloads
 * are not copied: the issuer's buffer lives until its completion, and
 * a reply to a command not yet sent whole is refused as a protocol
 * error, so no completion comes before the server has read it all.
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
 * Receiving.  Only the connection's driver (the poller thread or the
 * loop that adopted it) reads, so the reader's state needs no lock.
 * Bytes arrive in rbuf; a reply's data larger than what is buffered
 * is received straight into the read's buffer.  Simple and structured
 * replies are both understood (with structured replies negotiated, a
 * server may still answer anything but a successful read simply).  A
 * read succeeds only if its chunks covered every byte asked for (the
 * server may not send overlapping chunks, so their lengths are
 * summed); one that did not fails with EIO, the connection stays.
 * Completions run outside the lock, in the driver, and wake their
 * issuers through the connection's wake list as libnbd's callbacks
 * did (ioreq.c).
 *
 * Death.  End of file, a receive or send error, or a protocol error:
 * the socket is shut down, w->dead set under the lock (after which no
 * command is accepted), and every command in the table completes with
 * ENOTCONN.  conn_shutdown's shutdown(2) is noticed here as end of
 * file, so aborting a connection works as it did with libnbd.
 *
 * Lock order: w->lock is a leaf; completions run without it.
 */

#include <config.h>

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "internal.h"
#include "wire.h"
#include "cleanup.h"

int replicate_debug_wire = 1;   /* exported by the plugin.syms / filter.syms */

#define NBD_REQUEST_MAGIC 0x25609513
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33ef
#define NBD_REPLY_FLAG_DONE 1
#define NBD_REPLY_TYPE_NONE 0
#define NBD_REPLY_TYPE_OFFSET_DATA 1
#define NBD_REPLY_TYPE_OFFSET_HOLE 2
#define NBD_REPLY_TYPE_BLOCK_STATUS 5
#define NBD_REPLY_TYPE_IS_ERR(t) (((t) & 0x8000) != 0)

#define REQ_SIZE 28             /* a request's header */
#define SIMPLE_SIZE 16          /* a simple reply, or a chunk's start */
#define CHUNK_SIZE 20           /* a structured reply chunk's header */
#define RBUF_SIZE 65536
#define MAX_CHUNK_META (16 * 1024 * 1024)   /* block status, errors */
#define NO_ENTRY UINT32_MAX
#define MAX_IOV 64              /* vectors per sendmsg (32 commands) */

/* A command in flight. */
struct entry {
  struct ioslot *slot;          /* NULL: the entry is free */
  void *buf;                    /* read: destination; write: payload */
  uint64_t offset;
  uint32_t count;
  uint32_t gen;                 /* the handle's high half */
  uint16_t type;
  uint32_t next;                /* free list, or the send queue */
  size_t sent;                  /* bytes of header + payload sent */
  int err;                      /* the first error a chunk reported */
  uint64_t seen;                /* read bytes covered by chunks */
  unsigned char hdr[REQ_SIZE];
};

/* What the reader waits for. */
enum rstate {
  R_HEADER,                     /* 16 bytes: a reply or a chunk's start */
  R_CHUNK_LENGTH,               /* the chunk header's last 4 bytes */
  R_SIMPLE_DATA,                /* a simple reply's read data */
  R_DATA_OFFSET,                /* OFFSET_DATA's offset */
  R_DATA,                       /* OFFSET_DATA's data */
  R_HOLE,                       /* OFFSET_HOLE's offset and length */
  R_META,                       /* a payload parsed whole (pbuf) */
};

/* The reply being read: a copy of its entry's fields, so that the
 * table may grow meanwhile.
 */
struct current {
  uint32_t idx;
  uint16_t type;                /* the command's */
  void *buf;
  uint64_t offset;
  uint32_t count;
  uint16_t chunk_flags, chunk_type;
  uint32_t chunk_len;
};

struct wire {
  int fd;
  bool structured;

  pthread_mutex_t lock;         /* everything below up to the reader */
  struct entry *ents;
  uint32_t cap;
  uint32_t free_head;
  uint32_t out_head, out_tail;  /* the send queue */
  _Atomic bool corked;          /* a thread's cork holds the queue */
  _Atomic bool dead;
  _Atomic bool out_pending;     /* the send queue is not empty */

  /* The reader (the driver only). */
  enum rstate state;
  unsigned char *dst;           /* where the awaited bytes go */
  size_t need;                  /* how many are still awaited */
  unsigned char hdr[CHUNK_SIZE];
  unsigned char fixed[12];      /* OFFSET_DATA, OFFSET_HOLE fields */
  unsigned char *pbuf;          /* R_META payloads */
  size_t pcap;
  struct current cur;
  size_t rpos, rlen;
  unsigned char rbuf[RBUF_SIZE];
};

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
wire_new (int fd, bool structured)
{
  struct wire *w = calloc (1, sizeof *w);

  if (w == NULL)
    return NULL;
  pthread_once (&cork_key_once, make_cork_key);
  w->fd = fd;
  w->structured = structured;
  w->free_head = w->out_head = w->out_tail = NO_ENTRY;
  pthread_mutex_init (&w->lock, NULL);
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
  free (w->ents);
  free (w->pbuf);
  free (w);
}

/* Store x in the n bytes (1 to 8) at p, big-endian (NBD's byte
 * order): x's low n bytes, moved to the top and swapped, then copied
 * (n is a constant at every call, so this is a shift, a byte swap and
 * one store).
 */
static inline void
put_be (unsigned char *p, uint64_t x, unsigned n)
{
  x = htobe64 (x << (64 - 8 * n));
  memcpy (p, &x, n);
}

/* Load the big-endian number in the n bytes (1 to 8) at p. */
static inline uint64_t
get_be (const unsigned char *p, unsigned n)
{
  uint64_t x = 0;

  memcpy (&x, p, n);
  return be64toh (x) >> (64 - 8 * n);
}

/* The errno for an NBD error code (the protocol's values are Linux's
 * for the codes it defines; anything else is EIO).
 */
static int
errno_of_nbd (uint32_t e)
{
  switch (e) {
  case 0: return 0;
  case 1: return EPERM;
  case 5: return EIO;
  case 12: return ENOMEM;
  case 22: return EINVAL;
  case 28: return ENOSPC;
  case 75: return EOVERFLOW;
  case 95: return ENOTSUP;
  case 108: return ESHUTDOWN;
  default: return EIO;
  }
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

/* Give an entry back; returns the slot it held. */
static struct ioslot *
free_entry (struct wire *w, uint32_t i)
{
  struct ioslot *s = w->ents[i].slot;

  w->ents[i].slot = NULL;
  w->ents[i].next = w->free_head;
  w->free_head = i;
  return s;
}

/* The entry a server's handle names, or NO_ENTRY if it names none. */
static uint32_t
lookup (struct wire *w, uint64_t handle)
{
  uint32_t i = (uint32_t) handle;

  if (i >= w->cap || w->ents[i].slot == NULL ||
      w->ents[i].gen != (uint32_t) (handle >> 32))
    return NO_ENTRY;
  return i;
}

/* ---- sending --------------------------------------------------------- */

/* Bytes of a command on the wire (header and payload). */
static size_t
wire_size (const struct entry *e)
{
  return REQ_SIZE + (e->type == NBD_CMD_WRITE ? e->count : 0);
}

/* Add what is left of entry e to iov (at most two vectors); returns
 * how many were added.
 */
static int
entry_iov (const struct entry *e, struct iovec *iov)
{
  size_t total = wire_size (e);
  int n = 0;

  if (e->sent < REQ_SIZE)
    iov[n++] = (struct iovec) {
      .iov_base = (void *) (e->hdr + e->sent),
      .iov_len = REQ_SIZE - e->sent };
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
  return n;
}

/* Send the queue in order, as many commands per system call as
 * MAX_IOV allows, without waiting (w->lock held).  Returns 1 when it is
 * empty, 0 when the socket is full, -1 (errno) on error.
 */
static int
flush_queue (struct wire *w)
{
  struct iovec iov[MAX_IOV];
  size_t cnt;
  ssize_t n;

  while (w->out_head != NO_ENTRY) {
    uint32_t i = w->out_head;

    cnt = 0;
    while (i != NO_ENTRY && cnt + 2 <= MAX_IOV) {
      cnt += entry_iov (&w->ents[i], iov + cnt);
      i = w->ents[i].next;
    }
    n = send_iov (w, iov, cnt);
    if (n == -1)
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    advance_queue (w, n);
  }
  atomic_store (&w->out_pending, false);
  return 1;
}

/* Send entry i alone, at once (w->lock held, the queue empty): the
 * common case of an idle connection, without the queue's bookkeeping.
 * Returns true if it went out whole; else e->sent says how much did,
 * and the caller queues the rest.
 */
static bool
send_alone (struct wire *w, uint32_t i)
{
  struct entry *e = &w->ents[i];
  struct iovec iov[2];
  ssize_t n = send_iov (w, iov, entry_iov (e, iov));

  if (n > 0)
    e->sent = n;
  return e->sent == wire_size (e);
}

/* Send what the queue holds (w->lock held).  Returns true if bytes are
 * left for EPOLLOUT.  A send error shuts the socket down: the reader
 * then fails every command, these included.
 */
static bool
push (struct wire *w)
{
  int r = flush_queue (w);

  if (r == -1)
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
    /* Sent now only if nothing is queued before it and nobody holds
     * the queue: else the cork's owner or EPOLLOUT sends it.
     */
    if (k == NULL && !w->corked && w->out_head == NO_ENTRY &&
        send_alone (w, i))
      return 0;
    enqueue (w, i);
    if ((k && cork_hold (k, c)) || w->corked || w->out_head != i)
      return 0;
    want = push (w);
  }
  if (want)
    conn_want_write (c);
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
      want = push (w);
    }
    if (want)
      conn_want_write (c);
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
    push (w);
}

/* Does the driver need to wait for EPOLLOUT? */
bool
wire_wants_write (const struct wire *w)
{
  return atomic_load (&w->out_pending) && !atomic_load (&w->dead) &&
    !atomic_load (&w->corked);
}

/* Has the connection died? */
bool
wire_is_dead (const struct wire *w)
{
  return atomic_load (&w->dead);
}

/* ---- completing -------------------------------------------------------- */

/* The connection is dead: refuse new commands and fail every command
 * in the table.  No command can enter once dead is set, so one pass
 * over the table finds them all.
 */
static void
fail_all (struct conn *c)
{
  struct wire *w = c->wire;
  uint32_t i, cap;

  shutdown (w->fd, SHUT_RDWR);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);
    atomic_store (&w->dead, true);
    w->out_head = w->out_tail = NO_ENTRY;
    atomic_store (&w->out_pending, false);
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

/* ---- receiving (the driver only) --------------------------------------- */

/* Await n bytes into dst, then handle them in state st. */
static void
await (struct wire *w, enum rstate st, void *dst, size_t n)
{
  w->state = st;
  w->dst = dst;
  w->need = n;
}

/* The current chunk is over: record its outcome in its entry (the
 * first error wins); after the last chunk free the entry and return
 * its slot, with the command's result in *final (w->lock held).  A
 * successful read must have had every byte covered.  Returns NULL
 * while chunks are still to come.
 */
static struct ioslot *
end_chunk_locked (struct wire *w, int err, uint64_t covered, int *final)
{
  const struct current *cur = &w->cur;
  struct entry *e = &w->ents[cur->idx];

  if (err != 0 && e->err == 0)
    e->err = err;
  e->seen += covered;
  if (!(cur->chunk_flags & NBD_REPLY_FLAG_DONE))
    return NULL;
  *final = e->err;
  if (*final == 0 && cur->type == NBD_CMD_READ && e->seen != cur->count)
    *final = EIO;
  return free_entry (w, cur->idx);
}

/* The current chunk is over: end_chunk_locked, then complete the
 * command (outside the lock) if that was its last chunk.
 */
static void
end_chunk (struct conn *c, int err, uint64_t covered)
{
  struct wire *w = c->wire;
  struct ioslot *s;
  int final = 0;

  await (w, R_HEADER, w->hdr, SIMPLE_SIZE);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);
    s = end_chunk_locked (w, err, covered, &final);
  }
  if (s)
    ioreq_slot_done (s, final);
}

/* Make the current command's fields the reader's (from handle; w->lock
 * held).  A reply to a command not yet sent whole is a protocol error:
 * the entry is still on the send queue, its payload still being read.
 */
static int
start_reply_locked (struct wire *w, uint64_t handle)
{
  uint32_t i = lookup (w, handle);
  const struct entry *e;

  if (i == NO_ENTRY || w->ents[i].sent < wire_size (&w->ents[i]))
    return -1;
  e = &w->ents[i];
  w->cur.idx = i;
  w->cur.type = e->type;
  w->cur.buf = e->buf;
  w->cur.offset = e->offset;
  w->cur.count = e->count;
  return 0;
}

/* start_reply_locked, taking the lock. */
static int
start_reply (struct wire *w, uint64_t handle)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);

  return start_reply_locked (w, handle);
}

/* A simple reply's 16 bytes are in.  Returns -1 on a protocol error.
 * Anything but a successful read (whose data follows) ends its command
 * here: looked up and freed under one lock, the reply to a write costs
 * one lock round trip.
 */
static int
on_simple (struct conn *c)
{
  struct wire *w = c->wire;
  uint32_t err = get_be (w->hdr + 4, 4);
  struct ioslot *s;
  int final;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);

    if (start_reply_locked (w, get_be (w->hdr + 8, 8)) == -1)
      return -1;
    w->cur.chunk_flags = NBD_REPLY_FLAG_DONE;
    if (err == 0 && w->cur.type == NBD_CMD_READ) {
      if (w->structured)
        return -1;              /* data must come in chunks */
      await (w, R_SIMPLE_DATA, w->cur.buf, w->cur.count);
      return 0;
    }
    s = end_chunk_locked (w, errno_of_nbd (err), 0, &final);
  }
  await (w, R_HEADER, w->hdr, SIMPLE_SIZE);
  ioreq_slot_done (s, final);
  return 0;
}

/* Make room for a payload parsed whole. */
static int
reserve_pbuf (struct wire *w, size_t n)
{
  unsigned char *p;

  if (n <= w->pcap)
    return 0;
  p = realloc (w->pbuf, n);
  if (p == NULL)
    return -1;
  w->pbuf = p;
  w->pcap = n;
  return 0;
}

/* A chunk header is complete: decide what its payload is.  Returns -1
 * on a protocol error.
 */
static int
on_chunk (struct conn *c)
{
  struct wire *w = c->wire;
  struct current *cur = &w->cur;
  uint16_t type = get_be (w->hdr + 6, 2);
  uint32_t len = get_be (w->hdr + 16, 4);

  if (!w->structured || start_reply (w, get_be (w->hdr + 8, 8)) == -1)
    return -1;
  cur->chunk_flags = get_be (w->hdr + 4, 2);
  cur->chunk_type = type;
  cur->chunk_len = len;
  switch (type) {
  case NBD_REPLY_TYPE_NONE:
    if (len != 0 || !(cur->chunk_flags & NBD_REPLY_FLAG_DONE))
      return -1;
    end_chunk (c, 0, 0);
    return 0;
  case NBD_REPLY_TYPE_OFFSET_DATA:
    if (cur->type != NBD_CMD_READ || len <= 8)
      return -1;
    await (w, R_DATA_OFFSET, w->fixed, 8);
    return 0;
  case NBD_REPLY_TYPE_OFFSET_HOLE:
    if (cur->type != NBD_CMD_READ || len != 12)
      return -1;
    await (w, R_HOLE, w->fixed, 12);
    return 0;
  case NBD_REPLY_TYPE_BLOCK_STATUS:
    if (cur->type != NBD_CMD_BLOCK_STATUS || len < 12 || (len - 4) % 8)
      return -1;
    break;
  default:
    if (!NBD_REPLY_TYPE_IS_ERR (type) || len < 6)
      return -1;
    break;
  }
  if (len > MAX_CHUNK_META || reserve_pbuf (w, len) == -1)
    return -1;
  await (w, R_META, w->pbuf, len);
  return 0;
}

/* Is [off, off+len) inside the current read? */
static bool
within_read (const struct current *cur, uint64_t off, uint64_t len)
{
  return off >= cur->offset && len <= cur->count &&
    off - cur->offset <= cur->count - len;
}

/* Block status entries (pbuf, big-endian) to the request's extent
 * function.  Returns 0 or an errno.  The context id is not looked at:
 * conn_connect asks for base:allocation alone, so no other context may
 * be answered.
 */
static int
deliver_extents (struct conn *c)
{
  struct wire *w = c->wire;
  size_t n = (w->cur.chunk_len - 4) / 4, i;
  uint32_t *ents = (uint32_t *) w->pbuf;   /* in place, after the id */
  struct ioslot *s;

  for (i = 0; i < n; ++i)
    ents[i] = get_be (w->pbuf + 4 + 4 * i, 4);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&w->lock);
    s = w->ents[w->cur.idx].slot;
  }
  return ioreq_slot_extents (s, w->cur.offset, ents, n) == -1 ? EIO : 0;
}

/* An error chunk's payload: its errno (the message goes to debug). */
static int
error_of_chunk (struct wire *w)
{
  uint32_t len = w->cur.chunk_len;
  uint16_t msglen = get_be (w->pbuf + 4, 2);
  int err = errno_of_nbd (get_be (w->pbuf, 4));

  if (err == 0)
    err = EIO;
  if (6u + msglen <= len)
    nbdkit_debug ("leg server error: %.*s", (int) msglen,
                  (const char *) w->pbuf + 6);
  return err;
}

/* The awaited bytes are in: act on them.  Returns -1 on a protocol
 * error.
 */
static int
step (struct conn *c)
{
  struct wire *w = c->wire;
  struct current *cur = &w->cur;
  uint64_t off;
  uint32_t len;

  switch (w->state) {
  case R_HEADER:
    switch (get_be (w->hdr, 4)) {
    case NBD_SIMPLE_REPLY_MAGIC:
      return on_simple (c);
    case NBD_STRUCTURED_REPLY_MAGIC:
      await (w, R_CHUNK_LENGTH, w->hdr + SIMPLE_SIZE,
             CHUNK_SIZE - SIMPLE_SIZE);
      return 0;
    default:
      return -1;
    }
  case R_CHUNK_LENGTH:
    return on_chunk (c);
  case R_SIMPLE_DATA:
    end_chunk (c, 0, cur->count);
    return 0;
  case R_DATA_OFFSET:
    off = get_be (w->fixed, 8);
    len = cur->chunk_len - 8;
    if (!within_read (cur, off, len))
      return -1;
    await (w, R_DATA, (char *) cur->buf + (off - cur->offset), len);
    return 0;
  case R_DATA:
    end_chunk (c, 0, cur->chunk_len - 8);
    return 0;
  case R_HOLE:
    off = get_be (w->fixed, 8);
    len = get_be (w->fixed + 8, 4);
    if (!within_read (cur, off, len))
      return -1;
    memset ((char *) cur->buf + (off - cur->offset), 0, len);
    end_chunk (c, 0, len);
    return 0;
  case R_META:
    end_chunk (c, cur->chunk_type == NBD_REPLY_TYPE_BLOCK_STATUS
               ? deliver_extents (c) : error_of_chunk (w), 0);
    return 0;
  }
  return -1;
}

/* Receive into dst, up to n bytes.  Returns the count, 0 at end of
 * file, -1 with errno (EAGAIN: nothing more for now).
 */
static ssize_t
receive (struct wire *w, void *dst, size_t n)
{
  ssize_t r;

  do
    r = recv (w->fd, dst, n, MSG_DONTWAIT);
  while (r == -1 && errno == EINTR);
  return r;
}

/* Move awaited bytes from rbuf, or the socket, to w->dst.  Returns 1
 * when they are all in, 0 when the socket has no more for now, -1 when
 * the connection ended.  *drained is set once a receive came back
 * shorter than asked: the socket was empty then, and asking again
 * would only return EAGAIN.  Anything arriving later makes the socket
 * readable again (epoll is level-triggered), so stopping there loses
 * nothing and saves a system call per wake-up.
 */
static int
fill (struct wire *w, bool *drained)
{
  while (w->need > 0) {
    size_t n;
    ssize_t r;

    if (w->rpos < w->rlen) {
      n = w->rlen - w->rpos < w->need ? w->rlen - w->rpos : w->need;
      memcpy (w->dst, w->rbuf + w->rpos, n);
      w->rpos += n;
      w->dst += n;
      w->need -= n;
      continue;
    }
    if (*drained)
      return 0;
    if (w->need >= RBUF_SIZE) {      /* large data: no copy */
      r = receive (w, w->dst, w->need);
      if (r > 0) {
        *drained = (size_t) r < w->need;
        w->dst += r;
        w->need -= r;
        continue;
      }
    }
    else {
      w->rpos = w->rlen = 0;
      r = receive (w, w->rbuf, RBUF_SIZE);
      if (r > 0) {
        *drained = r < RBUF_SIZE;
        w->rlen = r;
        continue;
      }
    }
    if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    return -1;
  }
  return 1;
}

/* The socket is readable (or hung up): read and complete every reply
 * that is in (the driver only).
 */
void
wire_on_readable (struct conn *c)
{
  struct wire *w = c->wire;
  bool drained = false;

  if (atomic_load (&w->dead))
    return;
  for (;;) {
    int r = fill (w, &drained);
    if (r == 0)
      return;
    if (r == -1 || step (c) == -1)
      break;
  }
  fail_all (c);
}
