/* SPDX-License-Identifier: BSD-3-Clause */
/* The copy of a resync (step 3 of resync.c's note): the chunks set in
 * the target slot's bitmap (all of them for a full resync) copied from
 * an uptodate source over LANES pairs of libnbd connections of its own,
 * so resync traffic never queues behind client requests on the shared
 * handles.  COPIERS threads share each lane, each copying one run (up
 * to RUN_BYTES) at a time, so a lane has several runs in flight; a run
 * costs three round trips whatever its extents (copy.c: block status,
 * the data extents read at once, every write and zero sent at once),
 * so LANES x COPIERS runs keep about as many requests in flight as
 * nbdcopy's 4 x 64.  Each run is copied under its chunk lock, from the
 * first look at the source (its block status) to the last write to the
 * target, so no copy ever overwrites a newer client write (invariant
 * 5); runs never overlap (the cursor hands each chunk out once per
 * pass), so the copiers never wait for each other there.  Where the
 * source says zero the target gets write-zeroes and nothing is read, so
 * a sparse volume rebuilds in proportion to its data.
 *
 * Checkpoints: every CHECKPOINT_BYTES (or seconds) the target is
 * flushed and only then are the copied runs cleared from the bitmap and
 * the bitmap written: an interrupted resync resumes where it stopped,
 * never past what the target has made durable.
 *
 * Lanes only to a leg whose server advertises multi-conn: the NBD
 * protocol lets any other server cache writes per connection, so that
 * a flush on one connection need not make durable what another wrote
 * (test-safety-resync-lanes-flush.sh) and a read on one connection need
 * not see what another wrote (test-safety-resync-source-conns.sh: a
 * copy read over a lane missed a client write to the source, and
 * overwrote the target, which had it, with older data).  A leg without
 * multi-conn has one shared connection, and the copy goes over it.
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
 * fails ends the copy.
 *
 * Locks: rs->lock (the cursor, the copied runs, the rate) is a leaf; a
 * run's chunk lock is held across its copy; v->lock only to clear
 * copied runs (clear_copied) and none across I/O but the chunk lock.
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
#include "copy.h"
#include "metaio.h"
#include "resync-int.h"
#include "cleanup.h"
#include "array.h"
#include "thread-name.h"

/* -D replicate.checkpoint_pause=MS: a checkpoint waits MS milliseconds
 * between its flush of the target and the clearing of the copied runs,
 * the window in which a failure of the target must keep its bits
 * (clear_copied).  For tests only (test-safety-checkpoint-fail.sh).
 */
int replicate_debug_checkpoint_pause = 0;   /* exported by the .syms */

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

/* Should the copy stop (see resync-int.h)? */
bool
resync_must_stop (struct resync *rs)
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

    if (resync_must_stop (rs))
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
 * flush and write the bitmap (see resync-int.h).  Its server
 * advertises multi-conn if the copies went over lanes: the flush on
 * its shared connection covers them.
 */
int
resync_checkpoint (struct resync *rs)
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
  if (cr.failed == 0 && !state_errno_is_disconnect (cr.err) &&
      (MB_UPTODATE (membership_load (v)) & ~(1u << src.leg->index)) == 0) {
    /* A media error of the last uptodate leg: it stays, as a client
     * read of the range does not fail it (io_read_failed); failing it
     * would fail the volume, and the resync starting again once it is
     * back would fail it again.  The target cannot be completed now:
     * it is failed (its bitmap kept) and tried again later, each time
     * twice as late (member.c, retry_delay_ns).
     */
    pthread_mutex_lock (&rs->lock);
    rs->target_failed = true;
    pthread_mutex_unlock (&rs->lock);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      dst.leg->source_errors++;         /* retried later each time */
    }
    member_fail_leg (v, dst.leg, EPOCH_ANY,
                     "read of the resync source leg %u (the last uptodate "
                     "leg) failed: %s", src.leg->index, strerror (cr.err));
  }
  else if (cr.failed == 0) {
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
    if (rs->source_failed || rs->target_failed || resync_must_stop (rs) ||
        !next_run (rs, &run)) {
      pthread_mutex_unlock (&rs->lock);
      /* No run taken: its slot given back, or each copier still
       * waiting for the rate would wait out a slot for nothing, and
       * the pass end LANES x COPIERS slots late.
       */
      charge_copy (rs, 0, reserved_ns);
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
    if (due && resync_checkpoint (rs) == -1)
      break;
  }
  return NULL;
}

/* Close the private connections. */
void
resync_close_conns (struct resync *rs)
{
  unsigned i;

  for (i = 0; i < LANES; ++i) {
    conn_close (rs->src_conns[i]);
    conn_close (rs->dst_conns[i]);
    rs->src_conns[i] = rs->dst_conns[i] = NULL;
  }
}

/* Open LANES private connections to an NBD leg (none for the local
 * leg, which is called directly, and none to a server without
 * multi-conn, whose shared connection the copy uses: see the note at
 * the top).
 */
int
resync_open_conns (struct leg *l, struct conn **conns)
{
  char err[256];
  unsigned i;

  if (l->local || !l->caps.can_multi_conn)
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
int
resync_pick_source (struct resync *rs)
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
  return resync_open_conns (rs->source, rs->src_conns);
}

/* One pass over the bitmap with COPIERS threads on each of LANES lanes. */
void
resync_run_pass (struct resync *rs)
{
  pthread_t th[LANES * COPIERS];
  struct lane_arg args[LANES * COPIERS];
  unsigned i, started = 0;

  rs->cursor = 0;
  for (i = 0; i < LANES * COPIERS; ++i) {
    args[i] = (struct lane_arg) { rs, i % LANES };
    if (pthread_create (&th[i], NULL, lane_thread, &args[i]) != 0)
      break;
    thread_name (th[i], "rep-copy%u", rs->target->index);
    started++;
  }
  for (i = 0; i < started; ++i)
    pthread_join (th[i], NULL);
}
