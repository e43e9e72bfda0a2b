/* SPDX-License-Identifier: BSD-3-Clause */
/* Resync: bring a stale leg up to date while clients keep writing.
 *
 * A resync makes its target receive client writes, then copies what
 * its bitmap names from an uptodate source (resync-copy.c: lanes,
 * runs under their chunk locks, rate, checkpoints), then publishes it
 * as uptodate.  This file is its steps and its thread.
 *
 * Order of events:
 *   1. the target is marked inconsistent (its superblock), gets a slot
 *      if it has none, and for a full resync its bitmap is all set and,
 *      once its superblock holds the generation it is to count from,
 *      its slot's bm_gen is that generation; the bitmap is written
 *      (every page, under the new bm_gen) before any superblock records
 *      it (metaio_defer_bm_gen), then the generation is bumped.  Once
 *      the target's new superblock is written, and before its bitmap,
 *      it is read back from the target and from every other leg, so
 *      that one disk reached by two URIs is refused as it joins
 *      (same_storage: synchronous legs under change_lock, asynchronous
 *      ones without it, as no I/O to an asynchronous leg is made under
 *      change_lock);
 *   2. it starts receiving client writes (membership published, which
 *      waits until every write that did not go to it has marked its
 *      bitmap);
 *   3. the copy; every CHECKPOINT_BYTES (or seconds) the target is
 *      flushed and only then are the copied runs cleared from the
 *      bitmap and the bitmap written: an interrupted resync resumes
 *      where it stopped, never past what the target has made durable;
 *   4. the end: the target is flushed, every absent slot's bitmap is
 *      written to every uptodate leg and to the target, its
 *      inconsistent flag is cleared and the generation is bumped with
 *      it as a member.
 *
 * A source that fails or stops being uptodate is replaced
 * (resync-copy.c); a target that fails ends the resync (its bitmap and
 * bm_gen stay, the monitor retries).
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "state.h"
#include "leg.h"
#include "member.h"
#include "resync.h"
#include "backup.h"
#include "metaio.h"
#include "al.h"
#include "async.h"
#include "random.h"
#include "slots.h"
#include "resync-int.h"
#include "cleanup.h"
#include "thread-name.h"

/* -D replicate.finish_pause=MS: the end of a resync waits MS
 * milliseconds between writing every bitmap page to its target and
 * publishing the target as uptodate, the window in which a page written
 * meanwhile must still reach it (metaio_persist_bitmaps writes to the
 * syncing legs too).  For tests only (test-safety-join-bitmap.sh).
 */
int replicate_debug_finish_pause = 0;       /* exported by the .syms */

/* -D replicate.claim_pause=MS: a full resync waits MS milliseconds
 * between giving its target's slot a new bm_gen and writing the slot's
 * bitmap pages under it, the window in which another superblock write
 * (a generation bump) must not record that bm_gen (metaio.c).  For
 * tests only (test-safety-bmgen.sh).
 */
int replicate_debug_claim_pause = 0;        /* exported by the .syms */

/* -D replicate.resume_pause=MS: a resync waits MS milliseconds before
 * its target starts receiving writes (step 2), its bitmap and metadata
 * prepared: for an asynchronous target, a catch-up about to start.
 * For tests only (test-async-late-queue.sh).
 */
int replicate_debug_resume_pause = 0;       /* exported by the .syms */
/* A free slot, else the changed-block tracker's (the next backup then
 * reads everything), else an orphaned one (slots.c: its leg, gone, is
 * rebuilt fully if it comes back), else -1.  change_lock held.
 */
static int
free_slot (struct volume *v)
{
  unsigned s;
  int t;

  for (s = 0; s < v->cfg.max_legs; ++s)
    if (!(v->sb.slots[s].flags & SLOT_ASSIGNED))
      return (int) s;
  t = backup_yield_tracker_slot (v);
  return t >= 0 ? t : slots_recycle_orphan (v);
}

/* Give the target a slot if it has none (a new member).  change_lock
 * held.  Returns -1 if every slot is taken.
 */
