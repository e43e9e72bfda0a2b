/* SPDX-License-Identifier: BSD-3-Clause */
/* Resync: bring a stale leg up to date while clients keep writing.
 *
 * A resync copies the chunks set in the target slot's bitmap (all of
 * them for a full resync) from an uptodate source over LANES pairs of
 * libnbd connections of its own, so resync traffic never queues behind
 * client requests on the shared handles.  COPIERS threads share each
 * lane, each copying one run (up to RUN_BYTES) at a time, so a lane
 * has several runs in flight; a run costs three round trips whatever
 * its extents (copy.c: block status, the data extents read at once,
 * every write and zero sent at once), so LANES x COPIERS runs keep
 * about as many requests in flight as nbdcopy's 4 x 64.  Each run is
 * copied under its chunk lock, from the first look at the source (its
 * block status) to the last write to the target, so no copy ever
 * overwrites a newer client write (invariant 5); runs never overlap
 * (the cursor hands each chunk out once per pass), so the copiers
 * never wait for each other there.  Where the source says zero the
 * target gets write-zeroes and nothing is read, so a sparse volume
 * rebuilds in proportion to its data.
 *
 * Order of events:
 *   1. the target is marked inconsistent (its superblock), gets a slot
 *      if it has none, and for a full resync its bitmap is all set and,
 *      once its superblock holds the generation it is to count from,
 *      its slot's bm_gen is that generation; the bitmap is written
 *      (every page, under the new bm_gen) before any superblock records
 *      it (metaio_defer_bm_gen), then the generation is bumped;
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
 * Rate: resync-rate caps the bytes read and written (zeroes written
 * where the source is sparse are free); while clients are doing I/O it
 * yields down to resync-min-rate.  The rate is looked at again every
 * 50 ms, so a change, or a stop, takes effect at once.  A source that
 * fails is failed and another one taken; so is a source that stops
 * being uptodate for any other reason (a failed client write, nbdrep
 * fail or remove): copy_run looks at its state under the run's lock
 * before reading and after writing, so no run is counted as copied
 * from a source that may have missed a write to it.  A target that
 * fails ends the resync (its bitmap and bm_gen stay, the monitor
 * retries).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "state.h"
#include "conn.h"
#include "poller.h"
#include "leg.h"
#include "ioreq.h"
#include "member.h"
#include "resync.h"
#include "backup.h"
#include "copy.h"
#include "metaio.h"
#include "al.h"
#include "async.h"
#include "random.h"
#include "slots.h"
#include "cleanup.h"
#include "array.h"

#define LANES 4
#define COPIERS 4               /* threads per lane */
#define RUN_BYTES (1024 * 1024)
#define CHECKPOINT_BYTES (256 * 1024 * 1024)
#define CHECKPOINT_NS (2000000000ULL)

/* -D replicate.checkpoint_pause=MS: a checkpoint waits MS milliseconds
 * between its flush of the target and the clearing of the copied runs,
 * the window in which a failure of the target must keep its bits
 * (clear_copied).  For tests only (test-safety-checkpoint-fail.sh).
 */
int replicate_debug_checkpoint_pause = 0;   /* exported by the .syms */

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
#define BUSY_NS (250000000ULL)

/* A run copied but not yet flushed on the target. */
struct run {
  uint64_t first, last;         /* chunks */
};

struct resync {
  struct volume *v;
  struct leg *target;
  struct bitmap *bm;
  bool full;
  pthread_t thread;
  _Atomic bool cancel;
  _Atomic bool finished;
  bool receiving;               /* the target received writes (step 2) */

  pthread_mutex_t lock;         /* everything below */
  uint64_t cursor;              /* next chunk to look at */
  struct leg *source;
  bool source_failed;
  bool target_failed;
  struct run *copied;           /* runs to clear at the next checkpoint */
  size_t nr_copied, cap_copied;
  uint64_t since_checkpoint;
  uint64_t last_checkpoint_ns;
  uint64_t next_slot_ns;        /* rate limiting: next run may start */
  uint64_t seen_client_requests;
  uint64_t busy_until_ns;

