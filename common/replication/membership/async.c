/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous legs (async=URI, DESIGN.md section 14): a queue per leg,
 * sent in epochs by a thread of its own, so that no client waits for
 * the leg.  This file is the queue's side: making, promoting and
 * freeing a leg's queue, what client writers call (async_enqueue,
 * async_discard), the epochs' markers (async_cut_epochs), falling
 * behind and the marking protocol (a pull-ahead, async_shed), and what
 * the monitor, a resync and status ask of the queue (async_resume,
 * async_caught_up, async_may_catch_up, async_drain, async_get_status).
 * The sender thread, which takes the queue to the leg, is
 * async-sender.c; the structures both use are in async-int.h.
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
 * not yet answered by the leg).  When a write does not fit:
 *   - async-full=block: it waits for room (its range lock held);
 *   - async-full=pull-ahead: the leg falls behind.  The queue is
 *     dropped, each dropped write's range marked in the slot's bitmap
 *     before its activity-log references go; the leg becomes stale (so
 *     every later write marks the bitmap instead), and once the writes
 *     already sent have been answered and flushed, and the leg keeps
 *     pace with the volume's writes again (async_may_catch_up), the
 *     monitor starts a resync of the bitmap: catching up.  While
 *     catching up the leg is not consistent (its superblock says
 *     inconsistent, and a failover refuses it); the resync's end waits
 *     until the queue has been flushed up to that moment
 *     (async_drain), then clears the flag (resync.c).  A leg catching
 *     up falls behind the same way (its resync then stops).
 * The activity log bounds the queue too: at three quarters full, every
 * asynchronous leg holding extents falls behind and lets them go, the
 * ranges of the writes it was sent but has not flushed marked in its
 * bitmap (async_shed, called by the cooler before it cools).
 * Marks and resyncs.  A resync's checkpoint clears copied runs under
 * v->lock and only while its target is syncing; a bit set while it is
 * syncing could be cleared for a run copied before the write.  So a
 * bit for a write not queued is set only while the leg is out of the
 * receiving legs, and a leg is never syncing while `dropping`: every
 * way into dropping sets it under v->lock with the leg out, in the
 * same hold that takes it out (a pull-ahead, async_shed, async_discard:
 * fall_behind, leave_receiving_locked) or that finds it out after
 * member_fail_leg (a failure: the sender, which fails it again if a
 * catch-up made it syncing meanwhile); writers that find it dropping
 * count themselves in `marking` while they mark; and the catch-up
 * clears `dropping` (async_resume) only once `marking` is 0, in the
 * hold of v->lock in which its resync makes the leg syncing
 * (resync.c, start_receiving_writes), and starts only once the sender
 * is idle with no marking under way (async_may_catch_up).  Writers
 * queue only while the leg is syncing: one that finds it out marks,
 * dropping or not, counted in `marking` and holding its range lock, so
 * that a catch-up making the leg syncing that moment copies the range
 * only after the mark (async_enqueue).  (Taken out in one hold and
 * dropping in the next, a leg could be caught up in between, by a
 * catch-up that found it idle and nothing marking; it was then syncing
 * and dropping: every write marked for it, none queued, no resync to
 * copy them, and it said it replicated: test-async-behind-resume.sh.)
 * So a syncing leg never has a bit set for it but by the data path's
 * membership rule.
 *
 * A write the volume does not keep (the client gets an error for it,
 * after it was queued) makes the leg fall behind with its range in the
 * bitmap (async_discard), so that the catch-up copies the volume's own
 * data over whatever the leg got.
 *
 * A leg that fails (an error or a timeout of the sender's requests)
 * drops its queue the same way, from the sender (async-sender.c).
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

#define PACE_WINDOW_NS 1000000000ULL    /* the volume's write rate is
                                           measured over this long */
#define RATE_STALE_NS 10000000000ULL    /* a leg's rate is judged by for
                                           this long */
#define SPARES_PER_MIB 1024     /* entries kept for reuse per MiB of
                                   async-buffer (an entry lives until its
                                   epoch is flushed: up to 2 s of writes) */
/* -D replicate.async_mark_pause=MS: the writer that pulled an
 * asynchronous leg ahead waits MS milliseconds after marking, before
 * it is done: the window in which a catch-up must not start (async_
 * resume waits for it).  For tests only (test-async-late-mark.sh).
 */
int replicate_debug_async_mark_pause = 0;   /* exported by the .syms */
/* -D replicate.async_marker_fail=1: every epoch marker fails as if
 * memory had run out (cut_epoch_locked).  For tests only
 * (test-async-marker-oom.sh).
 */
int replicate_debug_async_marker_fail = 0;  /* exported by the .syms */

/* -D replicate.async_behind_pause=MS: the thread that makes an
 * asynchronous leg fall behind waits MS milliseconds after taking it
 * out of the receiving legs, before it starts dropping (holding
 * v->lock, as it does between the two): the window in which no
 * catch-up may make the leg syncing again.  For tests only
 * (test-async-behind-resume.sh).
 */
int replicate_debug_async_behind_pause = 0; /* exported by the .syms */

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
static void
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

/* Mark [offset, offset+count) in the leg's bitmap. */
static void
mark_range (struct async_leg *aq, uint64_t offset, uint32_t count)
{
  struct volume *v = aq->v;
  struct bitmap *b;

  if (aq->l->slot < 0 || count == 0 ||
      (b = volume_bitmap (v, (unsigned) aq->l->slot)) == NULL)
    return;
  bitmap_mark_range (b, offset / v->cfg.chunk,
                     (offset + count - 1) / v->cfg.chunk);
}

/* Mark an entry's range in the leg's bitmap (its slot is assigned:
 * the leg received writes), then let its activity-log extents go.
 */
void
mark_and_release (struct async_leg *aq, struct aentry *e)
{
  struct volume *v = aq->v;

  if (e->op == OP_FLUSH)
    return;
  mark_range (aq, e->offset, e->count);
  if (v->al && !e->released)
    al_release (v->al, e->offset, e->count);
}

/* Mark and free a list of entries (see mark_and_release). */
void
drop_list (struct async_leg *aq, struct aentry *e)
{
  struct aentry *p;

  for (p = e; p; p = p->next)
    mark_and_release (aq, p);
  free_list (e);
}

/* Take the leg out of the receiving legs (see async_enqueue): make it
 * stale if it is syncing (a failed leg is out already).  v->lock held.
 */
static void
leave_receiving_locked (struct async_leg *aq, const char *why)
{
  struct leg *l = aq->l;

  /* A catch-up running (its resync) sees the leg stale and stops, its
   * checkpoint clears no bit once the leg is not syncing, and its end
   * leaves a leg that fell behind to the monitor (resync.c).  A leg
   * that failed is out already.
   */
  if (atomic_load (&l->state) != LEG_SYNCING)
    return;
  l->want_full = false;         /* its bitmap says what it lacks */
  member_set_state (aq->v, l, LEG_STALE, why);
}

/* Start dropping: take the queue (to be marked by the caller once the
 * leg is out).  aq->lock held.
 */
struct aentry *
start_dropping_locked (struct async_leg *aq)
{
  struct aentry *e = queue_take_all_locked (aq);
  struct aentry *p;

  for (p = e; p; p = p->next) {
    aq->used -= entry_cost (p);
    if (p->op != OP_FLUSH)
      aq->lag_bytes -= p->count;
    release_data_locked (aq, p);
  }
  aq->dropping = true;
  aq->idle_told = false;
  aq->epoch_open = false;
  pthread_cond_broadcast (&aq->room);
  /* It may hold sent writes unflushed, whose epoch no marker will end
   * now: it flushes them at once (flush_due_locked).
   */
  wake_sender_locked (aq);
  return e;
}

/* A marking for a dropping leg is over (see async_enqueue). */
static void
marking_done (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);
  assert (aq->marking > 0);
  if (--aq->marking == 0)
    pthread_cond_broadcast (&aq->room);
}

