/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous legs (async=URI, DESIGN.md section 14): a queue per leg,
 * sent in epochs by a thread of its own, so that no client waits for
 * the leg.  This file is the queue's side: making, promoting and
 * freeing a leg's queue, what client writers call (async_enqueue), the
 * epochs' markers (async_cut_epochs), and what a resync and status ask
 * of the queue (async_drain, async_get_status).  Falling behind and
 * coming back (a pull-ahead, async_discard, async_shed, the marking
 * protocol, async_resume, async_may_catch_up) are async-behind.c; the
 * sender thread, which takes the queue to the leg, is async-sender.c;
 * the structures the three use are in async-int.h.
 *
 * What a write does for an asynchronous leg that receives writes (its
 * state is syncing: it is never uptodate, never read, never counted):
 * under its range lock and holding its activity-log extents, it copies
 * its data into the leg's queue (async_enqueue) and takes one more
 * reference on those extents (al_hold).  The client is acknowledged by
 * the synchronous legs alone.
 *
 * Crash consistency.  The queue is cut into epochs at every client
 * flush and at every flush of the engine's own (the activity log's
 * cooler, every few seconds): a marker is queued (async_cut_epochs).
 * The sender takes the writes of one epoch in batches of up to WINDOW,
 * sending a batch at once; a write that overlaps one already in the
 * batch starts the next batch, so overlapping writes land in queue
 * order.  At a marker, once every write of the epoch has been
 * answered, it flushes the leg, and only then starts on the next
 * epoch.  So the leg holds, at every moment, every write of the epochs
 * before the current one and some of the current one's: the volume's
 * state at a flush plus part of the next epoch, overlapping writes in
 * order.  A write is queued before its client is acknowledged, so a
 * write that causally follows another is never in an earlier epoch.
 * A FUA write is durable once acknowledged, so a write queued after it
 * must not land before it even within an epoch: it keeps its FUA flag,
 * is sent with it and ends its batch (async-sender.c, take_batch), so
 * nothing queued after it is sent before the leg has made it durable.
 * A marker that cannot be had (out of memory) makes the leg fall
 * behind rather than merge two epochs (async_cut_epochs).
 *
 * Queueing.  A write's data is copied into a ring (bufring.c, allocated
 * once: no malloc and no fresh page per write) and its entry taken
 * from a list of spares.  Writers wake the sender only when it sleeps
 * with nothing queued (asleep): a sender gathering a batch wakes up on
 * its own (async-sender.c, Sending).  A write's data goes back to the
 * ring once the leg has answered it; its entry stays, unflushed, until
 * its epoch is flushed.
 *
 * Nothing is lost in a crash.  The activity-log references of a queued
 * write are dropped only after the flush that ends its epoch, so every
 * extent the leg may lack is in the activity log on the synchronous
 * legs; the slot is not a member of any generation, so start-up ORs
 * that log into its bitmap (crash recovery does so for every absent
 * slot) and the leg resyncs incrementally.
 *
 * The buffer.  Queued data is bounded by async-buffer (bytes of writes
 * not yet answered by the leg).  When a write does not fit, with
 * async-full=block it waits for room (its range lock held); with
 * async-full=pull-ahead the leg falls behind (async-behind.c), and so
 * it does when the activity log fills up or a write queued for it is
 * not kept by the volume.
 *
 * Lock order: v->lock -> aq->lock (the monitor and status look at the
 * queue under v->lock), and aq->lock is a leaf: nothing that takes
 * another lock is called with it held.  Writers come with their range
 * lock held (async-full=block waits for room holding it).  The sender
 * takes no lock across I/O but aq->sb_lock, across a superblock write
 * (async-sender.c).
 */

#include <config.h>

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "state.h"
#include "member.h"
#include "leg.h"
#include "al.h"
#include "async.h"
#include "async-int.h"
#include "bufring.h"
#include "cleanup.h"

#define SPARES_PER_MIB 1024     /* entries kept for reuse per MiB of
                                   async-buffer (an entry lives until its
                                   epoch is flushed: up to 2 s of writes) */
/* -D replicate.async_marker_fail=1: every epoch marker fails as if
 * memory had run out (cut_epoch_locked).  For tests only
 * (test-async-marker-oom.sh).
 */
int replicate_debug_async_marker_fail = 0;  /* exported by the .syms */