static int
assign_slot (struct volume *v, struct leg *l)
{
  int s;

  if (l->slot >= 0)
    return 0;
  s = free_slot (v);
  if (s < 0) {
    leg_set_error (l, "no free metadata slot (max-legs=%u)",
                   v->cfg.max_legs);
    return -1;
  }
  uuid_generate (v->sb.slots[s].uuid);
  /* Atomic: write_bitmaps reads the flags without change_lock. */
  __atomic_store_n (&v->sb.slots[s].flags, SLOT_ASSIGNED, __ATOMIC_RELAXED);
  /* Under v->lock, as status reads them. */
  pthread_mutex_lock (&v->lock);
  memcpy (l->uuid, v->sb.slots[s].uuid, 16);
  l->slot = s;
  pthread_mutex_unlock (&v->lock);
  return 0;
}

/* Is leg o one whose superblock a target's claim must read back: open,
 * not failed or removed, with an identity?  Its UUID is read under
 * v->lock, as the asynchronous round runs without change_lock.
 */
static bool
may_share_storage (struct volume *v, struct leg *o)
{
  const enum leg_state s = atomic_load (&o->state);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  return atomic_load (&o->open) && s != LEG_FAILED && s != LEG_REMOVED &&
    !uuid_is_zero (o->uuid);
}

/* Is the target the storage of another present leg, reached by another
 * URI (one disk given twice: two servers of one file, two names of one
 * host)?  A blank disk carries no identity for the monitor to compare
 * (monitor.c, same_storage_as), so the target's superblock, just
 * written with its own leg UUID, is read back from it and from every
 * other open leg that may be written to: one storage holds one newest
 * superblock, so either the target's does not read back or another
 * leg's now carries the target's UUID (a leg with no identity yet, a
 * blank one waiting for its own claim, is left to that claim: the
 * first claim wins).  Returns that other leg (the
 * first one found; if the target's own superblock names none, NULL
 * with *unknown set when it reads back as no leg's), else NULL.
 *
 * In two rounds, as the legs may be read: the synchronous legs with
 * change_lock held (async false), so no other target's claim writes in
 * between; the asynchronous ones without it (async true), since no I/O
 * to an asynchronous leg is made under change_lock (async-sender.c: a
 * slow or stuck one must not hold up the volume's membership changes,
 * hence its client writes).  The target's own superblock is read in
 * the round of its kind.
 */
static struct leg *
same_storage (struct volume *v, struct leg *l, bool async, bool *unknown)
{
  struct superblock sb;
  enum meta_status st;
  char err[160];
  size_t i;

  *unknown = false;
  if (l->async == async) {
    if (metaio_read_sb (l, &sb, &st, err, sizeof err) == -1)
      return NULL;              /* its failure is the copy's business */
    if (st == META_OK && memcmp (sb.leg_uuid, l->uuid, 16) != 0) {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      struct leg *o = slots_leg_of_uuid (v, l, sb.leg_uuid);
      *unknown = o == NULL;
      return o;
    }
  }
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *o = &v->legs[i];
    if (o == l || o->async != async || !may_share_storage (v, o))
      continue;
    if (metaio_read_sb (o, &sb, &st, err, sizeof err) == 0 &&
        st == META_OK && memcmp (sb.leg_uuid, l->uuid, 16) == 0)
      return o;
  }
  return NULL;
}

/* The target turned out to be another leg's storage: take back the
 * slot it was just given, and give the other leg its own superblock
 * again (if it has one: a leg not yet claimed has none to lose).  The
 * target then fails its resync; judged again by the monitor it carries
 * the other leg's identity and is refused by name.  change_lock held.
 * Returns true if the other leg is asynchronous and its superblock is
 * for the caller to write, with async_write_sb once change_lock is
 * released.
 */