/* Start dropping unless it already is (a pull-ahead): count it, and
 * take the queue.  The leg has left the receiving legs first
 * (leave_receiving).  aq->lock held.
 */
static struct aentry *
pull_ahead_locked (struct async_leg *aq)
{
  if (aq->dropping)
    return NULL;
  aq->pull_aheads++;
  aq->behind_since_ns = aq->oldest_unflushed_ns ? aq->oldest_unflushed_ns
                                                : now_ns ();
  return start_dropping_locked (aq);
}

/* Make the leg fall behind, unless it already is: out of the receiving
 * legs (leave_receiving_locked, why), then dropping (pull_ahead_locked),
 * in one hold of v->lock, so that no catch-up makes it syncing in
 * between (see the design note).  A marking begins (aq->marking): the
 * caller marks what it must, then ends it with end_behind_marking.
 * Returns the queue that was dropped, to be marked, or NULL.  No lock
 * held.
 */
static struct aentry *
fall_behind (struct async_leg *aq, const char *why)
{
  struct aentry *dropped;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->v->lock);

  leave_receiving_locked (aq, why);
  debug_pause (replicate_debug_async_behind_pause, "async",
               "after taking the leg out, before it drops",
               "async_behind_pause");
  pthread_mutex_lock (&aq->lock);
  dropped = pull_ahead_locked (aq);
  aq->marking++;
  pthread_mutex_unlock (&aq->lock);
  return dropped;
}