/* Free a list of entries (their data let go already). */
void
free_list (struct aentry *e)
{
  while (e) {
    struct aentry *next = e->next;
    assert (e->data == NULL);
    free (e);
    e = next;
  }
}

/* Wake the sender if it waits for work with no deadline (a sender
 * gathering a batch wakes up on its own: see sender).  aq->lock held.
 */
void
wake_sender_locked (struct async_leg *aq)
{
  if (aq->asleep) {
    aq->asleep = false;
    pthread_cond_signal (&aq->work);
  }
}

/* An entry, reused if one is spare (none is allocated per write in
 * the steady state).  aq->lock held.  NULL if out of memory.
 */
static struct aentry *
entry_get_locked (struct async_leg *aq)
{
  struct aentry *e = aq->spare;

  if (e == NULL)
    return malloc (sizeof *e);
  aq->spare = e->next;
  aq->nr_spare--;
  return e;
}

/* Give back a list of entries (their data let go) for reuse, freeing
 * what exceeds the spares' bound.  aq->lock held.
 */
void
entries_put_locked (struct async_leg *aq, struct aentry *e)
{
  while (e) {
    struct aentry *next = e->next;
    assert (e->data == NULL);
    if (aq->nr_spare < aq->max_spare) {
      e->next = aq->spare;
      aq->spare = e;
      aq->nr_spare++;
    }
    else
      free (e);
    e = next;
  }
}

/* Let an entry's data go (it was answered, or is dropped).  aq->lock
 * held.
 */
void
release_data_locked (struct async_leg *aq, struct aentry *e)
{
  if (e->data == NULL)
    return;
  if (bufring_owns (&aq->ring, e->data))
    bufring_give_back (&aq->ring, e->data);
  else
    free (e->data);
  e->data = NULL;
}

/* The ring's size: async-buffer, and room for the blocks' headers
 * (a 4 KiB write takes 4 KiB and 64 bytes) and for blocks given back
 * out of order.  A write that finds no room in the ring while the
 * buffer has room takes its copy from malloc instead.
 */
static size_t
ring_size (const struct volume *v)
{
  return v->cfg.async_buffer + v->cfg.async_buffer / 8;
}

/* Create the queue of an asynchronous leg. */
struct async_leg *
async_new (struct volume *v, struct leg *l)
{
  struct async_leg *aq = calloc (1, sizeof *aq);
  pthread_condattr_t attr;
  void *buf = NULL;

  if (aq == NULL || (aq->reqs = calloc (WINDOW, sizeof *aq->reqs)) == NULL ||
      posix_memalign (&buf, META_BLOCK, META_BLOCK) != 0 ||
      bufring_init (&aq->ring, ring_size (v)) == -1) {
    if (aq) {
      free (aq->reqs);
      free (buf);
    }
    free (aq);
    nbdkit_error ("out of memory");
    return NULL;
  }
  aq->sb_buf = buf;
  aq->max_spare = v->cfg.async_buffer / (1024 * 1024) * SPARES_PER_MIB;
  aq->v = v;
  aq->l = l;
  aq->dropping = true;          /* until a resync starts it (async_resume) */
  pthread_mutex_init (&aq->lock, NULL);
  pthread_mutex_init (&aq->sb_lock, NULL);
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);   /* as now_ns */
  pthread_cond_init (&aq->work, &attr);
  pthread_condattr_destroy (&attr);
  pthread_cond_init (&aq->room, NULL);
  return aq;
}

/* Make a leg asynchronous (async=URI, or nbdrep add --async): its
 * queue, a poller of its own for its connections (async-sender.c),
 * and its bit in v->async_mask, before the leg is counted in nr_legs.
 * Returns 0 or -1 after nbdkit_error.
 */
int
async_make_leg (struct volume *v, struct leg *l)
{
  l->aq = async_new (v, l);
  if (l->aq == NULL)
    return -1;
  if (leg_own_poller (l) == -1) {
    async_free (l->aq);
    l->aq = NULL;
    leg_drop_own_poller (l);
    return -1;
  }
  l->async = true;
  atomic_fetch_or (&v->async_mask, (uint16_t) (1u << l->index));
  return 0;
}

