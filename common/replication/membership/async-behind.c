/* SPDX-License-Identifier: BSD-3-Clause */
/* An asynchronous leg that falls behind and comes back (DESIGN.md
 * section 14; the queue as a whole is described in async.c): a
 * pull-ahead when the buffer is full, a write the volume does not
 * keep (async_discard), the activity log filling up (async_shed), the
 * marking protocol that keeps the leg's bitmap right meanwhile, and
 * the catch-up's questions (async_resume, async_caught_up,
 * async_may_catch_up).
 *
 * Falling behind.  Queued data is bounded by async-buffer (bytes of writes
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

#include "internal.h"
#include "state.h"
#include "member.h"
#include "leg.h"
#include "al.h"
#include "async.h"
#include "async-int.h"
#include "cleanup.h"

#define PACE_WINDOW_NS 1000000000ULL    /* the volume's write rate is
                                           measured over this long */
#define RATE_STALE_NS 10000000000ULL    /* a leg's rate is judged by for
                                           this long */

/* -D replicate.async_mark_pause=MS: the writer that pulled an
 * asynchronous leg ahead waits MS milliseconds after marking, before
 * it is done: the window in which a catch-up must not start (async_
 * resume waits for it).  For tests only (test-async-late-mark.sh).
 */
int replicate_debug_async_mark_pause = 0;   /* exported by the .syms */
/* -D replicate.async_behind_pause=MS: the thread that makes an
 * asynchronous leg fall behind waits MS milliseconds after taking it
 * out of the receiving legs, before it starts dropping (holding
 * v->lock, as it does between the two): the window in which no
 * catch-up may make the leg syncing again.  For tests only
 * (test-async-behind-resume.sh).
 */
int replicate_debug_async_behind_pause = 0; /* exported by the .syms */

/* Mark [offset, offset+count) in the leg's bitmap. */
void
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
void
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
void
pull_ahead (struct async_leg *aq, const char *why, uint64_t offset,
            uint32_t count)
{
  struct aentry *dropped = fall_behind (aq, why);
  char name[160];

  if (dropped)
    nbdkit_debug ("%s: %s", leg_name (aq->l, name, sizeof name), why);
  end_behind_marking (aq, dropped, offset, count);
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
