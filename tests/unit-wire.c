/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the wire (common/replication/transport/wire.c): NBD's
 * transmission phase on a socket.
 *
 * One end of a socketpair is the client's wire, the test plays the
 * server at the other end with hand-made big-endian bytes.  Commands
 * go in through ioreq_submit_on; there is no poller: the test calls
 * wire_on_readable / wire_on_writable itself and drains the wake list.
 *
 * Each row of the table: the commands (the server checks each
 * request's magic, type, flags, offset, length and write payload), the
 * reply chunks, the errno expected for each command, and whether the
 * connection must die.  Read buffers are compared with what the chunks
 * put there, extents with what the chunk said.  Then a live connection
 * must carry a flush; a dead one must refuse a command with ENOTCONN
 * and have shut its socket down.  Every row is replayed with the reply
 * in one write, one byte at a time (replies up to 64 KiB) and in
 * random pieces.  Covered: simple and structured replies, chunks out
 * of order, holes, gaps (EIO), server errors on a live connection,
 * protocol errors and EOF (ENOTCONN for all in flight), batched
 * replies, 1 MiB reads (beyond the wire's receive buffer), and an
 * 8 MiB write queued with a flush behind it (the server's reads call
 * wire_on_writable while they wait; both must arrive whole, in order),
 * a reply that comes before its write's payload has been sent (a
 * protocol error), corked commands (held, then sent together), and
 * more corked flushes than a sendmsg's vectors (one header each).
 * Last, threads issue writes at once while the test serves and replies
 * to each request as it arrives: one sender at a time, the others'
 * commands in its next sendmsg; every request must arrive once, whole,
 * in its thread's order.  And a reply that overtakes its sender's
 * count (the test's sendmsg holds the sender after the real call until
 * the reply has been read) must wait for the count, not kill the
 * connection.  And a TCP connection's abort (tcp_abort).
 */

#include <config.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "internal.h"
#include "caps.h"
#include "conn.h"
#include "ioreq.h"
#include "wire.h"
#include "unit.h"
#include "cleanup.h"

#define KiB 1024u
#define MiB (1024 * KiB)
#define MAX_CMDS 3
#define MAX_CHUNKS 6
#define MAX_EXT 4
#define DONE 1                      /* NBD_REPLY_FLAG_DONE */
#define REQ_MAGIC 0x25609513
#define SIMPLE_MAGIC 0x67446698
#define CHUNK_MAGIC 0x668e33ef
#define MAX_IOV_TEST 100            /* more than the wire's MAX_IOV (64) */

enum kind { K_END, K_SIMPLE, K_DATA, K_HOLE, K_NONE, K_ERROR, K_ERROR_OFF,
            K_STATUS, K_OTHER, K_BAD_MAGIC, K_EOF };
enum handle { H_OK, H_BAD_GEN, H_BAD_INDEX };
enum mode { M_WHOLE, M_BYTES, M_RANDOM };

struct cmd_spec {
  enum leg_op op;
  uint16_t type;                /* the NBD command expected */
  uint64_t offset;
  uint32_t count;
  uint32_t flags;               /* ENGINE_FLAG_* */
  int err;                      /* the errno expected */
};

struct chunk_spec {
  enum kind kind;
  unsigned cmd;                 /* whose handle */
  uint16_t flags;
  int64_t off;                  /* data, hole: from the command's offset */
  uint32_t len;                 /* data, hole; K_OTHER: payload */
  uint32_t code;                /* NBD error; K_OTHER: chunk type */
  enum handle handle;
};

struct reply_case {
  const char *name;
  bool structured;
  unsigned nr_cmds;
  struct cmd_spec cmds[MAX_CMDS];
  struct chunk_spec chunks[MAX_CHUNKS];
  uint32_t ext[2 * MAX_EXT];    /* K_STATUS: (length, flags) pairs */
  unsigned nr_ext;
  bool dead;
};

#define RD(o, n, e) { OP_READ, NBD_CMD_READ, o, n, 0, e }
#define WR(o, n, f, e) { OP_WRITE, NBD_CMD_WRITE, o, n, f, e }
#define FL(e) { OP_FLUSH, NBD_CMD_FLUSH, 0, 0, 0, e }
#define ZR(o, n, f, e) { OP_ZERO, NBD_CMD_WRITE_ZEROES, o, n, f, e }
#define EX(o, n, f, e) { OP_EXTENTS, NBD_CMD_BLOCK_STATUS, o, n, f, e }
#define SIMPLE(c, code) { K_SIMPLE, c, 0, 0, 0, code, H_OK }
#define DATA(c, fl, o, n) { K_DATA, c, fl, o, n, 0, H_OK }
#define HOLE(c, fl, o, n) { K_HOLE, c, fl, o, n, 0, H_OK }
#define NONE(c) { K_NONE, c, DONE, 0, 0, 0, H_OK }
#define NONE_H(c, h) { K_NONE, c, DONE, 0, 0, 0, h }
#define ERR(c, fl, code) { K_ERROR, c, fl, 0, 0, code, H_OK }
#define ERR_OFF(c, fl, code, o) { K_ERROR_OFF, c, fl, o, 0, code, H_OK }
#define STATUS(c, fl) { K_STATUS, c, fl, 0, 0, 0, H_OK }
#define OTHER(c, fl, type, n) { K_OTHER, c, fl, 0, n, type, H_OK }
#define BAD_MAGIC { K_BAD_MAGIC, 0, 0, 0, 0, 0, H_OK }
#define EOF_ { K_EOF, 0, 0, 0, 0, 0, H_OK }
#define ALIVE .dead = false
#define DEAD .dead = true

static const struct reply_case cases[] = {
  /* Simple replies (structured replies not negotiated). */
  { "write, simple OK", false, 1, { WR (8192, 4096, ENGINE_FLAG_FUA, 0) },
    { SIMPLE (0, 0) }, ALIVE },
  { "write, simple error 28", false, 1, { WR (0, 512, 0, ENOSPC) },
    { SIMPLE (0, 28) }, ALIVE },
  { "flush, simple OK", false, 1, { FL (0) }, { SIMPLE (0, 0) }, ALIVE },
  { "zero, simple error 1", false, 1, { ZR (4096, 1 * MiB, 0, EPERM) },
    { SIMPLE (0, 1) }, ALIVE },
  { "write, unknown error code 200", false, 1, { WR (0, 100, 0, EIO) },
    { SIMPLE (0, 200) }, ALIVE },
  { "read, simple reply", false, 1, { RD (1234567, 5000, 0) },
    { SIMPLE (0, 0) }, ALIVE },
  { "read, simple error 5 (no data)", false, 1, { RD (0, 4096, EIO) },
    { SIMPLE (0, 5) }, ALIVE },
  { "read 1 MiB, simple reply", false, 1, { RD (3 * MiB + 7, MiB, 0) },
    { SIMPLE (0, 0) }, ALIVE },
  { "chunk on a simple connection", false, 1, { FL (ENOTCONN) },
    { NONE (0) }, DEAD },
  { "bad magic", false, 2, { FL (ENOTCONN), RD (0, 512, ENOTCONN) },
    { BAD_MAGIC }, DEAD },

  /* Structured replies. */
  { "read, two chunks reversed, NONE", true, 1, { RD (65636, 8192, 0) },
    { DATA (0, 0, 4096, 4096), DATA (0, 0, 0, 4096), NONE (0) }, ALIVE },
  { "read, data then hole with DONE", true, 1, { RD (512, 8192, 0) },
    { DATA (0, 0, 0, 3000), HOLE (0, DONE, 3000, 5192) }, ALIVE },
  { "read, hole, data, hole, NONE", true, 1, { RD (0, 9000, 0) },
    { HOLE (0, 0, 0, 1000), DATA (0, 0, 1000, 7000), HOLE (0, 0, 8000, 1000),
      NONE (0) }, ALIVE },
  { "read, gap", true, 1, { RD (0, 8192, EIO) },
    { DATA (0, 0, 0, 1000), DATA (0, 0, 2000, 6192), NONE (0) }, ALIVE },
  { "read, no chunk but NONE", true, 1, { RD (0, 8192, EIO) },
    { NONE (0) }, ALIVE },
  { "read, error chunk, NONE; alive", true, 1, { RD (0, 4096, EIO) },
    { ERR (0, 0, 5), NONE (0) }, ALIVE },
  { "read, data, ERROR_OFFSET 28", true, 1, { RD (0, 4096, ENOSPC) },
    { DATA (0, 0, 0, 4096), ERR_OFF (0, DONE, 28, 1024) }, ALIVE },
  { "read, error with no known code", true, 1, { RD (0, 512, EIO) },
    { ERR (0, DONE, 0) }, ALIVE },
  { "write, NONE", true, 1, { WR (1 * MiB, 65536, 0, 0) }, { NONE (0) },
    ALIVE },
  { "write fua, error chunk 22 DONE", true, 1,
    { WR (0, 512, ENGINE_FLAG_FUA, EINVAL) }, { ERR (0, DONE, 22) }, ALIVE },
  { "zero fua may-trim, NONE", true, 1,
    { ZR (0, 8 * MiB, ENGINE_FLAG_FUA | ENGINE_FLAG_MAY_TRIM, 0) },
    { NONE (0) }, ALIVE },
  { "block status, NONE", true, 1, { EX (1 * MiB, 3 * MiB, 0, 0) },
    { STATUS (0, 0), NONE (0) }, { MiB, 0, MiB, 3, 65536, 1, 4096, 7 }, 4,
    ALIVE },
  { "block status req-one, DONE", true, 1,
    { EX (4096, 65536, ENGINE_FLAG_REQ_ONE, 0) },
    { STATUS (0, DONE) }, { 65536, 2 }, 1, ALIVE },
  { "read 1 MiB, one chunk", true, 1, { RD (5, MiB, 0) },
    { DATA (0, DONE, 0, MiB) }, ALIVE },
  { "read 1 MiB, halves reversed", true, 1, { RD (MiB, MiB, 0) },
    { DATA (0, 0, 512 * KiB, 512 * KiB), DATA (0, 0, 0, 512 * KiB),
      NONE (0) }, ALIVE },
  { "8 MiB write, flush queued behind", true, 2,
    { WR (12345, 8 * MiB, 0, 0), FL (0) }, { SIMPLE (1, 0), NONE (0) },
    ALIVE },
  { "batched: three replies", true, 3,
    { WR (0, 4096, 0, 0), RD (4096, 4096, 0), FL (0) },
    { NONE (2), DATA (1, DONE, 0, 4096), SIMPLE (0, 0) }, ALIVE },
  { "batched: interleaved reads", true, 2,
    { RD (0, 2048, 0), RD (8192, 2048, 0) },
    { DATA (0, 0, 1024, 1024), DATA (1, 0, 0, 2048), DATA (0, 0, 0, 1024),
      NONE (1), NONE (0) }, ALIVE },

  /* Protocol errors: the connection dies. */
  { "unknown handle (generation)", true, 2,
    { RD (0, 4096, ENOTCONN), FL (ENOTCONN) },
    { NONE_H (0, H_BAD_GEN) }, DEAD },
  { "unknown handle (index)", true, 1, { FL (ENOTCONN) },
    { NONE_H (0, H_BAD_INDEX) }, DEAD },
  { "batched: reply then unknown handle", true, 2,
    { WR (0, 512, 0, 0), FL (ENOTCONN) },
    { NONE (0), NONE_H (1, H_BAD_GEN), NONE (1) }, DEAD },
  { "data past the read", true, 1, { RD (4096, 4096, ENOTCONN) },
    { DATA (0, 0, 4000, 200) }, DEAD },
  { "data before the read", true, 1, { RD (4096, 4096, ENOTCONN) },
    { DATA (0, DONE, -1, 4096) }, DEAD },
  { "hole past the read", true, 1, { RD (0, 4096, ENOTCONN) },
    { HOLE (0, DONE, 4095, 2) }, DEAD },
  { "read, simple OK on a structured connection", true, 1,
    { RD (0, 512, ENOTCONN) }, { SIMPLE (0, 0) }, DEAD },
  { "data chunk for a write", true, 1, { WR (0, 512, 0, ENOTCONN) },
    { DATA (0, DONE, 0, 512) }, DEAD },
  { "status chunk for a read", true, 1, { RD (0, 512, ENOTCONN) },
    { STATUS (0, DONE) }, { 512, 0 }, 1, DEAD },
  { "NONE without DONE", true, 1, { FL (ENOTCONN) },
    { { K_NONE, 0, 0, 0, 0, 0, H_OK } }, DEAD },
  { "OFFSET_DATA with no data", true, 1, { RD (0, 512, ENOTCONN) },
    { OTHER (0, DONE, 1, 8) }, DEAD },
  { "unknown chunk type 3", true, 1, { FL (ENOTCONN) },
    { OTHER (0, DONE, 3, 4) }, DEAD },
  { "EOF, two in flight", true, 2, { RD (0, 4096, ENOTCONN), FL (ENOTCONN) },
    { EOF_ }, DEAD },
  { "EOF after a chunk without DONE", true, 1, { RD (0, 8192, ENOTCONN) },
    { DATA (0, 0, 0, 4096), EOF_ }, DEAD },
  { "EOF, simple, one answered", false, 2,
    { FL (0), WR (0, 4096, 0, ENOTCONN) }, { SIMPLE (0, 0), EOF_ }, DEAD },
};

static struct volume v;         /* large: static */
static int sv = -1;             /* the server's end */
static struct wire *w;
static struct conn c;           /* the client's end */
static uint64_t ext_got[MAX_EXT + 1][3];   /* offset, length, type */
static size_t nr_ext_got;

/* sendmsg, as the wire calls it: the real one, after which a thread
 * other than the test's own may be held (hold_sender) until released.
 */
static pthread_t test_thread;
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
enum hold { HOLD_OFF, HOLD_ARMED, HOLD_HELD };
static enum hold hold;

ssize_t
sendmsg (int fd, const struct msghdr *msg, int flags)
{
  static ssize_t (*real) (int, const struct msghdr *, int);
  ssize_t r;
  int e;

  if (real == NULL)
    real = (ssize_t (*) (int, const struct msghdr *, int))
      dlsym (RTLD_NEXT, "sendmsg");
  r = real (fd, msg, flags);
  e = errno;
  if (!pthread_equal (pthread_self (), test_thread)) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&hold_lock);
    if (hold == HOLD_ARMED) {
      hold = HOLD_HELD;
      pthread_cond_broadcast (&hold_cond);
      while (hold == HOLD_HELD)
        pthread_cond_wait (&hold_cond, &hold_lock);
    }
  }
  errno = e;
  return r;
}

