/* SPDX-License-Identifier: BSD-3-Clause */
/* The sender of an asynchronous leg: the thread of its own that takes
 * the leg's queue to the leg, epoch by epoch, flushes it, writes its
 * recovery point and drops everything when the leg fails; and its
 * start and stop (async_start, async_stop).  The queue as a whole
 * (what client writers do, crash consistency) is described in
 * async.c's note, falling behind and the marking protocol in
 * async-behind.c's; the structures these files use are in
 * async-int.h.
 *
 * Epochs.  The sender takes the writes of one epoch in batches of up
 * to WINDOW (take_batch), sending a batch at once; a write that
 * overlaps one already in the batch starts the next batch, so
 * overlapping writes land in queue order, and a FUA write (sent with
 * FUA) is the last of its batch, so what was queued after it goes
 * only once the leg has made it durable.  At a marker, once every
 * write of the epoch has been answered, it flushes the leg, and only
 * then starts on the next epoch: the crash consistency of async.c's
 * note rests on this.  Once a flush is done, the writes it made
 * durable let their activity-log references go (epoch_flushed_locked).
 *
 * Sending.  The sender gathers a batch for up to GATHER_NS (or WINDOW
 * entries, or until a marker or a FUA write, which end a batch, is
 * queued) before taking it, and writers wake it only when it sleeps
 * with nothing queued (asleep), so a client writing one request at a
 * time costs one wake-up per GATHER_NS.  The batch's commands leave
 * corked, in one system call per connection.  The leg's connections
 * have a poller of their own (leg_own_poller, made with the queue),
 * whose thread reads the leg's replies: no client request's issuer
 * reads them or waits behind them, however late a distant leg answers
 * (poller.c).  The sender waits for its batches, flushes and
 * superblock writes on that poller (ioreq_init_for_leg,
 * ioreq_sync_io), as a follower.  A write's data goes back to
 * the ring once the leg has answered it; its entry stays, unflushed,
 * until its epoch is flushed.  A sender holding unflushed writes with
 * nothing more to send flushes them after IDLE_FLUSH_NS without a
 * marker (wait_for_work_locked): a leg that stops receiving writes
 * gets no more markers, and a flush inside an epoch changes nothing
 * the leg holds.  A leg that started dropping has what it was sent
 * flushed at once (flush_due_locked); once the sender is idle it tells
 * the monitor, which may start the catch-up (async_may_catch_up).
 * Batches sent while the leg was the bottleneck measure how fast it
 * takes writes (measure_leg_rate_locked, read by keeps_pace_locked).
 *
 * Recovery point.  After a flushed epoch, at most once per
 * RPO_INTERVAL_NS, the sender writes the leg's superblock with the
 * time of the newest write it holds flushed (write_recovery_point;
 * start.c's failover reads it).  The superblock is built under
 * change_lock and written under aq->sb_lock alone (async_write_sb,
 * which a resync calls too for the same leg).
 *
 * A leg that fails (an error or a timeout of the sender's requests)
 * goes through member_fail_leg, which ORs the hot extents into its
 * bitmap; the sender then drops what is queued and unflushed the same
 * way, and waits until the leg receives writes again (async_resume).
 * It starts dropping only under v->lock with the leg out of the
 * receiving legs, as every way into dropping does (async-behind.c's
 * note).
 *
 * Stopping (async_stop) waits up to a timeout for the queue to be
 * flushed, then stops the thread; what is left keeps its activity-log
 * extents hot, so that the next start resyncs them.
 *
 * Lock order: v->lock -> aq->lock (the monitor and status look at the
 * queue under v->lock), and aq->lock is a leaf: the sender drops it
 * around every call that takes another lock (member_fail_leg,
 * member_wake_monitor) and around all I/O.  The sender takes no lock
 * across I/O but aq->sb_lock, across a superblock write; aq->sb_lock
 * -> v->change_lock (async_write_sb), and neither is taken with
 * aq->lock held.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "ioreq.h"
#include "member.h"
#include "al.h"
#include "async.h"
#include "async-int.h"
#include "metaio.h"
#include "wire.h"
#include "cleanup.h"
#include "thread-name.h"

#define GATHER_NS 4000000ULL    /* a batch waits this long for more
                                   (the leg's lag grows by as much; a
                                   batch's system calls and wake-ups
                                   are shared by the writes of 4 ms) */