static bool
refuse_alias (struct volume *v, struct leg *l, struct leg *o, bool fresh)
{
  char a[160], b[160];

  nbdkit_error ("%s and %s are the same storage reached by two URIs: "
                "%s is refused (never written to again); remove it",
                leg_name (l, a, sizeof a), leg_name (o, b, sizeof b), a);
  leg_set_error (l, "the same storage as leg %u", (unsigned) o->index);
  /* The slot first: the superblock written next is built from the
   * slot table, and on the other leg's disk (an uptodate leg's, the
   * copy that survives a restart) a slot still assigned to the
   * refused leg would stay assigned for ever, an absent orphan that
   * every write marks.
   */
  if (fresh) {
    __atomic_store_n (&v->sb.slots[l->slot].flags, 0, __ATOMIC_RELAXED);
    memset (v->sb.slots[l->slot].uuid, 0, 16);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    memset (l->uuid, 0, sizeof l->uuid);
    l->slot = -1;
  }
  if (o->slot < 0 || uuid_is_zero (o->uuid))
    return false;
  if (o->aq)
    return true;
  if (metaio_write_sb (v, 1u << o->index, NULL) != 0)
    nbdkit_error ("%s: cannot restore its superblock", b);
  return false;
}

/* Give an asynchronous leg whose disk a refused target turned out to be
 * its own superblock back (refuse_alias), change_lock not held.
 */
static void
restore_async_sb (struct leg *o)
{
  char b[160];

  if (async_write_sb (o->aq) != 0)
    nbdkit_error ("%s: cannot restore its superblock",
                  leg_name (o, b, sizeof b));
}

/* The target's superblock is written: is it another synchronous leg's
 * storage (same_storage, its first round)?  fresh: its slot was given
 * by this claim.  Returns 0, or -1 (refused, or its superblock does
 * not read back).  An asynchronous leg whose superblock is to be
 * written again (refuse_alias) is left in *restore, for the caller
 * once change_lock is released.  change_lock held.
 */
static int
check_alias (struct volume *v, struct leg *l, bool fresh,
             struct leg **restore)
{
  struct leg *o;
  bool unknown;

  if ((o = same_storage (v, l, false, &unknown)) != NULL) {
    if (refuse_alias (v, l, o, fresh))
      *restore = o;
    return -1;
  }
  if (unknown) {
    leg_set_error (l, "its superblock does not read back");
    return -1;
  }
  return 0;
}

/* The second round (same_storage): is the target an asynchronous
 * leg's storage, or, asynchronous itself, does its own superblock read
 * back?  change_lock not held; taken to refuse, if the target still has
 * the identity that was looked for.  Returns 0 or -1.
 */
static int
check_alias_async (struct volume *v, struct leg *l, bool fresh)
{
  uint8_t uuid[16];
  struct leg *o;
  bool unknown, write_o = false, same;

  memcpy (uuid, l->uuid, 16);
  o = same_storage (v, l, true, &unknown);
  if (o == NULL && !unknown)
    return 0;
  pthread_mutex_lock (&v->change_lock);
  same = memcmp (l->uuid, uuid, 16) == 0;
  if (same && o)
    write_o = refuse_alias (v, l, o, fresh);
  else if (same)
    leg_set_error (l, "its superblock does not read back");
  pthread_mutex_unlock (&v->change_lock);
  if (write_o)
    restore_async_sb (o);
  return -1;
}

/* Step 1a (change_lock held): a slot, the bitmap, and the inconsistent
 * flag on the target itself, with the generation its slot's bitmap is
 * to count from for a full resync (the new bm_gen, set by
 * new_bm_gen once the target holds it).  fresh: the target has no slot
 * yet.  An asynchronous leg whose superblock is to be given back
 * (check_alias) is left in *restore.
 */
static int
claim_target (struct resync *rs, bool fresh, struct leg **restore)
{
  struct volume *v = rs->v;
  struct leg *l = rs->target;

  if (!v->metadata) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);   /* as status reads it */
    if (l->slot < 0)
      l->slot = (int) l->index;
  }
  else if (assign_slot (v, l) == -1 || metaio_alloc_leg (v, l) == -1)
    return -1;
  if (member_alloc_bitmap (v, (unsigned) l->slot) == -1)
    return -1;
  rs->bm = v->bitmaps[l->slot];
  if (rs->full)
    bitmap_set_all (rs->bm);
  if (!v->metadata)
    return 0;
  if (rs->full) {
    l->gen = v->sb.gen;
    /* Atomic: write_bitmaps reads the flags without change_lock. */
    __atomic_fetch_and (&v->sb.slots[l->slot].flags,
                        ~(uint32_t) SLOT_MEMBER, __ATOMIC_RELAXED);
  }
  l->inconsistent = true;
  /* An asynchronous leg's superblock is written without change_lock
   * (prepare_target): it may be slow.
   */
  if (!l->async && metaio_write_sb (v, 1u << l->index, NULL) != 0) {
    leg_set_error (l, "cannot mark the leg inconsistent");
    return -1;
  }
  if (!l->async)
    return check_alias (v, l, fresh, restore);
  return 0;
}