  struct conn *src_conns[LANES], *dst_conns[LANES];

  uint64_t start_ns;
  _Atomic uint64_t done_bytes, copied_bytes, zeroed_bytes, total_bytes;
};

/* Chunks per run. */
static uint64_t
run_chunks (struct volume *v)
{
  return v->cfg.chunk >= RUN_BYTES ? 1 : RUN_BYTES / v->cfg.chunk;
}

/* Bytes of volume in chunks [first, last]. */
static uint64_t
run_bytes (struct volume *v, uint64_t first, uint64_t last)
{
  uint64_t start = first * v->cfg.chunk;
  uint64_t end = (last + 1) * v->cfg.chunk;

  return (end > v->size ? v->size : end) - start;
}

/* Take the next run of set bits from the cursor: at most run_chunks
 * long and not across a RUN_BYTES boundary.  The cursor only moves
 * forward, so no chunk is copied twice in a pass even though bits are
 * cleared only at checkpoints.  rs->lock held.  Returns false when the
 * pass is over.
 */
static bool
next_run (struct resync *rs, struct run *run)
{
  uint64_t first = bitmap_next_set (rs->bm, rs->cursor);
  uint64_t max = run_chunks (rs->v), last = first;

  if (first >= rs->bm->nr_bits)
    return false;
  while (last + 1 < rs->bm->nr_bits && last + 1 - first < max &&
         (last + 1) % max != 0 && bitmap_test (rs->bm, last + 1))
    last++;
  run->first = first;
  run->last = last;
  rs->cursor = last + 1;
  return true;
}

/* Sleep a short while (at most RATE_SLICE_NS, less if due sooner). */
#define RATE_SLICE_NS 50000000ULL
static void
nap (uint64_t ns)
{
  if (ns > RATE_SLICE_NS)
    ns = RATE_SLICE_NS;
  nanosleep (&(struct timespec) { .tv_nsec = (long) ns }, NULL);
}

/* Should the lanes stop? */
static bool
must_stop (struct resync *rs)
{
  return atomic_load (&rs->cancel) || atomic_load (&rs->v->stopping) ||
    atomic_load (&rs->target->state) != LEG_SYNCING;
}

/* The rate allowed now: the cap, or the floor while clients are busy.
 * rs->lock held.  0 = unlimited.
 */
static uint64_t
allowed_rate (struct resync *rs, uint64_t now)
{
  struct volume *v = rs->v;
  uint64_t reqs = atomic_load_explicit (&v->client_requests,
                                        memory_order_relaxed);
  uint64_t cap = atomic_load (&v->resync_rate);
  uint64_t floor = atomic_load (&v->resync_min_rate);

  if (reqs != rs->seen_client_requests) {
    rs->seen_client_requests = reqs;
    rs->busy_until_ns = now + BUSY_NS;
  }
  if (now < rs->busy_until_ns && floor > 0 && (cap == 0 || floor < cap))
    return floor;
  return cap;
}

/* Wait until the rate allows another run, then reserve the time a
 * full run takes at the current rate (*reserved_ns), so lanes start
 * one after another instead of all at once.  charge_copy settles the
 * reservation with what the run really copied.  The rate is looked at
 * again every RATE_SLICE_NS, so a change (nbdrep set, clients starting
 * or stopping) or a stop takes effect at once.  Returns -1 if the
 * resync must stop.
 */
static int
wait_for_rate (struct resync *rs, uint64_t *reserved_ns)
{
  for (;;) {
    uint64_t now = now_ns (), rate, due;

    if (must_stop (rs))
      return -1;
    pthread_mutex_lock (&rs->lock);
    rate = allowed_rate (rs, now);
    due = rs->next_slot_ns;
    *reserved_ns = rate ? RUN_BYTES * 1000000000ULL / rate : 0;
    if (rate == 0 || due <= now)
      rs->next_slot_ns = now + *reserved_ns;
    pthread_mutex_unlock (&rs->lock);
    if (rate == 0 || due <= now)
      return 0;
    nap (due - now);
  }
}

