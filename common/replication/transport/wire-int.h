/* SPDX-License-Identifier: BSD-3-Clause */
/* The wire's insides, shared by its sending side (wire.c) and its
 * reader (wire-recv.c): the protocol's constants, the table of
 * commands in flight, the reader's state, and the small helpers both
 * use.  Not for the rest of the engine (wire.h is).
 */

#ifndef REPLICATE_WIRE_INT_H
#define REPLICATE_WIRE_INT_H

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "wire.h"

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
#define MAX_IOV 64              /* vectors per sendmsg (32 writes) */
#define SEND_ROUNDS 4           /* sendmsg calls per turn as the sender */

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
  bool tcp;                     /* shut down for sending only (drain.c) */
  _Atomic bool saw_error;       /* a send or receive failed: see below */

  pthread_mutex_t lock;         /* everything below up to the reader */
  struct entry *ents;
  uint32_t cap;
  uint32_t free_head;
  uint32_t out_head, out_tail;  /* the send queue */
  _Atomic bool corked;          /* a thread's cork holds the queue */
  _Atomic bool dead;
  _Atomic bool out_pending;     /* the send queue is not empty */
  _Atomic bool sending;         /* a thread is in sendmsg, lock dropped */
  bool send_waited;             /* the reader waits on sent_cond */
  pthread_cond_t sent_cond;     /* a sendmsg's bytes were counted */

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

/* A send or receive failed with errno e: remember a reset, a timeout
 * or any other error but our own shutdown (EPIPE), which proves nothing
 * of the server's end (drain.c).  A reset's error is reported once, so
 * it is remembered here, where it is read.
 */
static inline void
note_socket_error (struct wire *w, int e)
{
  if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR && e != EPIPE)
    atomic_store (&w->saw_error, true);
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

/* ---- the table (w->lock held) ---------------------------------------- */

/* Give an entry back; returns the slot it held. */
static inline struct ioslot *
free_entry (struct wire *w, uint32_t i)
{
  struct ioslot *s = w->ents[i].slot;

  w->ents[i].slot = NULL;
  w->ents[i].next = w->free_head;
  w->free_head = i;
  return s;
}

/* Wait for the sender at work to count the bytes its sendmsg took
 * (w->lock held, dropped meanwhile).
 */
static inline void
await_count (struct wire *w)
{
  w->send_waited = true;
  pthread_cond_wait (&w->sent_cond, &w->lock);
}

/* Bytes of a command on the wire (header and payload). */
static inline size_t
wire_size (const struct entry *e)
{
  return REQ_SIZE + (e->type == NBD_CMD_WRITE ? e->count : 0);
}

/* The connection is dead: fail every command (wire.c; w->lock not
 * held).
 */
extern void wire_fail_all (struct conn *c);

#endif /* REPLICATE_WIRE_INT_H */