/* Step 1b of a full resync, once the target's superblock holds l->gen
 * (inconsistent): its slot's bitmap counts from l->gen.  Not before:
 * pages written under the new bm_gen read as empty under the old one,
 * which the target would still hold.  The change is recorded in
 * superblocks only once every page is written under it (metaio.c):
 * until then the target, holding a generation its slot's recorded
 * bm_gen is not, is rebuilt fully after a crash.
 */
static void
new_bm_gen (struct resync *rs)
{
  struct volume *v = rs->v;
  struct leg *l = rs->target;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);

  metaio_defer_bm_gen (v, (unsigned) l->slot, l->gen);
}

/* Step 1: claim the target, give its slot a new bm_gen (full), write
 * its bitmap, then record its slot, bm_gen and bitmap on the uptodate
 * legs (a generation bump).
 */
static int
prepare_target (struct resync *rs)
{
  struct volume *v = rs->v;
  const bool fresh = rs->target->slot < 0;
  struct leg *restore = NULL;
  int r;

  pthread_mutex_lock (&v->change_lock);
  r = claim_target (rs, fresh, &restore);
  pthread_mutex_unlock (&v->change_lock);
  if (r == -1 || !v->metadata)
    goto out;
  if (rs->target->async && async_write_sb (rs->target->aq) != 0) {
    leg_set_error (rs->target, "cannot mark the leg inconsistent");
    return -1;
  }
  if (rs->target->async) {
    pthread_mutex_lock (&v->change_lock);
    r = check_alias (v, rs->target, fresh, &restore);
    pthread_mutex_unlock (&v->change_lock);
    if (r == -1)
      goto out;
  }
  if (check_alias_async (v, rs->target, fresh) == -1)
    return -1;
  if (rs->full) {
    new_bm_gen (rs);
    debug_pause (replicate_debug_claim_pause, "resync claim",
                 "before writing the target's bitmap", "claim_pause");
  }
  if (metaio_persist_bitmaps (v) == -1)
    return -1;
  member_change_begin (v);
  pthread_mutex_lock (&v->change_lock);
  r = metaio_bump (v);
  pthread_mutex_unlock (&v->change_lock);
  member_change_end (v);
  return r;
 out:
  if (restore)
    restore_async_sb (restore);
  return r;
}

/* Step 2: the target receives writes from now on (an asynchronous
 * one through its queue, which starts queueing again in the same hold
 * of v->lock, once no writer is marking for it: async-behind.c).
 */
static void
start_receiving_writes (struct resync *rs)
{
  struct volume *v = rs->v;
  struct leg *l = rs->target;

  debug_pause (replicate_debug_resume_pause, "resync",
               "before the target receives writes", "resume_pause");
  rs->receiving = true;
  for (;;) {
    if (l->aq)
      async_wait_marking (l->aq);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    if (l->aq == NULL || async_resume (l->aq)) {
      member_set_state (v, l, LEG_SYNCING, rs->full ? "full resync started"
                     : "incremental resync started");
      return;
    }
  }
}

/* Step 4 for an asynchronous target, which never becomes uptodate:
 * once everything queued for it up to now is flushed (so that it holds
 * the volume as at some flush again), its inconsistent flag is cleared
 * on its superblock, with the generation its slot's bitmap counts from.
 * It stays syncing: replicating.  Returns -1 if it failed.
 */