/* Set the hold to h and tell whoever waits for it. */
static void
set_hold (enum hold h)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&hold_lock);
  hold = h;
  pthread_cond_broadcast (&hold_cond);
}

/* Wait until the hold is h. */
static void
wait_hold (enum hold h)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&hold_lock);
  while (hold != h)
    pthread_cond_wait (&hold_cond, &hold_lock);
}

/* A growing byte string (a reply being built). */
struct bytes {
  unsigned char *p;
  size_t len, cap;
};

/* Fill p with the server's bytes at offset off (payloads, data). */
static void
pat_fill (unsigned char *p, uint64_t off, size_t n)
{
  size_t i;

  for (i = 0; i < n; ++i, ++off)
    p[i] = (unsigned char) (off ^ (off >> 8) ^ (off >> 16) ^ 0x5a);
}

/* Make room for n more bytes at the end of b (zeroed); returns them. */
static unsigned char *
b_grow (struct bytes *b, size_t n)
{
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2;
    b->p = realloc (b->p, b->cap);
    if (b->p == NULL)
      abort ();
  }
  b->len += n;
  return memset (b->p + b->len - n, 0, n);
}

/* Append x as an n-byte big-endian number. */
static void
b_be (struct bytes *b, uint64_t x, size_t n)
{
  unsigned char *p = b_grow (b, n);

  while (n--)
    p[n] = x & 0xff, x >>= 8;
}

