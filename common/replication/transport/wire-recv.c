/* SPDX-License-Identifier: BSD-3-Clause */
/* The wire's reader: replies from a leg, parsed and completed (see
 * wire.c for the wire as a whole).
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
 * Lock order: w->lock is a leaf; completions run without it.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"
#include "ioreq.h"
#include "wire.h"
#include "wire-int.h"
#include "cleanup.h"

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
 * While a sender is at work, the count may lag behind its sendmsg:
 * wait for it first.
 */
static int
start_reply_locked (struct wire *w, uint64_t handle)
{
  uint32_t i = lookup (w, handle);
  const struct entry *e;
  size_t size;

  if (i == NO_ENTRY)
    return -1;
  size = wire_size (&w->ents[i]);
  while (w->ents[i].sent < size && atomic_load (&w->sending))
    await_count (w);
  if (w->ents[i].sent < size)
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
  if (r == -1)
    note_socket_error (w, errno);
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
  wire_fail_all (c);
}

/* The connection was aborted, its TCP socket shut down for sending
 * only (conn_shutdown, or a send error): complete the replies already
 * in, then fail every other command (the driver only).
 */
void
wire_abort (struct conn *c)
{
  struct wire *w = c->wire;
  bool drained = false;

  if (atomic_load (&w->dead))
    return;
  while (fill (w, &drained) == 1 && step (c) == 0)
    ;
  wire_fail_all (c);
}