static int
finish_async (struct resync *rs)
{
  struct volume *v = rs->v;
  struct leg *l = rs->target;
  int r = 0;

  if (resync_checkpoint (rs) == -1)
    return -1;
  if (async_drain (l->aq) == -1)
    return -1;
  pthread_mutex_lock (&v->change_lock);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    if (l->state == LEG_SYNCING) {
      l->inconsistent = false;
      l->source_errors = 0;
    }
    else
      r = -1;
  }
  pthread_mutex_unlock (&v->change_lock);
  /* Not under change_lock: the leg may be slow (async-sender.c). */
  if (r == 0 && v->metadata && async_write_sb (l->aq) != 0)
    r = -1;
  if (r == -1 && atomic_load (&l->state) == LEG_SYNCING)
    member_fail_leg (v, l, EPOCH_ANY, "cannot clear the inconsistent flag");
  return r;
}

/* Step 4: record the target as uptodate.  Returns -1 if it failed. */
static int
finish (struct resync *rs)
{
  struct volume *v = rs->v;
  struct leg *l = rs->target;
  uint16_t bit = 1u << l->index;
  int r = 0;

  if (resync_checkpoint (rs) == -1)
    return -1;
  if (v->metadata) {
    if (metaio_persist_bitmaps (v) == -1)
      return -1;
    if (metaio_write_all_bitmaps (v, bit) != 0) {
      member_fail_leg (v, l, EPOCH_ANY, "cannot write the bitmaps");
      return -1;
    }
    debug_pause (replicate_debug_finish_pause, "resync finish",
                 "before publishing the target", "finish_pause");
  }
  member_change_begin (v);
  pthread_mutex_lock (&v->change_lock);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    if (l->state == LEG_SYNCING) {
      member_set_state (v, l, LEG_UPTODATE, "resync done");
      l->inconsistent = false;
      l->source_errors = 0;
    }
    else
      r = -1;
  }
  if (r == 0 && v->metadata && metaio_bump (v) == -1)
    r = -1;
  pthread_mutex_unlock (&v->change_lock);
  member_change_end (v);
  return r;
}

/* Bytes of volume under the set bits (the last chunk may be short). */
static uint64_t
bytes_to_copy (struct resync *rs)
{
  struct volume *v = rs->v;
  uint64_t n = bitmap_count (rs->bm) * (uint64_t) v->cfg.chunk;
  uint64_t last = rs->bm->nr_bits - 1;

  if (bitmap_test (rs->bm, last))
    n -= (last + 1) * v->cfg.chunk - v->size;
  return n;
}

/* Remember how the resync went, for status. */
static void
record_summary (struct resync *rs)
{
  struct leg *l = rs->target;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rs->v->lock);

  l->last_resync.valid = true;
  l->last_resync.full = rs->full;
  l->last_resync.bytes = atomic_load (&rs->copied_bytes);
  l->last_resync.zeroed = atomic_load (&rs->zeroed_bytes);
  l->last_resync.seconds = (double) (now_ns () - rs->start_ns) / 1e9;
}

/* A resync that ended without making its target uptodate: the target
 * is failed (a syncing one properly, with its bitmap kept), so the
 * monitor reconnects it with backoff and starts again from its
 * metadata.
 */
static void
give_up (struct resync *rs)
{
  struct volume *v = rs->v;
  struct leg *l = rs->target;

  if (atomic_load (&l->state) == LEG_SYNCING) {
    member_fail_leg (v, l, EPOCH_ANY, "resync interrupted%s",
                     rs->source == NULL ? ": no uptodate source" : "");
    return;
  }
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  /* An asynchronous target that fell behind while catching up is the
   * monitor's again: it catches up anew once idle (async-behind.c).
   */
  if (rs->receiving && l->async)
    return;
  if (atomic_load (&l->state) == LEG_STALE) {
    member_set_state (v, l, LEG_FAILED, "the resync could not start");
    leg_back_off_locked (l);
  }
}

/* Is any bit of the target's bitmap still set? */
static bool
bits_left (struct resync *rs)
{
  return bitmap_next_set (rs->bm, 0) < rs->bm->nr_bits;
}