/* Read an n-byte big-endian number. */
static uint64_t
get_be (const unsigned char *p, size_t n)
{
  uint64_t x = 0;

  while (n--)
    x = (x << 8) | *p++;
  return x;
}

/* Record an extent (the request's extent function). */
static int
record_extent (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  (void) opaque;
  if (nr_ext_got <= MAX_EXT) {
    ext_got[nr_ext_got][0] = offset;
    ext_got[nr_ext_got][1] = length;
    ext_got[nr_ext_got++][2] = type;
  }
  return 0;
}

/* Let the wire read what has arrived and wake the issuers. */
static void
pump (void)
{
  wire_on_readable (&c);
  ioreq_wake_deferred (&c);
}

/* The server reads exactly n bytes (the wire is told the socket is
 * writable while it waits).  Returns false on a timeout or EOF.
 */
static bool
srv_read (void *buf, size_t n)
{
  size_t got = 0;

  while (got < n) {
    ssize_t r = recv (sv, (char *) buf + got, n - got, MSG_DONTWAIT);
    struct pollfd p = { .fd = sv, .events = POLLIN };

    if (r > 0)
      got += r;
    else if (r == 0 || (errno != EAGAIN && errno != EINTR))
      return false;
    else {
      wire_on_writable (&c);    /* a queued request may be waiting */
      if (poll (&p, 1, 5000) == 0)
        return false;
    }
  }
  return true;
}