/* Settle a run's reservation: only the bytes actually copied count
 * (zeroes written where the source is sparse cost nothing), at the
 * rate allowed now.
 */
static void
charge_copy (struct resync *rs, uint64_t bytes, uint64_t reserved_ns)
{
  uint64_t rate;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rs->lock);

  rate = allowed_rate (rs, now_ns ());
  rs->next_slot_ns -= reserved_ns < rs->next_slot_ns
    ? reserved_ns : rs->next_slot_ns;
  if (rate != 0)
    rs->next_slot_ns += bytes * 1000000000 / rate;
}

/* Remember a copied run until the next checkpoint. */
static int
add_copied (struct resync *rs, const struct run *run, uint64_t bytes)
{
  struct run *p = array_reserve_one (rs->copied, rs->nr_copied,
                                     &rs->cap_copied, sizeof *p, 256);

  if (p == NULL)
    return -1;
  rs->copied = p;
  rs->copied[rs->nr_copied++] = *run;
  rs->since_checkpoint += bytes;
  return 0;
}

/* Is it time for a checkpoint?  rs->lock held. */
static bool
checkpoint_due (struct resync *rs)
{
  return rs->since_checkpoint >= CHECKPOINT_BYTES ||
    (rs->nr_copied > 0 && now_ns () - rs->last_checkpoint_ns >= CHECKPOINT_NS);
}

/* Clear copied runs from the target's bitmap, unless the target has
 * stopped syncing: its failure (published under v->lock) makes writes
 * mark its bitmap and ORs the hot extents into it, and none of those
 * bits may be cleared after that.
 */
static void
clear_copied (struct resync *rs, const struct run *runs, size_t nr)
{
  size_t i;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rs->v->lock);

  if (atomic_load (&rs->target->state) != LEG_SYNCING)
    return;
  for (i = 0; i < nr; ++i)
    bitmap_clear_range (rs->bm, runs[i].first, runs[i].last);
}

/* Flush the target, then clear the runs that were copied before the
 * flush and write the bitmap.  Returns -1 if the target failed.
 */
static int
checkpoint (struct resync *rs)
{
  struct volume *v = rs->v;
  struct leg_cmd flush = { .op = OP_FLUSH };
  struct run *runs;
  size_t nr;
  int e;

  pthread_mutex_lock (&rs->lock);
  runs = rs->copied;
  nr = rs->nr_copied;
  rs->copied = NULL;
  rs->nr_copied = rs->cap_copied = 0;
  rs->since_checkpoint = 0;
  rs->last_checkpoint_ns = now_ns ();
  pthread_mutex_unlock (&rs->lock);

  e = ioreq_sync_io (rs->target, &flush);
  if (e != 0) {
    free (runs);
    member_fail_leg (v, rs->target, EPOCH_ANY,
                     "flush during resync failed: %s",
                     strerror (e));
    return -1;
  }
  debug_pause (replicate_debug_checkpoint_pause, "resync checkpoint",
               "before clearing", "checkpoint_pause");
  clear_copied (rs, runs, nr);
  free (runs);
  if (v->metadata)
    metaio_persist_bitmaps (v);
  return 0;
}

/* Is the source still uptodate?  If not, the lanes stop taking runs
 * and a new source is picked; the caller keeps the run's bits set, so
 * it is copied again from the new source.
 */
static bool
source_still_uptodate (struct resync *rs)
{
  if (atomic_load (&rs->source->state) == LEG_UPTODATE)
    return true;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rs->lock);
  rs->source_failed = true;
  return false;
}

/* Copy one run under its chunk lock.  Returns 0, or -1 after failing
 * the source or the target, or when the source stopped being uptodate.
 *
 * The source is looked at under the lock, before the first read and
 * after the last write: a client write to the run that the source
 * failed (or missed, being failed already) has ended before we hold
 * the lock, with the source's state changed, so a source found
 * uptodate at both looks held every write to the run while we copied
 * it (DESIGN.md section 13).  A run copied from a source found failed
 * at the second look is not counted: it is copied again.
 */