#define IDLE_FLUSH_NS 200000000ULL      /* sent writes wait this long
                                           for their epoch's marker */
#define DRAIN_POLL_NS 100000000ULL
#define RPO_INTERVAL_NS 1000000000ULL   /* recovery point written at most
                                           once a second */

/* -D replicate.sender_pause=MS: the sender waits MS milliseconds, once,
 * at the end of the first round that leaves sent writes unflushed,
 * before it looks for more work (or finds itself stopped): the window
 * in which nbdrep remove may stop it holding them.  For tests only
 * (test-async-remove-unflushed.sh).
 */
int replicate_debug_sender_pause = 0;       /* exported by the .syms */

/* Take the queue's first entry.  aq->lock held. */
static struct aentry *
queue_pop_locked (struct async_leg *aq)
{
  struct aentry *e = aq->queue.head;

  aq->queue.head = e->next;
  if (aq->queue.head == NULL)
    aq->queue.tail = NULL;
  aq->nr_queued--;
  e->next = NULL;
  return e;
}

/* Do two entries overlap? */
static bool
overlap (const struct aentry *a, const struct aentry *b)
{
  return a->offset < b->offset + b->count && b->offset < a->offset + a->count;
}

/* Take the next batch from the queue: up to WINDOW writes of the
 * current epoch, stopping before one that overlaps the batch.  *marker
 * is set if the epoch ends after it (its marker is freed here).
 * aq->lock held.  Returns the number taken.
 */
static size_t
take_batch (struct async_leg *aq, bool *marker)
{
  struct aentry **batch = aq->batch;
  size_t n = 0, i;

  *marker = false;
  while (n < WINDOW && aq->queue.head) {
    struct aentry *e = aq->queue.head;
    if (e->op == OP_FLUSH) {
      queue_pop_locked (aq);
      aq->used -= entry_cost (e);
      entries_put_locked (aq, e);
      *marker = true;
      break;
    }
    for (i = 0; i < n; ++i)
      if (overlap (batch[i], e))
        return n;
    batch[n++] = queue_pop_locked (aq);
    aq->nr_batch = n;
    /* A FUA write is durable once acknowledged: what is queued after
     * it (its client may have waited for it) is sent only once the
     * leg has made it durable too (sent with FUA, send_batch).
     */
    if (e->flags & ENGINE_FLAG_FUA)
      break;
  }
  return n;
}

/* Send a batch to the leg and wait.  The batch's commands are corked
 * (wire.c): they leave in one system call per connection, not one
 * each, and the leg's server reads them in one.  Returns 0 or the
 * first errno.
 */
static int
send_batch (struct async_leg *aq, struct aentry **batch, size_t n)
{
  struct wire_cork cork;
  int err = 0;
  size_t i;

  wire_cork (&cork);
  for (i = 0; i < n; ++i) {
    struct leg_cmd cmd = {
      .op = batch[i]->op, .count = batch[i]->count,
      .offset = batch[i]->offset, .flags = batch[i]->flags,
      .buf = batch[i]->op == OP_WRITE ? batch[i]->data : NULL,
    };
    ioreq_init_for_leg (&aq->reqs[i], aq->l);
    ioreq_submit (&aq->reqs[i], aq->l, &cmd);
  }
  wire_uncork (&cork);
  for (i = 0; i < n; ++i) {
    int e;
    ioreq_wait_fua (&aq->reqs[i]);
    e = ioreq_leg_error (&aq->reqs[i], aq->l->index);
    if (err == 0)
      err = e;
    ioreq_destroy (&aq->reqs[i]);
  }
  return err;
}