/* Mark in the leg's bitmap the queue fall_behind dropped and the range
 * offset+count (count 0: none), end the marking and wake the monitor,
 * which starts the catch-up when it may.  No lock held.
 */
static void
end_behind_marking (struct async_leg *aq, struct aentry *dropped,
                    uint64_t offset, uint32_t count)
{
  drop_list (aq, dropped);
  if (count > 0)
    mark_range (aq, offset, count);
  if (replicate_debug_async_mark_pause > 0) {
    member_wake_monitor (aq->v);
    debug_pause (replicate_debug_async_mark_pause, "async",
                 "before the pull-ahead is done", "async_mark_pause");
  }
  marking_done (aq);
  member_wake_monitor (aq->v);
}

/* Pull the leg ahead for why (a full buffer, no memory): fall behind,
 * then mark the dropped queue and offset+count (count 0: none).  No
 * lock held.
 */
static void
pull_ahead (struct async_leg *aq, const char *why, uint64_t offset,
            uint32_t count)
{
  struct aentry *dropped = fall_behind (aq, why);
  char name[160];

  if (dropped)
    nbdkit_debug ("%s: %s", leg_name (aq->l, name, sizeof name), why);
  end_behind_marking (aq, dropped, offset, count);
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

/* The volume did not keep a write queued for the leg: the client got
 * an error (every synchronous leg refused it alike, or those that took
 * it could not be counted).  The leg may hold it or not; the volume
 * holds whatever its synchronous legs hold there.  The leg falls behind
 * with the range in its bitmap (as a pull-ahead), so that its catch-up
 * copies the volume's own data there; the catch-up starts only once
 * the write, if sent, has been answered and flushed (async_may_catch_
 * up).  The caller holds the range lock and the range's extents.
 */
void
async_discard (struct leg *l, const struct leg_cmd *cmd)
{
  struct aentry *dropped;
  char name[160];

  dropped = fall_behind (l->aq, "a write the volume did not keep");
  nbdkit_debug ("%s: the volume did not keep the write at %" PRIu64
                " (%" PRIu32 " bytes): behind, the range in its bitmap",
                leg_name (l, name, sizeof name), cmd->offset, cmd->count);
  end_behind_marking (l->aq, dropped, cmd->offset, cmd->count);
}

/* A range whose extents async_shed let go. */
struct shed_range {
  uint64_t offset;
  uint32_t count;
};

/* Note the ranges of the writes on their way and answered but
 * unflushed, marking them released, for a leg that fell behind (those
 * the sender flushed meanwhile it released itself).  *nr: how many
 * ranges (their array is returned, NULL if none or out of memory: then
 * none is released).  aq->lock held.
 */
static struct shed_range *
shed_locked (struct async_leg *aq, size_t *nr)
{
  struct shed_range *r;
  struct aentry *e;
  size_t n = aq->nr_batch, i;

  assert (aq->dropping);
  for (e = aq->unflushed.head; e; e = e->next)
    n++;
  *nr = 0;
  if (n == 0 || (r = calloc (n, sizeof *r)) == NULL)
    return NULL;
  for (i = 0; i < aq->nr_batch; ++i)
    if (!aq->batch[i]->released) {
      aq->batch[i]->released = true;
      r[(*nr)++] = (struct shed_range) { aq->batch[i]->offset,
                                         aq->batch[i]->count };
    }
  for (e = aq->unflushed.head; e; e = e->next)
    if (!e->released) {
      e->released = true;
      r[(*nr)++] = (struct shed_range) { e->offset, e->count };
    }
  return r;
}

/* Does the queue hold activity-log extents (queued, on their way, or
 * unflushed)?
 */
static bool
holds_extents (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);
  return aq->queue.head || aq->unflushed.head || aq->nr_batch > 0;
}

/* The activity log is filling up with extents held for asynchronous
 * legs (a leg that answers slowly, or not at all until it times out):
 * every asynchronous leg holding any falls behind, whatever async-full
 * says (a full log would make every writer wait), and lets them go: its
 * queue is dropped as in a pull-ahead, and the writes it was sent but
 * has not flushed are marked in its bitmap and their extents released
 * now (their answers are still awaited: the catch-up waits for them,
 * async_may_catch_up).  Called by the cooler before it cools, so that the
 * bitmap pages are written before those extents leave the log.  No
 * lock held.
 */