/* A fresh socketpair, wire and connection (no poller), taken for TCP
 * if tcp; the test serves the other end (sv).
 */
static void
open_conn_as (bool structured, bool tcp)
{
  int fds[2];

  if (socketpair (AF_UNIX, SOCK_STREAM, 0, fds) == -1 ||
      fcntl (fds[1], F_SETFL, O_NONBLOCK) == -1 ||
      (w = wire_new (fds[0], structured, tcp)) == NULL)
    abort ();
  sv = fds[1];
  c = (struct conn) { .leg = &v.legs[0], .wire = w, .fd = fds[0],
                      .tcp = tcp };
}

/* A fresh connection on a Unix socket (see open_conn_as). */
static void
open_conn (bool structured)
{
  open_conn_as (structured, false);
}

/* Free the wire and close both ends (the server's may be closed). */
static void
close_conn (void)
{
  wire_free (w);
  close (c.fd);
  if (sv != -1)
    close (sv);
  sv = -1;
}

/* Check that commands r[0..n) completed without error, and retire
 * them.
 */
static void
check_done (struct ioreq *r, unsigned n, const char *what)
{
  unsigned i;

  for (i = 0; i < n; ++i) {
    CHECKF ((atomic_load (&r[i].done) & 1) && ioreq_leg_error (&r[i], 0) == 0,
            "%s: command %u not done", what, i);
    if (atomic_load (&r[i].done) & 1)
      ioreq_wait (&r[i]);
  }
}

/* Issue one command on the connection. */
static void
issue (struct ioreq *r, const struct cmd_spec *cs, void *buf)
{
  struct leg_cmd cmd = {
    .op = cs->op, .buf = buf, .count = cs->count, .offset = cs->offset,
    .flags = cs->flags, .fn = record_extent,
  };

  ioreq_init (r, &v);
  ioreq_submit_on (r, &v.legs[0], &c, &cmd);
}

/* The server reads one request and checks it; returns its handle. */
static uint64_t
expect_request (const struct cmd_spec *cs, const char *what)
{
  uint16_t flags = 0;
  unsigned char h[28];

  if ((cs->flags & ENGINE_FLAG_FUA) &&
      (cs->op == OP_WRITE || cs->op == OP_ZERO))
    flags |= 1;                                 /* FUA */
  if (cs->op == OP_ZERO && !(cs->flags & ENGINE_FLAG_MAY_TRIM))
    flags |= 2;                                 /* NO_HOLE */
  if (cs->op == OP_EXTENTS && (cs->flags & ENGINE_FLAG_REQ_ONE))
    flags |= 8;                                 /* REQ_ONE */
  if (!srv_read (h, sizeof h)) {
    CHECKF (false, "%s: no request", what);
    return 0;
  }
  CHECKF (get_be (h, 4) == REQ_MAGIC, "%s: request magic", what);
  CHECKF (get_be (h + 4, 2) == flags, "%s: flags %#x, expected %#x", what,
          (unsigned) get_be (h + 4, 2), flags);
  CHECKF (get_be (h + 6, 2) == cs->type, "%s: type %u, expected %u",
          what, (unsigned) get_be (h + 6, 2), cs->type);
  CHECKF (get_be (h + 16, 8) == cs->offset, "%s: offset", what);
  CHECKF (get_be (h + 24, 4) == cs->count, "%s: length", what);
  if (cs->op == OP_WRITE) {
    unsigned char *p = malloc (2 * (size_t) cs->count);

    if (p == NULL)
      abort ();
    pat_fill (p + cs->count, cs->offset, cs->count);
    CHECKF (srv_read (p, cs->count) &&
            memcmp (p, p + cs->count, cs->count) == 0,
            "%s: write payload", what);
    free (p);
  }
  return get_be (h + 8, 8);
}

/* Append a simple reply. */
static void
simple_reply (struct bytes *b, uint32_t err, uint64_t handle)
{
  b_be (b, SIMPLE_MAGIC, 4);
  b_be (b, err, 4);
  b_be (b, handle, 8);
}

/* Append a structured chunk header. */
static void
chunk_header (struct bytes *b, uint16_t flags, uint16_t type,
              uint64_t handle, uint32_t len)
{
  b_be (b, CHUNK_MAGIC, 4);
  b_be (b, flags, 2);
  b_be (b, type, 2);
  b_be (b, handle, 8);
  b_be (b, len, 4);
}

/* Build a row's reply bytes; tells whether the server then hangs up. */
static bool
build_reply (const struct reply_case *rc, const uint64_t *handles,
             struct bytes *b)
{
  const struct chunk_spec *k;
  size_t i;