/* Flush the leg.  Returns 0 or an errno. */
static int
flush_leg (struct async_leg *aq)
{
  static const struct leg_cmd flush = { .op = OP_FLUSH };

  return ioreq_sync_io (aq->l, &flush);
}

/* The batch was answered: its data may go (the ranges stay held until
 * the flush).  aq->lock held.
 */
static void
batch_answered_locked (struct async_leg *aq, struct aentry **batch, size_t n)
{
  size_t i;

  for (i = 0; i < n; ++i) {
    struct aentry *e = batch[i];
    aq->used -= entry_cost (e);
    release_data_locked (aq, e);
    alist_push (&aq->unflushed, e);
  }
  aq->nr_batch = 0;
  pthread_cond_broadcast (&aq->room);
}

/* When the oldest write still queued was queued, or 0 if none is: a
 * marker's time is no write's (an idle leg whose queue holds only a
 * marker lags nothing).  aq->lock held.
 */
static uint64_t
oldest_queued_write_ns_locked (const struct async_leg *aq)
{
  const struct aentry *e;

  for (e = aq->queue.head; e; e = e->next)
    if (e->op != OP_FLUSH)
      return e->enq_ns;
  return 0;
}

/* The epoch was flushed: release its ranges.  aq->lock held, dropped
 * around the release.
 */
static void
epoch_flushed_locked (struct async_leg *aq)
{
  struct aentry *e = alist_take (&aq->unflushed), *p;
  struct volume *v = aq->v;

  for (p = e; p; p = p->next) {
    aq->lag_bytes -= p->count;
    aq->flushed_seq = p->seq;
    aq->newest_flushed_ns = p->enq_ns;
  }
  aq->oldest_unflushed_ns = oldest_queued_write_ns_locked (aq);
  pthread_mutex_unlock (&aq->lock);
  for (p = e; p; p = p->next)
    if (v->al && !p->released)
      al_release (v->al, p->offset, p->count);
  pthread_mutex_lock (&aq->lock);
  entries_put_locked (aq, e);
  pthread_cond_broadcast (&aq->room);
}

/* Write the leg's superblock (its recovery point, or the end of a
 * catch-up).  No I/O to the leg is made under change_lock, which every
 * membership change of the volume needs (a slow or stuck asynchronous
 * leg must not hold those up): the superblock is built under it, then
 * written under aq->sb_lock alone, so that the sender's recovery
 * points and a resync's superblock writes for the leg (prepare_target,
 * finish_async) are never in flight together.  Returns 0 or an errno.
 */
int
async_write_sb (struct async_leg *aq)
{
  struct volume *v = aq->v;
  struct leg *l = aq->l;
  struct leg_cmd cmd = {
    .op = OP_WRITE, .buf = aq->sb_buf, .count = META_BLOCK,
    .flags = ENGINE_FLAG_FUA,
  };
  uint64_t seq;
  int e;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&aq->sb_lock);

  pthread_mutex_lock (&v->change_lock);
  seq = metaio_encode_sb (v, l, aq->sb_buf);
  pthread_mutex_unlock (&v->change_lock);
  cmd.offset = md_sb_offset (l->caps.size, seq % 2);
  e = ioreq_sync_io (l, &cmd);
  if (e == 0) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    if (l->sb_seq < seq)
      l->sb_seq = seq;
    if (atomic_load (&l->sb_acked) < seq)
      atomic_store (&l->sb_acked, seq);
  }
  return e;
}

/* Write the leg's recovery point (its superblock's mtime, see
 * start.c's failover) if a second has passed since the last time.
 * Returns 0 or an errno.
 */
static int
write_recovery_point (struct async_leg *aq, uint64_t newest_ns)
{
  struct volume *v = aq->v;
  uint64_t now = now_ns (), age;

  if (!v->metadata || newest_ns == 0 ||
      now - aq->rpo_written_ns < RPO_INTERVAL_NS)
    return 0;
  aq->rpo_written_ns = now;
  age = now > newest_ns ? (now - newest_ns) / 1000000000ULL : 0;
  pthread_mutex_lock (&v->change_lock);
  aq->l->rpo_time = (uint64_t) time (NULL) - age;
  pthread_mutex_unlock (&v->change_lock);
  return async_write_sb (aq);
}