static int
copy_run (struct resync *rs, unsigned lane, const struct run *run,
          uint64_t reserved_ns, void *buf)
{
  struct volume *v = rs->v;
  uint64_t start = run->first * v->cfg.chunk;
  uint64_t len = run_bytes (v, run->first, run->last), off;
  struct endpoint src = { rs->source, rs->src_conns[lane] };
  struct endpoint dst = { rs->target, rs->dst_conns[lane] };
  struct range_hold hold;
  struct copy_result cr = { 0 };
  bool source_left;
  int r = 0;

  if (rangelock_lock (v->rl, &hold, start, len) == -1)
    return -1;
  source_left = !source_still_uptodate (rs);
  for (off = start; off < start + len && r == 0 && !source_left;
       off += COPY_MAX) {
    uint64_t n = start + len - off < COPY_MAX ? start + len - off : COPY_MAX;
    r = copy_range (v, &src, &dst, 1, off, (uint32_t) n, buf, &cr);
  }
  if (r == 0 && !source_left)
    source_left = !source_still_uptodate (rs);
  rangelock_unlock (v->rl, &hold);
  atomic_fetch_add (&rs->copied_bytes, cr.data);
  atomic_fetch_add (&rs->zeroed_bytes, cr.zero);
  charge_copy (rs, cr.data, reserved_ns);
  if (source_left)
    return -1;
  if (r == 0)
    return 0;
  if (cr.failed == 0) {
    pthread_mutex_lock (&rs->lock);
    rs->source_failed = true;
    pthread_mutex_unlock (&rs->lock);
    member_fail_leg (v, src.leg, EPOCH_ANY, "read during resync failed: %s",
                     strerror (cr.err));
  }
  else {
    pthread_mutex_lock (&rs->lock);
    rs->target_failed = true;
    pthread_mutex_unlock (&rs->lock);
    member_fail_leg (v, dst.leg, EPOCH_ANY, "write during resync failed: %s",
                     strerror (cr.err));
  }
  return -1;
}

struct lane_arg {
  struct resync *rs;
  unsigned lane;
};

/* The buffer a copier needs: a run, at most COPY_MAX (copy_run copies
 * longer runs, of one big chunk, in COPY_MAX pieces).
 */
static size_t
copy_buf_size (struct volume *v)
{
  uint64_t run = run_chunks (v) * v->cfg.chunk;

  return run < COPY_MAX ? run : COPY_MAX;
}

/* A copier: take runs and copy them until the pass ends or something
 * fails.
 */
static void *
lane_thread (void *arg)
{
  struct lane_arg *la = arg;
  struct resync *rs = la->rs;
  CLEANUP_FREE void *buf = NULL;

  if (posix_memalign (&buf, 4096, copy_buf_size (rs->v)) != 0)
    return NULL;
  for (;;) {
    struct run run;
    uint64_t bytes, reserved_ns;
    bool due;

    if (wait_for_rate (rs, &reserved_ns) == -1)
      break;
    pthread_mutex_lock (&rs->lock);
    if (rs->source_failed || rs->target_failed || must_stop (rs) ||
        !next_run (rs, &run)) {
      pthread_mutex_unlock (&rs->lock);
      break;
    }
    bytes = run_bytes (rs->v, run.first, run.last);
    pthread_mutex_unlock (&rs->lock);

    if (copy_run (rs, la->lane, &run, reserved_ns, buf) == -1)
      break;
    atomic_fetch_add (&rs->done_bytes, bytes);

    pthread_mutex_lock (&rs->lock);
    if (add_copied (rs, &run, bytes) == -1)
      rs->target_failed = true;
    due = checkpoint_due (rs);
    pthread_mutex_unlock (&rs->lock);
    if (due && checkpoint (rs) == -1)
      break;
  }
  return NULL;
}