  for (k = rc->chunks; k < rc->chunks + MAX_CHUNKS && k->kind != K_END; ++k) {
    const struct cmd_spec *cs = &rc->cmds[k->cmd];
    uint64_t h = handles[k->cmd], at = cs->offset + k->off;

    if (k->handle == H_BAD_GEN)
      h ^= 1ull << 32;
    else if (k->handle == H_BAD_INDEX)
      h = (h & ~0xffffffffull) | 12345;
    switch (k->kind) {
    case K_SIMPLE:
      simple_reply (b, k->code, h);
      if (k->code == 0 && cs->op == OP_READ)
        pat_fill (b_grow (b, cs->count), cs->offset, cs->count);
      break;
    case K_DATA:
      chunk_header (b, k->flags, 1, h, 8 + k->len);
      b_be (b, at, 8);
      pat_fill (b_grow (b, k->len), at, k->len);
      break;
    case K_HOLE:
      chunk_header (b, k->flags, 2, h, 12);
      b_be (b, at, 8);
      b_be (b, k->len, 4);
      break;
    case K_NONE:
      chunk_header (b, k->flags, 0, h, 0);
      break;
    case K_ERROR:
    case K_ERROR_OFF:                 /* error, message length, message */
      chunk_header (b, k->flags, k->kind == K_ERROR ? 32769 : 32770, h,
                    k->kind == K_ERROR ? 10 : 18);
      b_be (b, k->code, 4);
      b_be (b, 4, 2);
      memcpy (b_grow (b, 4), "oops", 4);
      if (k->kind == K_ERROR_OFF)
        b_be (b, at, 8);
      break;
    case K_STATUS:
      chunk_header (b, k->flags, 5, h, 4 + 8 * rc->nr_ext);
      b_be (b, 1, 4);                         /* the context id */
      for (i = 0; i < 2 * rc->nr_ext; ++i)
        b_be (b, rc->ext[i], 4);
      break;
    case K_OTHER:
      chunk_header (b, k->flags, k->code, h, k->len);
      b_grow (b, k->len);
      break;
    case K_BAD_MAGIC:
      b_be (b, 0xdeadbeef, 4);
      b_grow (b, 12);
      break;
    case K_EOF:
      return true;
    case K_END:
      break;
    }
  }
  return false;
}

/* The server sends the bytes in pieces the mode says, the wire reads
 * after each one; stops if the wire dies.
 */
static void
deliver (const struct bytes *b, enum mode m, uint64_t seed)
{
  size_t pos = 0, max = b->len > 64 * KiB ? 150 * KiB : 40;

  while (pos < b->len && !wire_is_dead (w)) {
    size_t n = b->len - pos;
    ssize_t r;

    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    if (m == M_BYTES)
      n = 1;
    else if (m == M_RANDOM && n > 1 + (seed >> 33) % max)
      n = 1 + (seed >> 33) % max;
    r = send (sv, b->p + pos, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0)
      pos += r;
    else if (errno != EAGAIN && errno != EINTR)
      break;
    pump ();
  }
  pump ();
}

/* Check a finished read's buffer against what the row's chunks for
 * command ci put there (0xaa where nothing was written).
 */
static void
check_read (const struct reply_case *rc, unsigned ci,
            const unsigned char *buf, const char *what)
{
  const struct cmd_spec *cs = &rc->cmds[ci];
  const struct chunk_spec *k;
  unsigned char *m = malloc (cs->count);

  if (m == NULL)
    abort ();
  memset (m, 0xaa, cs->count);
  for (k = rc->chunks; k < rc->chunks + MAX_CHUNKS && k->kind != K_END; ++k) {
    if (k->cmd != ci || k->off < 0 || k->off + k->len > cs->count)
      continue;
    if (k->kind == K_SIMPLE && k->code == 0)
      pat_fill (m, cs->offset, cs->count);
    else if (k->kind == K_DATA)
      pat_fill (m + k->off, cs->offset + k->off, k->len);
    else if (k->kind == K_HOLE)
      memset (m + k->off, 0, k->len);
  }
  CHECKF (memcmp (buf, m, cs->count) == 0, "%s: command %u: wrong data",
          what, ci);
  free (m);
}

/* Check the extents a row's BLOCK_STATUS chunk sent to command cs. */
static void
check_extents (const struct reply_case *rc, const struct cmd_spec *cs,
               const char *what)
{
  uint64_t off = cs->offset;
  size_t i;

  CHECKF (nr_ext_got == rc->nr_ext, "%s: %zu extents, expected %u", what,
          nr_ext_got, rc->nr_ext);
  for (i = 0; i < rc->nr_ext && i < nr_ext_got; off += rc->ext[2 * i++])
    CHECKF (ext_got[i][0] == off && ext_got[i][1] == rc->ext[2 * i] &&
            ext_got[i][2] == (rc->ext[2 * i + 1] & 3),
            "%s: extent %zu is (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")",
            what, i, ext_got[i][0], ext_got[i][1], ext_got[i][2]);
}

/* After a row: a live connection carries a flush; a dead one refuses a
 * command with ENOTCONN and has shut its socket down.
 */
static void
check_after (bool dead, const char *what)
{
  static const struct cmd_spec flush = FL (0);
  struct bytes b = { 0 };
  struct ioreq r;
  unsigned char byte;

  CHECKF (wire_is_dead (w) == dead, "%s: dead is %d", what, !dead);
  issue (&r, &flush, NULL);
  if (dead)
    CHECKF (sv == -1 || recv (sv, &byte, 1, MSG_DONTWAIT) == 0,
            "%s: the dead wire did not shut its socket down", what);
  else {
    simple_reply (&b, 0, expect_request (&flush, what));
    deliver (&b, M_WHOLE, 0);
    free (b.p);
  }
  CHECKF ((atomic_load (&r.done) & 1) &&
          ioreq_leg_error (&r, 0) == (dead ? ENOTCONN : 0),
          "%s: the command after the row: error %d", what,
          ioreq_leg_error (&r, 0));
  if (atomic_load (&r.done) & 1)
    ioreq_wait (&r);
  CHECKF (c.inflight == 0 && v.legs[0].inflight == 0,
          "%s: commands still counted in flight", what);
}