/* The leg failed under the sender: record it (before anything is
 * dropped, so that no writer finds the queue dropping while the leg is
 * still syncing), then drop everything.  Dropping starts under v->lock
 * with the leg out of the receiving legs (async-behind.c's note): if a
 * catch-up made it syncing again since (member_fail_leg found it out
 * already, stale), it is failed again first.  aq->lock held, dropped
 * around the work.
 */
static void
sender_failed_locked (struct async_leg *aq, struct aentry **batch, size_t n,
                      int err)
{
  struct volume *v = aq->v;
  struct aentry *dropped, *unflushed;
  size_t i;

  pthread_mutex_unlock (&aq->lock);
  for (;;) {
    member_fail_leg (v, aq->l, EPOCH_ANY, "asynchronous write failed: %s",
                     strerror (err));
    pthread_mutex_lock (&v->lock);
    if (atomic_load (&aq->l->state) != LEG_SYNCING)
      break;
    pthread_mutex_unlock (&v->lock);
  }
  pthread_mutex_lock (&aq->lock);
  for (i = 0; i < n; ++i) {
    aq->used -= entry_cost (batch[i]);
    release_data_locked (aq, batch[i]);
  }
  aq->nr_batch = 0;
  dropped = aq->dropping ? NULL : start_dropping_locked (aq);
  aq->dropping = true;
  unflushed = alist_take (&aq->unflushed);
  aq->lag_bytes = 0;
  aq->oldest_unflushed_ns = 0;
  aq->behind_since_ns = 0;
  aq->marking++;
  pthread_mutex_unlock (&aq->lock);
  pthread_mutex_unlock (&v->lock);

  for (i = 0; i < n; ++i) {
    mark_and_release (aq, batch[i]);
    free (batch[i]);
  }
  drop_list (aq, unflushed);
  drop_list (aq, dropped);
  pthread_mutex_lock (&aq->lock);
  if (--aq->marking == 0)
    pthread_cond_broadcast (&aq->room);
}

/* Should the sender flush now: an epoch ended, or the leg dropped out
 * with sent writes still unflushed?  aq->lock held.
 */
static bool
flush_due_locked (struct async_leg *aq, bool marker)
{
  return aq->unflushed.head != NULL &&
    (marker || aq->flush_now || (aq->dropping && aq->queue.head == NULL));
}

/* Wait for work.  A sender holding sent writes unflushed waits at
 * most IDLE_FLUSH_NS, then flushes them (flush_now) though no marker
 * came: a leg that stopped receiving writes (nbdrep fail, a failure
 * elsewhere) gets no more markers, and until they are flushed it is
 * not idle, so its catch-up could never start.  A flush between two
 * markers changes nothing the leg holds, it only makes it durable
 * sooner.  aq->lock held.
 */
static void
wait_for_work_locked (struct async_leg *aq)
{
  const struct timespec ts = deadline_after (CLOCK_MONOTONIC, IDLE_FLUSH_NS);

  aq->asleep = true;
  if (aq->unflushed.head == NULL)
    pthread_cond_wait (&aq->work, &aq->lock);
  else if (pthread_cond_timedwait (&aq->work, &aq->lock, &ts) == ETIMEDOUT &&
           aq->queue.head == NULL)
    aq->flush_now = true;
  aq->asleep = false;
}

/* A batch sent while more was queued behind it, or while the buffer
 * was half full or more, or answered after the leg fell behind (the
 * leg, not the volume, was the bottleneck: the batch on its way when
 * the buffer filled is measured even if it was taken alone, so that a
 * leg that fell behind always has a rate before its catch-up is
 * considered) tells how fast the leg takes writes: an average of such
 * batches' bytes per second (keeps_pace_locked).  aq->lock held.
 */