/* A promoted leg (prefer= force=true at start, DESIGN.md section 14)
 * is synchronous for this run: no queue, no bit, the volume's poller.
 * Returns 0 or -1 after nbdkit_error.
 */
int
async_promote_leg (struct volume *v, struct leg *l)
{
  atomic_fetch_and (&v->async_mask, (uint16_t) ~(1u << l->index));
  l->async = false;
  async_free (l->aq);
  l->aq = NULL;
  return leg_drop_own_poller (l);
}

/* Free the queue (its thread stopped, nothing queued). */
void
async_free (struct async_leg *aq)
{
  if (aq == NULL)
    return;
  assert (!aq->running);
  pthread_mutex_destroy (&aq->lock);
  pthread_mutex_destroy (&aq->sb_lock);
  pthread_cond_destroy (&aq->work);
  pthread_cond_destroy (&aq->room);
  free (aq->reqs);
  free (aq->sb_buf);
  bufring_destroy (&aq->ring);
  free_list (aq->spare);
  free (aq);
}

/* Copy a client write's data into the ring (or, if it has no room,
 * into memory from malloc), into e.  Returns 0 or -1.  aq->lock held.
 */
static int
copy_data_locked (struct async_leg *aq, struct aentry *e,
                  const struct leg_cmd *cmd)
{
  e->data = bufring_take (&aq->ring, cmd->count);
  if (e->data == NULL && (e->data = malloc (cmd->count)) == NULL)
    return -1;
  memcpy (e->data, cmd->buf, cmd->count);
  return 0;
}

/* Queue an entry.  aq->lock held. */
static void
queue_locked (struct async_leg *aq, struct aentry *e)
{
  e->seq = ++aq->enq_seq;
  if (e->op == OP_FLUSH || (e->flags & ENGINE_FLAG_FUA))
    aq->ender_seq = e->seq;
  aq->used += entry_cost (e);
  if (e->op != OP_FLUSH) {
    aq->lag_bytes += e->count;
    aq->epoch_open = true;
    if (aq->oldest_unflushed_ns == 0)
      aq->oldest_unflushed_ns = e->enq_ns;
  }
  alist_push (&aq->queue, e);
  aq->nr_queued++;
  if (aq->nr_queued == WINDOW || aq->ender_seq == e->seq)
    pthread_cond_signal (&aq->work);    /* a batch is complete: go */
  else
    wake_sender_locked (aq);
}

/* Queue a client command: an entry, its data copied, its extents held
 * once more.  Returns 0, or -1 if out of memory.  aq->lock held.
 */
static int
queue_command_locked (struct async_leg *aq, const struct leg_cmd *cmd)
{
  struct aentry *e = entry_get_locked (aq);

  if (e == NULL)
    return -1;
  *e = (struct aentry) {
    .op = cmd->op, .count = cmd->count, .offset = cmd->offset,
    .flags = cmd->flags & (ENGINE_FLAG_MAY_TRIM | ENGINE_FLAG_FUA),
    .enq_ns = now_ns (),
  };
  if (cmd->op == OP_WRITE && copy_data_locked (aq, e, cmd) == -1) {
    entries_put_locked (aq, e);
    return -1;
  }
  if (aq->v->al)
    al_hold (aq->v->al, cmd->offset, cmd->count);
  queue_locked (aq, e);
  return 0;
}

/* Queue a client write or zero for an asynchronous leg (see the
 * design note).  The caller holds the range lock and the activity-log
 * extents of cmd.
 *
 * It is queued only while the leg is syncing and not dropping; a
 * write not queued is marked in the leg's bitmap instead, the leg out
 * of the receiving legs (stale or failed) when the writer looked.  A
 * pull-ahead makes it stale as it starts dropping (one hold of
 * v->lock), and the catch-up's resync, which could clear a bit set
 * while its target is syncing, makes it syncing (async_resume, in the
 * same hold of v->lock) only once no marking is under way
 * (aq->marking).  A writer that finds the leg out but not dropping (it
 * failed from outside its sender, which was idle, and came back stale;
 * or its catch-up is making it syncing that moment) marks too, counted
 * in aq->marking: it holds its range lock, so no resync copies its
 * range before the mark.  Queued instead, its write (it read the
 * membership while the leg was syncing) was sent outside any catch-up
 * and could land after the catch-up had copied newer data over the
 * range (test-async-late-queue.sh).
 */