/* Run one row with its reply delivered in one way. */
static void
run_case (const struct reply_case *rc, enum mode m, uint64_t seed)
{
  static const char *const mode_names[] = { "whole", "bytes", "random" };
  struct ioreq r[MAX_CMDS];
  unsigned char *bufs[MAX_CMDS] = { NULL };
  uint64_t handles[MAX_CMDS];
  struct bytes b = { 0 };
  char what[128];
  bool queued = false, eof;
  unsigned i;

  snprintf (what, sizeof what, "%s [%s, seed %" PRIu64 "]", rc->name,
            mode_names[m], seed);
  open_conn (rc->structured);
  nr_ext_got = 0;
  for (i = 0; i < rc->nr_cmds; ++i) {
    const struct cmd_spec *cs = &rc->cmds[i];

    if (cs->op == OP_READ || cs->op == OP_WRITE) {
      if ((bufs[i] = malloc (cs->count)) == NULL)
        abort ();
      memset (bufs[i], 0xaa, cs->count);
      if (cs->op == OP_WRITE)
        pat_fill (bufs[i], cs->offset, cs->count);
    }
    issue (&r[i], cs, bufs[i]);
    queued |= cs->op == OP_WRITE && cs->count >= 4 * MiB;
  }
  /* A large write does not fit the socket: the wire queues it. */
  CHECKF (wire_wants_write (w) == queued, "%s: wants to write", what);
  for (i = 0; i < rc->nr_cmds; ++i) {
    handles[i] = expect_request (&rc->cmds[i], what);
    CHECKF (i == 0 || handles[i] != handles[i - 1], "%s: same handle", what);
  }
  CHECKF (!wire_wants_write (w), "%s: still wants to write", what);

  for (i = 0; i < rc->nr_cmds; ++i)
    CHECKF (!(atomic_load (&r[i].done) & 1), "%s: command %u done early",
            what, i);
  eof = build_reply (rc, handles, &b);
  deliver (&b, m, seed);
  if (eof) {                    /* the server hangs up */
    close (sv);
    sv = -1;
    pump ();
  }

  for (i = 0; i < rc->nr_cmds; ++i) {
    const struct cmd_spec *cs = &rc->cmds[i];

    if (!(atomic_load (&r[i].done) & 1)) {
      CHECKF (false, "%s: command %u not done", what, i);
      continue;
    }
    CHECKF (ioreq_leg_error (&r[i], 0) == cs->err,
            "%s: command %u: error %d, expected %d", what, i,
            ioreq_leg_error (&r[i], 0), cs->err);
    if (cs->op == OP_READ && cs->err != ENOTCONN)
      check_read (rc, i, bufs[i], what);
    if (cs->op == OP_EXTENTS && cs->err == 0)
      check_extents (rc, cs, what);
    ioreq_wait (&r[i]);
  }
  check_after (rc->dead, what);
  close_conn ();
  for (i = 0; i < rc->nr_cmds; ++i)
    free (bufs[i]);
  free (b.p);
}

/* A reply to a write whose payload has not all been sent is a
 * protocol error: the write stays queued until then, and nothing may
 * be sent from its buffer once it has completed.
 */
static void
reply_before_payload (void)
{
  static const struct cmd_spec wr = WR (0, 8 * MiB, 0, ENOTCONN);
  static const struct cmd_spec fl = FL (ENOTCONN);
  const char *what = "reply before the payload";
  unsigned char h[28], *buf = malloc (wr.count);
  struct bytes b = { 0 };
  struct ioreq r[2];

  if (buf == NULL)
    abort ();
  open_conn (true);
  issue (&r[0], &wr, buf);
  issue (&r[1], &fl, NULL);
  CHECKF (wire_wants_write (w), "%s: the write is queued", what);
  CHECKF (srv_read (h, sizeof h), "%s: no request header", what);
  simple_reply (&b, 5, get_be (h + 8, 8));
  deliver (&b, M_WHOLE, 0);
  CHECKF (wire_is_dead (w), "%s: the connection lives", what);
  CHECKF ((atomic_load (&r[0].done) & 1) && (atomic_load (&r[1].done) & 1) &&
          ioreq_leg_error (&r[0], 0) == ENOTCONN &&
          ioreq_leg_error (&r[1], 0) == ENOTCONN,
          "%s: commands not failed with ENOTCONN", what);
  CHECKF (!wire_wants_write (w), "%s: still wants to write", what);
  ioreq_wait (&r[0]);
  ioreq_wait (&r[1]);
  close_conn ();
  free (buf);
  free (b.p);
}

/* A wire on TCP (a socketpair plays the socket; tcp is the wire's
 * flag) aborted as conn_shutdown does it: shut down for sending only,
 * then wire_abort in the driver.  The reply already in completes, the
 * other command fails with ENOTCONN, the server sees our end of file,
 * and what it sends afterwards is still received (the socket is not
 * shut down for reading: drain.c reads it to the server's FIN).  Then a
 * server that closes with our request unread: the receive reports a
 * reset, which the wire remembers (wire_saw_error).
 */