static void
measure_leg_rate_locked (struct async_leg *aq, struct aentry **batch,
                         size_t n, uint64_t ns)
{
  uint64_t bytes = 0, rate;
  size_t i;

  for (i = 0; i < n; ++i)
    if (batch[i]->op == OP_WRITE)
      bytes += batch[i]->count;
  if (bytes == 0 || ns == 0)
    return;
  rate = bytes * 1000000000ULL / ns;
  aq->leg_rate = leg_rate_known_locked (aq) ?
    (aq->leg_rate * 7 + rate) / 8 : rate;
  aq->leg_rate_ns = now_ns ();
}

/* Should the sender wait for more before it takes a batch: fewer than
 * WINDOW entries are queued, the oldest for less than GATHER_NS, and
 * none of them ends a batch (a marker or a FUA write: what comes after
 * it could not join)?  A client writing one request at a time then
 * costs the sender one wake-up and one batch per GATHER_NS, not one
 * per write, and its writers do not wake the sender (wake_sender_
 * locked).  aq->lock held.
 */
static bool
gathering_locked (const struct async_leg *aq)
{
  return aq->queue.head != NULL && !aq->dropping && !aq->stop &&
    aq->nr_queued < WINDOW && aq->ender_seq < aq->queue.head->seq &&
    now_ns () < aq->queue.head->enq_ns + GATHER_NS;
}

/* Wait until the oldest queued entry is GATHER_NS old, or a batch is
 * full, or the sender is stopped or woken.  aq->lock held.
 */
static void
gather_locked (struct async_leg *aq)
{
  const struct timespec ts = ns_to_timespec (aq->queue.head->enq_ns + GATHER_NS);

  pthread_cond_timedwait (&aq->work, &aq->lock, &ts);
}

/* The pause of -D replicate.sender_pause, once.  aq->lock held,
 * dropped across it.
 */
static void
pause_once_locked (struct async_leg *aq)
{
  static atomic_bool paused;

  if (replicate_debug_sender_pause <= 0 || atomic_exchange (&paused, true))
    return;
  pthread_mutex_unlock (&aq->lock);
  debug_pause (replicate_debug_sender_pause, "sender",
               "with sent writes unflushed", "sender_pause");
  pthread_mutex_lock (&aq->lock);
}

/* The sender thread (see the design note). */
static void *
sender (void *arg)
{
  struct async_leg *aq = arg;
  struct aentry **batch = aq->batch;

  pthread_mutex_lock (&aq->lock);
  while (!aq->stop) {
    bool marker, backed_up;
    uint64_t sent_ns;
    size_t n;
    int err = 0;

    if (gathering_locked (aq)) {
      gather_locked (aq);
      continue;
    }
    n = take_batch (aq, &marker);
    if (n == 0 && !flush_due_locked (aq, marker)) {
      if (aq->dropping && aq->unflushed.head == NULL && !aq->idle_told) {
        /* Idle: catching up may start.  The monitor takes v->lock,
         * which comes before aq->lock.
         */
        aq->idle_told = true;
        pthread_mutex_unlock (&aq->lock);
        member_wake_monitor (aq->v);
        pthread_mutex_lock (&aq->lock);
        continue;
      }
      if (!marker)
        wait_for_work_locked (aq);
      continue;
    }
    aq->busy = true;
    backed_up = aq->queue.head != NULL ||
      aq->used >= aq->v->cfg.async_buffer / 2;
    pthread_mutex_unlock (&aq->lock);
    sent_ns = now_ns ();
    if (n > 0)
      err = send_batch (aq, batch, n);
    pthread_mutex_lock (&aq->lock);
    if (err == 0 && (backed_up || aq->dropping))
      measure_leg_rate_locked (aq, batch, n, now_ns () - sent_ns);
    if (err == 0)
      batch_answered_locked (aq, batch, n);
    if (err == 0 && flush_due_locked (aq, marker)) {
      aq->flush_now = false;
      pthread_mutex_unlock (&aq->lock);
      err = flush_leg (aq);
      pthread_mutex_lock (&aq->lock);
      if (err == 0) {
        epoch_flushed_locked (aq);
        pthread_mutex_unlock (&aq->lock);
        err = write_recovery_point (aq, aq->newest_flushed_ns);
        pthread_mutex_lock (&aq->lock);
      }
      n = 0;
    }
    if (err != 0)
      sender_failed_locked (aq, batch, n, err);
    aq->busy = false;
    pthread_cond_broadcast (&aq->room);
    if (aq->unflushed.head)
      pause_once_locked (aq);
  }
  pthread_mutex_unlock (&aq->lock);
  return NULL;
}