/* The resync thread. */
static void *
resync_thread (void *arg)
{
  struct resync *rs = arg;
  struct volume *v = rs->v;
  char name[160];
  bool done = false;

  leg_name (rs->target, name, sizeof name);
  if (resync_open_conns (rs->target, rs->dst_conns) == -1 ||
      prepare_target (rs) == -1)
    goto done;
  start_receiving_writes (rs);
  atomic_store (&rs->total_bytes, bytes_to_copy (rs));
  if (v->al && !rs->target->async &&
      al_write_to (v->al, 1u << rs->target->index) != 0) {
    member_fail_leg (v, rs->target, EPOCH_ANY, "activity log write failed");
    goto done;
  }
  nbdkit_debug ("%s: %s resync of %" PRIu64 " bytes started", name,
                rs->full ? "full" : "incremental",
                atomic_load (&rs->total_bytes));

  while (!resync_must_stop (rs) && bits_left (rs)) {
    if (rs->source == NULL || rs->source_failed) {
      if (resync_pick_source (rs) == -1) {
        nbdkit_debug ("%s: no source for the resync", name);
        break;
      }
    }
    resync_run_pass (rs);
    if (rs->target_failed || resync_checkpoint (rs) == -1)
      break;
  }
  if (!resync_must_stop (rs) && !bits_left (rs) &&
      (rs->target->async ? finish_async (rs) : finish (rs)) == 0) {
    done = true;
    record_summary (rs);
    nbdkit_debug ("%s: resync done, %" PRIu64 " bytes copied in %.1fs",
                  name, rs->target->last_resync.bytes,
                  rs->target->last_resync.seconds);
  }
 done:
  if (rs->target->aq)
    async_caught_up (rs->target->aq);
  resync_close_conns (rs);
  if (!done && !atomic_load (&v->stopping) && !atomic_load (&rs->cancel))
    give_up (rs);
  atomic_store (&rs->finished, true);
  member_wake_monitor (v);
  return NULL;
}

/* Start a resync of a stale leg (see resync.h).  If another thread
 * already started one (the monitor and the control socket both may),
 * there is nothing to do.
 */
int
resync_start (struct volume *v, struct leg *target, bool full)
{
  struct resync *rs = calloc (1, sizeof *rs);
  int r;

  if (rs == NULL)
    return -1;
  rs->v = v;
  rs->target = target;
  rs->full = full;
  rs->start_ns = rs->last_checkpoint_ns = now_ns ();
  /* Client requests made before the resync starts do not make the
   * clients busy during it (from 0, the first BUSY_NS of every resync
   * ran at resync-min-rate).
   */
  rs->seen_client_requests = atomic_load (&v->client_requests);
  pthread_mutex_init (&rs->lock, NULL);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    if (target->resync != NULL || target->held ||
        atomic_load (&target->state) != LEG_STALE) {
      pthread_mutex_destroy (&rs->lock);
      free (rs);
      return 0;
    }
    target->resync = rs;
    r = pthread_create (&rs->thread, NULL, resync_thread, rs);
    if (r != 0) {
      target->resync = NULL;
      pthread_mutex_destroy (&rs->lock);
      free (rs);
      return -1;
    }
    thread_name (rs->thread, "rep-resync%u", target->index);
  }
  return 0;
}

/* Ask the resync to stop. */
void
resync_cancel (struct resync *rs)
{
  atomic_store (&rs->cancel, true);
}

/* Has the thread finished? */
bool
resync_finished (struct resync *rs)
{
  return atomic_load (&rs->finished);
}

/* Join and free a resync. */
void
resync_reap (struct resync *rs)
{
  pthread_join (rs->thread, NULL);
  resync_close_conns (rs);
  free (rs->copied);
  pthread_mutex_destroy (&rs->lock);
  free (rs);
}

/* Progress for status. */
void
resync_get_progress (struct resync *rs, struct resync_progress *p)
{
  double secs = (double) (now_ns () - rs->start_ns) / 1e9;

  p->full = rs->full;
  p->done = atomic_load (&rs->done_bytes);
  p->total = atomic_load (&rs->total_bytes);
  if (p->done > p->total)
    p->total = p->done;
  p->rate = secs > 0 ? (double) p->done / secs : 0;
  p->eta = p->rate > 0 ? (double) (p->total - p->done) / p->rate : -1;
}