static void
tcp_abort (void)
{
  static const struct cmd_spec fl = FL (0);
  const char *what = "TCP abort";
  unsigned char h[2][28], byte = 'x';
  struct bytes b = { 0 };
  struct ioreq r[2];

  open_conn_as (true, true);
  issue (&r[0], &fl, NULL);
  issue (&r[1], &fl, NULL);
  CHECKF (srv_read (h[0], sizeof h[0]) && srv_read (h[1], sizeof h[1]),
          "%s: no requests", what);
  simple_reply (&b, 0, get_be (h[0] + 8, 8));
  CHECKF (send (sv, b.p, b.len, MSG_NOSIGNAL) == (ssize_t) b.len,
          "%s: reply not sent", what);
  conn_shutdown (&c);
  CHECKF (!wire_is_dead (w), "%s: dead before the driver aborted it", what);
  wire_abort (&c);
  ioreq_wake_deferred (&c);
  CHECKF (wire_is_dead (w), "%s: the connection lives", what);
  CHECKF ((atomic_load (&r[0].done) & 1) && ioreq_leg_error (&r[0], 0) == 0,
          "%s: the answered command did not complete", what);
  CHECKF ((atomic_load (&r[1].done) & 1) &&
          ioreq_leg_error (&r[1], 0) == ENOTCONN,
          "%s: the other command did not fail with ENOTCONN", what);
  CHECKF (recv (sv, h[0], 1, MSG_DONTWAIT) == 0,
          "%s: the server does not see our end of file", what);
  CHECKF (send (sv, &byte, 1, MSG_NOSIGNAL) == 1 &&
          recv (c.fd, &byte, 1, MSG_DONTWAIT) == 1 && byte == 'x',
          "%s: a late byte from the server is not received", what);
  CHECKF (!wire_saw_error (w), "%s: an error was seen", what);
  ioreq_wait (&r[0]);
  ioreq_wait (&r[1]);
  close_conn ();

  open_conn_as (true, true);
  issue (&r[0], &fl, NULL);
  close (sv);                   /* our request unread: a reset */
  sv = -1;
  pump ();
  CHECKF (wire_is_dead (w) && wire_saw_error (w),
          "%s: a reset is not remembered", what);
  ioreq_wait (&r[0]);
  close_conn ();
  free (b.p);
}

/* Corked commands stay queued until wire_uncork, which sends them in
 * order; the cork holds the leg's issue window meanwhile.
 */