/* Start the sender thread. */
int
async_start (struct async_leg *aq)
{
  int r = pthread_create (&aq->thread, NULL, sender, aq);

  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  thread_name (aq->thread, "rep-async%u", aq->l->index);
  aq->running = true;
  return 0;
}

/* Wait up to timeout seconds for everything queued to be flushed (not
 * for a leg dropping already), then stop the sender.  What is left,
 * queued or sent and unflushed, keeps its activity-log extents hot
 * (a clean stop: the next start resyncs them), or with release lets
 * them go (a removed leg: no slot to mark, nothing to resync).
 */
static void
stop_sender (struct async_leg *aq, double timeout, bool release)
{
  uint64_t deadline = now_ns () + (uint64_t) (timeout * 1e9);
  struct aentry *e, *queued, *unflushed;

  if (!aq->running)
    return;
  pthread_mutex_lock (&aq->lock);
  while ((aq->queue.head || aq->unflushed.head || aq->busy) &&
         !aq->dropping && now_ns () < deadline) {
    const struct timespec ts = deadline_after (CLOCK_REALTIME, DRAIN_POLL_NS);

    pthread_cond_timedwait (&aq->room, &aq->lock, &ts);
  }
  aq->stop = true;
  pthread_cond_broadcast (&aq->work);
  pthread_cond_broadcast (&aq->room);
  pthread_mutex_unlock (&aq->lock);
  pthread_join (aq->thread, NULL);
  aq->running = false;
  pthread_mutex_lock (&aq->lock);
  for (e = aq->queue.head; e; e = e->next)
    release_data_locked (aq, e);
  queued = queue_take_all_locked (aq);
  unflushed = alist_take (&aq->unflushed);
  pthread_mutex_unlock (&aq->lock);
  if (release) {
    drop_list (aq, queued);
    drop_list (aq, unflushed);
    return;
  }
  /* Not flushed: their extents stay hot (never released), so the log
   * still names them when the engine stops.
   */
  free_list (queued);
  free_list (unflushed);
}

/* Stop the sender at a clean stop (see stop_sender). */
void
async_stop (struct async_leg *aq, double timeout)
{
  stop_sender (aq, timeout, false);
}

/* Stop the sender of a leg that nbdrep remove took out and closed.
 * Its requests fail at once from now on (leg_enter), so it drops what
 * it holds the way a failure does (sender_failed_locked: the
 * activity-log holds go back); sent writes waiting for their epoch's
 * flush are flushed now, which fails, rather than after IDLE_FLUSH_NS.
 * Then the thread stops, and the ring, which nothing is queued into
 * again (async_enqueue queues only while the leg is syncing), is let
 * go: a removed leg keeps neither a thread nor async-buffer bytes.
 */
void
async_retire (struct async_leg *aq, double timeout)
{
  assert (atomic_load (&aq->l->state) == LEG_REMOVED);
  pthread_mutex_lock (&aq->lock);
  if (aq->unflushed.head)
    aq->flush_now = true;
  pthread_cond_broadcast (&aq->work);
  pthread_mutex_unlock (&aq->lock);
  /* A sender that finds itself stopped before it failed (a leg
   * dropping already is not waited for) leaves what it holds to
   * stop_sender, which lets the activity-log extents go
   * (test-async-remove-unflushed.sh).
   */
  stop_sender (aq, timeout, true);
  pthread_mutex_lock (&aq->lock);
  assert (aq->ring.used == 0);
  bufring_destroy (&aq->ring);
  pthread_mutex_unlock (&aq->lock);
}