/* Close the private connections. */
static void
close_conns (struct resync *rs)
{
  unsigned i;

  for (i = 0; i < LANES; ++i) {
    conn_close (rs->src_conns[i]);
    conn_close (rs->dst_conns[i]);
    rs->src_conns[i] = rs->dst_conns[i] = NULL;
  }
}

/* Open LANES private connections to an NBD leg (none for the local
 * leg, which is called directly).
 */
static int
open_conns (struct leg *l, struct conn **conns)
{
  char err[256];
  unsigned i;

  if (l->local)
    return 0;
  for (i = 0; i < LANES; ++i) {
    conns[i] = conn_connect (l, l->v->cfg.timeout, NULL, err, sizeof err);
    if (conns[i] == NULL || poller_attach (conns[i], l->v->poller) == -1) {
      leg_set_error (l, "resync connection: %s", err);
      return -1;
    }
  }
  return 0;
}

/* Choose an uptodate source other than the target and connect to it. */
static int
pick_source (struct resync *rs)
{
  struct volume *v = rs->v;
  uint16_t up = MB_UPTODATE (membership_load (v)) &
    ~(1u << rs->target->index);
  unsigned i;

  for (i = 0; i < LANES; ++i) {
    conn_close (rs->src_conns[i]);
    rs->src_conns[i] = NULL;
  }
  rs->source = NULL;
  if (up == 0)
    return -1;
  /* The local leg is the cheapest source; else the lowest index. */
  rs->source = &v->legs[__builtin_ctz (up)];
  rs->source_failed = false;
  return open_conns (rs->source, rs->src_conns);
}

/* One pass over the bitmap with COPIERS threads on each of LANES lanes. */
static void
run_pass (struct resync *rs)
{
  pthread_t th[LANES * COPIERS];
  struct lane_arg args[LANES * COPIERS];
  unsigned i, started = 0;

  rs->cursor = 0;
  for (i = 0; i < LANES * COPIERS; ++i) {
    args[i] = (struct lane_arg) { rs, i % LANES };
    if (pthread_create (&th[i], NULL, lane_thread, &args[i]) == 0)
      started++;
    else
      break;
  }
  for (i = 0; i < started; ++i)
    pthread_join (th[i], NULL);
}

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

/* Step 1a (change_lock held): a slot, the bitmap, and the inconsistent
 * flag on the target itself, with the generation its slot's bitmap is
 * to count from for a full resync (the new bm_gen, set by
 * new_bm_gen once the target holds it).
 */
static int
claim_target (struct resync *rs)
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
  int r;

  pthread_mutex_lock (&v->change_lock);
  r = claim_target (rs);
  pthread_mutex_unlock (&v->change_lock);
  if (r == -1 || !v->metadata)
    return r;
  if (rs->target->async && async_write_sb (rs->target->aq) != 0) {
    leg_set_error (rs->target, "cannot mark the leg inconsistent");
    return -1;
  }
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

  if (checkpoint (rs) == -1)
    return -1;
  if (async_drain (l->aq) == -1)
    return -1;
  pthread_mutex_lock (&v->change_lock);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    if (l->state == LEG_SYNCING)
      l->inconsistent = false;
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

  if (checkpoint (rs) == -1)
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

/* The resync thread. */
static void *
resync_thread (void *arg)
{
  struct resync *rs = arg;
  struct volume *v = rs->v;
  char name[160];
  bool done = false;

  leg_name (rs->target, name, sizeof name);
  if (open_conns (rs->target, rs->dst_conns) == -1 ||
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

  while (!must_stop (rs) && bitmap_next_set (rs->bm, 0) < rs->bm->nr_bits) {
    if (rs->source == NULL || rs->source_failed) {
      if (pick_source (rs) == -1) {
        nbdkit_debug ("%s: no source for the resync", name);
        break;
      }
    }
    run_pass (rs);
    if (rs->target_failed || checkpoint (rs) == -1)
      break;
  }
  if (!must_stop (rs) && bitmap_next_set (rs->bm, 0) >= rs->bm->nr_bits &&
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
  close_conns (rs);
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
  close_conns (rs);
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