void
async_shed (struct volume *v)
{
  uint16_t legs = atomic_load_explicit (&v->async_mask, memory_order_relaxed);

  for (; legs != 0; legs &= legs - 1) {
    struct async_leg *aq = v->legs[__builtin_ctz (legs)].aq;
    struct aentry *dropped;
    struct shed_range *r;
    size_t nr = 0, i;

    if (aq == NULL || !holds_extents (aq))
      continue;
    dropped = fall_behind (aq, "the activity log is full of its writes: "
                           "pulled ahead");
    pthread_mutex_lock (&aq->lock);
    r = shed_locked (aq, &nr);
    pthread_mutex_unlock (&aq->lock);
    for (i = 0; i < nr; ++i) {
      mark_range (aq, r[i].offset, r[i].count);
      if (v->al)
        al_release (v->al, r[i].offset, r[i].count);
    }
    free (r);
    end_behind_marking (aq, dropped, 0, 0);
  }
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

/* Wait until no marking for the leg is under way (a catch-up about to
 * start: see async_resume).  No lock held.
 */
void
async_wait_marking (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);

  while (aq->marking > 0)
    pthread_cond_wait (&aq->room, &aq->lock);
}

/* The leg receives writes again (a resync of its bitmap makes it
 * syncing in the same hold of v->lock): queue from now on.  Refused
 * (false) while a marking is under way: the caller waits for it
 * (async_wait_marking, without v->lock) and tries again.  v->lock
 * held.
 */
bool
async_resume (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);

  if (aq->marking > 0)
    return false;
  aq->dropping = false;
  return true;
}

/* The catch-up is over: if it did not fall behind again meanwhile, its
 * lag is the queue's again.
 */
void
async_caught_up (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);
  if (!aq->dropping)
    aq->behind_since_ns = 0;
}

/* Has the leg a rate to judge by (measure_leg_rate_locked): one was
 * measured, less than RATE_STALE_NS ago?  A leg behind sends nothing,
 * so the rate it was last measured at is not renewed: if that was
 * across a stall of its server, it would keep the leg behind for as
 * long as the volume writes.  aq->lock held.
 */
bool
leg_rate_known_locked (const struct async_leg *aq)
{
  return aq->leg_rate != 0 && now_ns () - aq->leg_rate_ns < RATE_STALE_NS;
}

/* Does the leg keep pace with the volume's writes: clients wrote, over
 * the last PACE_WINDOW_NS or more, at most three quarters of what the
 * leg took when it was the bottleneck (the rest is for the catch-up's
 * own copying)?  Yes if the leg was never seen to be the bottleneck,
 * or not for RATE_STALE_NS.  A leg that does not would fill its buffer
 * again at once and fall behind again, each time at the cost of a
 * catch-up started for nothing: it stays behind instead, its lag
 * growing, until the volume writes less, or until its rate is stale:
 * then it tries a catch-up, which measures it again (a leg still too
 * slow falls behind with a fresh rate, at most one catch-up per
 * RATE_STALE_NS).  aq->lock held.
 */
static bool
keeps_pace_locked (struct async_leg *aq)
{
  uint64_t now = now_ns ();
  uint64_t bytes = atomic_load_explicit (&aq->v->client_write_bytes,
                                         memory_order_relaxed);

  if (aq->pace_ns == 0 || now - aq->pace_ns >= 2 * PACE_WINDOW_NS) {
    /* No window just ended (the monitor looks every 200 ms while the
     * leg is behind): start one, the rate unknown until it ends.
     */
    aq->pace_known = false;
    aq->pace_ns = now;
    aq->pace_bytes = bytes;
  }
  else if (now - aq->pace_ns >= PACE_WINDOW_NS) {
    aq->client_rate = (uint64_t) ((double) (bytes - aq->pace_bytes) * 1e9 /
                                  (double) (now - aq->pace_ns));
    aq->pace_known = true;
    aq->pace_ns = now;
    aq->pace_bytes = bytes;
  }
  if (!leg_rate_known_locked (aq))
    return true;
  return aq->pace_known && aq->client_rate * 4 <= aq->leg_rate * 3;
}

/* May the leg catch up now?  The sender has nothing in flight and
 * nothing unflushed (the catch-up's resync must not race a write still
 * on its way), and the leg keeps pace with the volume's writes.
 */
bool
async_may_catch_up (struct async_leg *aq)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->lock);
  return aq->queue.head == NULL && aq->unflushed.head == NULL &&
    !aq->busy && aq->marking == 0 && keeps_pace_locked (aq);
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