static void
corked_batch (void)
{
  static const struct cmd_spec cmds[3] = {
    WR (4096, 8192, ENGINE_FLAG_FUA, 0), RD (0, 4096, 0), FL (0),
  };
  const char *what = "corked batch";
  unsigned char wbuf[8192], rbuf[4096], byte;
  struct bytes b = { 0 };
  struct wire_cork cork;
  struct ioreq r[3];
  unsigned i;

  open_conn (false);
  pat_fill (wbuf, cmds[0].offset, sizeof wbuf);
  wire_cork (&cork);
  issue (&r[0], &cmds[0], wbuf);
  issue (&r[1], &cmds[1], rbuf);
  issue (&r[2], &cmds[2], NULL);
  CHECKF (recv (sv, &byte, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN,
          "%s: a corked command was sent", what);
  CHECKF (!wire_wants_write (w), "%s: EPOLLOUT while corked", what);
  CHECKF (c.inflight == 3 && v.legs[0].users == 1,
          "%s: %u in flight, %u users: expected 3 and the cork", what,
          (unsigned) c.inflight, (unsigned) v.legs[0].users);
  wire_uncork (&cork);
  CHECKF (v.legs[0].users == 0, "%s: the cork still holds the leg", what);
  for (i = 0; i < 3; ++i) {
    simple_reply (&b, 0, expect_request (&cmds[i], what));
    if (cmds[i].op == OP_READ)
      pat_fill (b_grow (&b, cmds[i].count), cmds[i].offset, cmds[i].count);
  }
  deliver (&b, M_WHOLE, 0);
  check_read (&(struct reply_case) { .cmds = { cmds[0], cmds[1] },
                                     .chunks = { SIMPLE (1, 0) } },
              1, rbuf, what);
  check_done (r, 3, what);
  check_after (false, what);
  close_conn ();
  free (b.p);
}

/* More commands without payload than a sendmsg's vectors hold, corked
 * and then sent together: each a header of its own, in order.
 */
static void
corked_headers (void)
{
  static const struct cmd_spec fl = FL (0);
  const char *what = "corked headers";
  struct bytes b = { 0 };
  struct wire_cork cork;
  struct ioreq r[MAX_IOV_TEST];
  unsigned i;

  open_conn (false);
  wire_cork (&cork);
  for (i = 0; i < MAX_IOV_TEST; ++i)
    issue (&r[i], &fl, NULL);
  wire_uncork (&cork);
  for (i = 0; i < MAX_IOV_TEST; ++i)
    simple_reply (&b, 0, expect_request (&fl, what));
  deliver (&b, M_WHOLE, 0);
  check_done (r, MAX_IOV_TEST, what);
  check_after (false, what);
  close_conn ();
  free (b.p);
}

#define ISSUERS 4
#define PER_ISSUER 200
#define CONC_SIZE 4096

static struct ioreq conc_r[ISSUERS][PER_ISSUER];
static unsigned char conc_buf[ISSUERS][PER_ISSUER][CONC_SIZE];

/* An issuer thread: its writes, at offsets that name it and their
 * rank, without waiting.
 */
static void *
conc_issuer (void *arg)
{
  unsigned t = (uintptr_t) arg, k;

  for (k = 0; k < PER_ISSUER; ++k) {
    uint64_t off = ((uint64_t) t * PER_ISSUER + k) * CONC_SIZE;
    struct cmd_spec cs = WR (off, CONC_SIZE, 0, 0);

    pat_fill (conc_buf[t][k], off, CONC_SIZE);
    issue (&conc_r[t][k], &cs, conc_buf[t][k]);
  }
  return NULL;
}

/* Serve the issuers' writes as they come: check each, reply at once
 * and let the wire read the reply.
 */
static void
conc_serve (const char *what)
{
  unsigned next[ISSUERS] = { 0 }, n;
  unsigned char h[28], *p = malloc (2 * CONC_SIZE);
  struct bytes b = { 0 };

  if (p == NULL)
    abort ();
  for (n = 0; n < ISSUERS * PER_ISSUER; ++n) {
    uint64_t off, t, k;

    if (!srv_read (h, sizeof h) ||
        get_be (h, 4) != REQ_MAGIC || get_be (h + 6, 2) != NBD_CMD_WRITE ||
        get_be (h + 24, 4) != CONC_SIZE) {
      CHECKF (false, "%s: request %u is not a 4 KiB write", what, n);
      break;
    }
    off = get_be (h + 16, 8);
    t = off / CONC_SIZE / PER_ISSUER;
    k = off / CONC_SIZE % PER_ISSUER;
    CHECKF (off % CONC_SIZE == 0 && t < ISSUERS && k == next[t],
            "%s: offset %" PRIu64 " out of its thread's order", what, off);
    if (t < ISSUERS)
      next[t] = k + 1;
    pat_fill (p + CONC_SIZE, off, CONC_SIZE);
    CHECKF (srv_read (p, CONC_SIZE) &&
            memcmp (p, p + CONC_SIZE, CONC_SIZE) == 0,
            "%s: payload of offset %" PRIu64, what, off);
    b.len = 0;
    simple_reply (&b, 0, get_be (h + 8, 8));
    deliver (&b, M_WHOLE, 0);
  }
  free (p);
  free (b.p);
}

/* Threads issue at once on one connection (see the top). */
static void
concurrent_issuers (void)
{
  const char *what = "concurrent issuers";
  pthread_t th[ISSUERS];
  unsigned t, k, done = 0;

  open_conn (false);
  for (t = 0; t < ISSUERS; ++t)
    if (pthread_create (&th[t], NULL, conc_issuer, (void *) (uintptr_t) t))
      abort ();
  conc_serve (what);
  for (t = 0; t < ISSUERS; ++t)
    pthread_join (th[t], NULL);
  for (t = 0; t < ISSUERS; ++t)
    for (k = 0; k < PER_ISSUER; ++k)
      if ((atomic_load (&conc_r[t][k].done) & 1) &&
          ioreq_leg_error (&conc_r[t][k], 0) == 0) {
        ioreq_wait (&conc_r[t][k]);
        done++;
      }
  CHECKF (done == ISSUERS * PER_ISSUER, "%s: %u of %u done", what, done,
          ISSUERS * PER_ISSUER);
  check_after (false, what);
  close_conn ();
}

static const struct cmd_spec held_wr = WR (65536, 4096, 0, 0);
static struct ioreq held_r;

/* A thread that issues one write; its sender is held after sendmsg. */
static void *
held_issuer (void *buf)
{
  issue (&held_r, &held_wr, buf);
  return NULL;
}

/* Release the held sender after a while: by then the test's reader is
 * waiting for its count (or has wrongly judged the reply without it).
 */
static void *
release_later (void *unused __attribute__ ((unused)))
{
  usleep (100 * 1000);
  set_hold (HOLD_OFF);
  return NULL;
}

/* A reply read while its command's sender has not yet counted the
 * bytes sendmsg took: the reader waits for the count.
 */
static void
reply_overtakes_count (void)
{
  const char *what = "reply overtakes the count";
  unsigned char buf[4096];
  struct bytes b = { 0 };
  pthread_t th, rel;

  open_conn (false);
  pat_fill (buf, held_wr.offset, sizeof buf);
  set_hold (HOLD_ARMED);
  if (pthread_create (&th, NULL, held_issuer, buf))
    abort ();
  wait_hold (HOLD_HELD);
  simple_reply (&b, 0, expect_request (&held_wr, what));
  if (pthread_create (&rel, NULL, release_later, NULL))
    abort ();
  deliver (&b, M_WHOLE, 0);
  pthread_join (rel, NULL);
  pthread_join (th, NULL);
  CHECKF (!wire_is_dead (w) && (atomic_load (&held_r.done) & 1) &&
          ioreq_leg_error (&held_r, 0) == 0,
          "%s: the write did not complete alive and well", what);
  if (atomic_load (&held_r.done) & 1)
    ioreq_wait (&held_r);
  check_after (false, what);
  close_conn ();
  free (b.p);
}

int
main (void)
{
  size_t i, k;
  uint64_t seed;
  bool small;

  test_thread = pthread_self ();
  v.nr_legs = 1;
  v.legs[0].v = &v;
  v.legs[0].caps = (struct leg_caps) {
    .can_write = true, .can_flush = true, .can_fua = true, .can_zero = true,
    .can_extents = true, .size = 1ull << 40,
  };
  v.cfg.timeout = 10;

  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    for (k = 0, small = true; k < cases[i].nr_cmds; ++k)
      small &= cases[i].cmds[k].op != OP_READ ||
        cases[i].cmds[k].count <= 64 * KiB;
    run_case (&cases[i], M_WHOLE, 0);
    if (small)                  /* one byte at a time: replies <= 64 KiB */
      run_case (&cases[i], M_BYTES, 0);
    for (seed = 1; seed <= 4; ++seed)
      run_case (&cases[i], M_RANDOM, seed * 0x9e3779b97f4a7c15ull + i);
  }
  reply_before_payload ();
  corked_batch ();
  corked_headers ();
  concurrent_issuers ();
  reply_overtakes_count ();
  tcp_abort ();
  return unit_exit ("unit-wire");
}