void
async_enqueue (struct volume *v, struct leg *l, const struct leg_cmd *cmd)
{
  struct async_leg *aq = l->aq;
  uint64_t cost = cost_of (cmd->op, cmd->count);
  bool no_memory = false;

  pthread_mutex_lock (&aq->lock);
  while (!aq->dropping && atomic_load (&l->state) == LEG_SYNCING) {
    if (!no_memory && !aq->stop &&
        (aq->used + cost <= v->cfg.async_buffer || aq->used == 0)) {
      if (queue_command_locked (aq, cmd) == 0) {
        pthread_mutex_unlock (&aq->lock);
        return;
      }
      no_memory = true;         /* pull ahead */
      continue;
    }
    if (!no_memory && !aq->stop &&
        v->cfg.async_full == ASYNC_FULL_BLOCK) {
      pthread_cond_wait (&aq->room, &aq->lock);
      continue;
    }
    /* Pull ahead: out of the receiving legs first, then drop. */
    pthread_mutex_unlock (&aq->lock);
    pull_ahead (aq, "asynchronous buffer full: pulled ahead",
                cmd->offset, cmd->count);
    return;
  }
  /* Behind or out already: the bitmap only. */
  aq->marking++;
  pthread_mutex_unlock (&aq->lock);
  mark_range (aq, cmd->offset, cmd->count);
  marking_done (aq);
}

/* Queue the marker that ends the current epoch, if anything was
 * queued since the last one.  aq->lock held.  Returns false if no
 * entry could be had for it (out of memory): the epoch is not ended.
 */
static bool
cut_epoch_locked (struct async_leg *aq)
{
  struct aentry *e;

  if (!aq->epoch_open)
    return true;
  e = replicate_debug_async_marker_fail ? NULL : entry_get_locked (aq);
  if (e == NULL)
    return false;
  *e = (struct aentry) { .op = OP_FLUSH, .enq_ns = now_ns () };
  queue_locked (aq, e);
  aq->epoch_open = false;
  return true;
}

/* End the current epoch of every asynchronous leg receiving writes (a
 * client flush, or the engine's own).  A leg whose marker cannot be
 * had falls behind instead: its epoch would merge with the next, and
 * a write the client issued after this flush could land before one it
 * made durable with it (no crash state).  Dropped, both go to the
 * bitmap, and the leg keeps what it holds: epochs up to the last
 * marker, and part of this one.  No lock held.
 */
void
async_cut_epochs (struct volume *v)
{
  uint16_t legs = MB_WRITING (membership_load (v)) &
    atomic_load_explicit (&v->async_mask, memory_order_relaxed);

  for (; legs != 0; legs &= legs - 1) {
    struct async_leg *aq = v->legs[__builtin_ctz (legs)].aq;
    bool cut;

    pthread_mutex_lock (&aq->lock);
    cut = aq->dropping || cut_epoch_locked (aq);
    pthread_mutex_unlock (&aq->lock);
    if (!cut)
      pull_ahead (aq, "no memory for an epoch marker: pulled ahead", 0, 0);
  }
}

/* Wait until every entry queued so far is flushed on the leg.  Returns
 * 0, or -1 if the leg dropped out meanwhile.
 */
int
async_drain (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);
  uint64_t target = aq->enq_seq;

  /* Not a client's flush: without its marker (out of memory) the
   * epochs merge, which no client ordering forbids, and the sender's
   * idle flush ends the wait.
   */
  (void) cut_epoch_locked (aq);
  while (!aq->dropping && !aq->stop &&
         (aq->queue.head || aq->unflushed.head || aq->busy) &&
         aq->flushed_seq < target)
    pthread_cond_wait (&aq->room, &aq->lock);
  return aq->dropping || aq->stop ? -1 : 0;
}

/* Numbers for status (see async.h). */
void
async_get_status (struct async_leg *aq, struct async_status *st)
{
  uint64_t now = now_ns (), since;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);

  st->buffer_used = aq->used;
  st->lag_bytes = aq->lag_bytes;
  st->pull_aheads = aq->pull_aheads;
  since = aq->behind_since_ns ? aq->behind_since_ns : aq->oldest_unflushed_ns;
  st->lag_seconds = since && since < now ? (double) (now - since) / 1e9 : 0;
}
