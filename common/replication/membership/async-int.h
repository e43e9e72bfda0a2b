/* SPDX-License-Identifier: BSD-3-Clause */
/* The insides of an asynchronous leg's queue, shared by the queue's
 * side (async.c, whose note describes the whole; async-behind.c, the
 * leg falling behind and coming back) and its sender thread
 * (async-sender.c): the entries, their lists, the queue's structure
 * and the few helpers these files use.  Included only by them; the
 * rest of the engine uses async.h.
 *
 * Invariants (under aq->lock).  An entry is in one place at a time:
 * the queue (queued, not taken by the sender), the sender's batch (on
 * its way: aq->batch, nr_batch of them), the unflushed list (answered,
 * its epoch not flushed), the spares, or a list taken by whoever drops
 * or frees it.  `used` counts the buffer bytes (entry_cost) of the
 * queue and the batch; `lag_bytes` the bytes of the writes and zeros
 * in the queue, the batch and the unflushed list.  A write's data is
 * held from its queueing until it is answered or dropped
 * (release_data_locked).  While `dropping`, writers mark the leg's
 * bitmap and queue nothing.
 *
 * Lock order: v->lock -> aq->lock, and aq->lock is a leaf: nothing
 * that takes another lock is called with it held.  aq->sb_lock ->
 * v->change_lock (async_write_sb), never with aq->lock held.
 */

#ifndef REPLICATE_ASYNC_INT_H
#define REPLICATE_ASYNC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "bufring.h"

#define WINDOW 64               /* writes in flight per batch */
#define ENTRY_COST 64           /* bytes a queued zero or marker counts */

/* One queued write, zero or epoch marker (op OP_FLUSH). */
struct aentry {
  struct aentry *next;
  enum leg_op op;
  uint32_t count;
  uint64_t offset;
  uint32_t flags;
  uint64_t enq_ns;              /* when it was queued */
  uint64_t seq;                 /* its number in the queue */
  bool released;                /* its extents let go early (async_shed) */
  char *data;                   /* OP_WRITE until answered: in the ring,
                                   or from malloc if it had no room */
};

/* A list of entries. */
struct alist {
  struct aentry *head, *tail;
};

/* An asynchronous leg's queue, and its sender's state. */
struct async_leg {
  struct volume *v;
  struct leg *l;

  pthread_mutex_t lock;         /* everything below */
  pthread_cond_t work;          /* the sender has something to do */
  pthread_cond_t room;          /* buffer room made, or flushed */
  struct alist queue;           /* queued, not taken by the sender */
  size_t nr_queued;             /* entries in it */
  struct aentry *spare;         /* entries to reuse, nr_spare of them */
  size_t nr_spare, max_spare;
  struct alist unflushed;       /* answered, their epoch not flushed */
  uint64_t used;                /* buffer bytes (queued and in flight) */
  uint64_t lag_bytes;           /* bytes queued, sent or not, unflushed */
  uint64_t enq_seq;             /* entries queued so far */
  uint64_t ender_seq;           /* seq of the newest marker or FUA write
                                   queued (a batch ends there), or 0 */
  uint64_t flushed_seq;         /* every entry up to this one is flushed */
  uint64_t oldest_unflushed_ns; /* enq_ns of the oldest unflushed, or 0 */
  uint64_t behind_since_ns;     /* when it last fell behind, or 0 */
  bool epoch_open;              /* something queued since the last marker */
  bool dropping;                /* behind or failed: mark, do not queue */
  unsigned marking;             /* writers marking for a dropping leg */
  bool busy;                    /* the sender has a batch out */
  bool asleep;                  /* the sender waits for work */
  bool flush_now;               /* flush without waiting for a marker */
  bool idle_told;               /* the monitor knows it is idle */
  bool stop;
  uint64_t pull_aheads;         /* times it fell behind */
  uint64_t pace_bytes;          /* v->client_write_bytes at pace_ns */
  uint64_t pace_ns;             /* start of the rate's window, or 0 */
  uint64_t client_rate;         /* bytes/s clients wrote, last window */
  bool pace_known;              /* client_rate is of the last window */
  uint64_t leg_rate;            /* bytes/s the leg took when it was the
                                   bottleneck (see keeps_pace_locked) */
  uint64_t leg_rate_ns;         /* when it was last measured */
  struct bufring ring;          /* the data of queued and sent writes */

  struct aentry *batch[WINDOW]; /* the sender's batch, on its way */
  size_t nr_batch;

  pthread_t thread;
  bool running;
  struct ioreq *reqs;           /* the batch's requests */
  uint64_t newest_flushed_ns;   /* enq_ns of the newest flushed write */
  pthread_mutex_t sb_lock;      /* the leg's superblock write */
  uint8_t *sb_buf;              /* and its buffer (META_BLOCK, aligned) */
  uint64_t rpo_written_ns;      /* when the recovery point was written */
};

/* Append an entry to a list. */
static inline void
alist_push (struct alist *q, struct aentry *e)
{
  e->next = NULL;
  if (q->tail)
    q->tail->next = e;
  else
    q->head = e;
  q->tail = e;
}

/* Take a whole list. */
static inline struct aentry *
alist_take (struct alist *q)
{
  struct aentry *e = q->head;

  q->head = q->tail = NULL;
  return e;
}

/* Take the whole queue.  aq->lock held. */
static inline struct aentry *
queue_take_all_locked (struct async_leg *aq)
{
  aq->nr_queued = 0;
  return alist_take (&aq->queue);
}

/* Buffer bytes a command counts. */
static inline uint64_t
cost_of (enum leg_op op, uint32_t count)
{
  return op == OP_WRITE ? count : ENTRY_COST;
}

/* Buffer bytes an entry counts. */
static inline uint64_t
entry_cost (const struct aentry *e)
{
  return cost_of (e->op, e->count);
}

/* Free a list of entries (their data let go already). */
extern void free_list (struct aentry *e);
/* Wake the sender if it waits for work with no deadline.  aq->lock
 * held.
 */
extern void wake_sender_locked (struct async_leg *aq);
/* Mark [offset, offset+count) in the leg's bitmap. */
extern void mark_range (struct async_leg *aq, uint64_t offset,
                        uint32_t count);
/* A marking for a dropping leg is over.  No lock held. */
extern void marking_done (struct async_leg *aq);
/* Pull the leg ahead (fall behind, mark the dropped queue and
 * offset+count).  No lock held.
 */
extern void pull_ahead (struct async_leg *aq, const char *why,
                        uint64_t offset, uint32_t count);
/* Give back a list of entries for reuse.  aq->lock held. */
extern void entries_put_locked (struct async_leg *aq, struct aentry *e);
/* Let an entry's data go.  aq->lock held. */
extern void release_data_locked (struct async_leg *aq, struct aentry *e);
/* Mark an entry's range in the leg's bitmap, let its extents go. */
extern void mark_and_release (struct async_leg *aq, struct aentry *e);
/* Mark and free a list of entries (see mark_and_release). */
extern void drop_list (struct async_leg *aq, struct aentry *e);
/* Start dropping: take the queue, to be marked.  aq->lock held. */
extern struct aentry *start_dropping_locked (struct async_leg *aq);
/* Has the leg a rate measured recently enough to judge by?  aq->lock
 * held.
 */
extern bool leg_rate_known_locked (const struct async_leg *aq);

#endif /* REPLICATE_ASYNC_INT_H */
