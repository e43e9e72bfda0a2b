/* SPDX-License-Identifier: BSD-3-Clause */
/* The activity log (AL): which extents may have writes in flight or
 * writes not yet flushed, persisted on every leg that receives writes.
 *
 * After a controller crash, only the extents in the AL can differ
 * between the uptodate legs, and only they can hold writes an absent
 * leg's bitmap on disk does not show yet (DESIGN.md section 5).
 *
 * Per extent, one atomic word: HOT (in the persisted log), PENDING (in
 * the log being written), DIRTY (written since the cooler last looked)
 * and a reference count (writes in flight).  A write to a hot extent
 * takes its reference with one compare-and-swap and no lock: metadata
 * costs nothing once extents are hot.  A write that finds a cold extent
 * takes al->lock, adds its cold extents to the list (all of them or, if
 * the log has no room, none: it waits for the cooler), and waits for a
 * commit that contains them.  Commits are grouped: one writer becomes
 * the committer and writes the whole list once for everybody who
 * joined meanwhile, with FUA, to every leg receiving writes.
 *
 * Cooling (the background flusher, every AL_INTERVAL seconds or when
 * the log is 3/4 full; at 3/4 the asynchronous legs first let go of the
 * extents they hold, async.c): collect hot extents with no reference and clear
 * their DIRTY bit; flush every writing leg; write the absent slots'
 * dirty bitmap pages; then an extent that is still exactly HOT (no new
 * write began since: DIRTY still clear, no reference) leaves the log.
 * The smaller log is written at the next commit.
 *
 * A commit that every leg refuses alike with an error that is the
 * request's own (EINVAL, EPERM ... see io.c) fails no leg: its pending
 * extents become FAILED (out of the list) and the writes waiting for
 * them get that error, as the write itself would have.  A FAILED
 * extent is cold to everybody else; the last waiter lets go of it.
 *
 * HOT, PENDING and FAILED change only under al->lock.  The committer
 * role (al->committing) is held while writing; whoever holds it may
 * take change_lock (to fail a leg), so nobody holding change_lock may
 * wait for the role.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "state.h"
#include "ioreq.h"
#include "member.h"
#include "judge.h"
#include "al.h"
#include "metaio.h"
#include "async.h"
#include "cleanup.h"
#include "thread-name.h"

#define AL_HOT      (1u << 31)
#define AL_PENDING  (1u << 30)
#define AL_DIRTY    (1u << 29)
#define AL_FAILED   (1u << 28)
#define AL_REFS     (AL_FAILED - 1)

#define AL_INTERVAL 2           /* seconds between cooling passes */

/* -D replicate.cool_pause=MS: a cooling pass with candidates waits MS
 * milliseconds once the legs are flushed, before it writes the bitmap
 * pages and lets the extents go: a pass under way while a slot is
 * freed (slots.c), which must still write that slot's pages before
 * its extents leave the log.  For tests only
 * (test-meta-remove-crash.sh).
 */
int replicate_debug_cool_pause = 0;         /* exported by the .syms */

struct al {
  struct volume *v;
  unsigned shift;               /* log2 (al_extent) */
  uint64_t nr_extents;
  uint32_t capacity;
  _Atomic uint32_t *state;

  pthread_mutex_t lock;
  pthread_cond_t cond;          /* commit done, room made, role free */
  uint32_t *list;               /* hot and pending extents, unordered */
  uint32_t nr_list;
  uint32_t *sorted;             /* the committer's sorted copy */
  uint32_t *pending;            /* the committer's pending extents */
  uint32_t *cand;               /* the cooler's candidates */
  bool committing;
  int commit_err;               /* errno of the last refused commit */

  pthread_t thread;
  pthread_cond_t wake;          /* wakes the flusher */
  bool running, stop, want_cool;
  _Atomic uint64_t commits;
};

/* Create the activity log. */
struct al *
al_new (struct volume *v)
{
  struct al *al = calloc (1, sizeof *al);

  if (al == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  al->v = v;
  al->shift = (unsigned) __builtin_ctz (v->cfg.al_extent);
  al->nr_extents = v->layout.nr_al_extents;
  al->capacity = v->layout.al_extents;
  al->state = calloc (al->nr_extents, sizeof *al->state);
  al->list = calloc (al->capacity, sizeof *al->list);
  al->sorted = calloc (al->capacity, sizeof *al->sorted);
  al->pending = calloc (al->capacity, sizeof *al->pending);
  al->cand = calloc (al->capacity, sizeof *al->cand);
  if (!al->state || !al->list || !al->sorted || !al->pending || !al->cand) {
    nbdkit_error ("calloc: %m");
    al_free (al);
    return NULL;
  }
  pthread_mutex_init (&al->lock, NULL);
  pthread_cond_init (&al->cond, NULL);
  pthread_cond_init (&al->wake, NULL);
  return al;
}

/* Free the activity log (the flusher must be stopped). */
void
al_free (struct al *al)
{
  if (al == NULL)
    return;
  free (al->state);
  free (al->list);
  free (al->sorted);
  free (al->pending);
  free (al->cand);
  pthread_mutex_destroy (&al->lock);
  pthread_cond_destroy (&al->cond);
  pthread_cond_destroy (&al->wake);
  free (al);
}

/* Extents covered by [offset, offset+count). */
static void
extent_range (struct al *al, uint64_t offset, uint64_t count,
              uint64_t *first, uint64_t *last)
{
  *first = offset >> al->shift;
  *last = (offset + count - 1) >> al->shift;
}

/* Take a reference on a hot extent without the lock.  Returns false if
 * it is not hot.
 */
static bool
take_hot (struct al *al, uint64_t e)
{
  uint32_t w = atomic_load (&al->state[e]);

  while (w & AL_HOT)
    if (atomic_compare_exchange_weak (&al->state[e], &w,
                                      (w + 1) | AL_DIRTY))
      return true;
  return false;
}

/* The fast path: take every extent if all are hot, else none. */
static bool
take_all_hot (struct al *al, uint64_t first, uint64_t last)
{
  uint64_t e;

  for (e = first; e <= last; ++e)
    if (!take_hot (al, e)) {
      while (e-- > first)
        atomic_fetch_sub (&al->state[e], 1);
      return false;
    }
  return true;
}

/* How many extents of the range are neither hot nor pending. */
static uint32_t
count_cold (struct al *al, uint64_t first, uint64_t last)
{
  uint32_t n = 0;
  uint64_t e;

  for (e = first; e <= last; ++e)
    if (!(atomic_load (&al->state[e]) & (AL_HOT | AL_PENDING)))
      n++;
  return n;
}

/* Take every extent of the range under the lock: a reference on those
 * in the list, the cold ones added as pending.
 */
static void
take_locked (struct al *al, uint64_t first, uint64_t last)
{
  uint64_t e;

  for (e = first; e <= last; ++e) {
    uint32_t w = atomic_load (&al->state[e]);
    if (w & (AL_HOT | AL_PENDING)) {
      while (!atomic_compare_exchange_weak (&al->state[e], &w,
                                            (w + 1) | AL_DIRTY))
        ;
    }
    else {
      /* Cold, or FAILED with waiters still to let go: pending again
       * (those waiters then simply wait for this next commit).
       */
      atomic_store (&al->state[e], AL_PENDING | AL_DIRTY |
                    ((w & AL_REFS) + 1));
      al->list[al->nr_list++] = (uint32_t) e;
    }
  }
  if (al->nr_list * 4 >= al->capacity * 3) {
    al->want_cool = true;
    pthread_cond_signal (&al->wake);
  }
}

/* Did the commit of an extent of the range fail? */
static bool
any_failed (struct al *al, uint64_t first, uint64_t last)
{
  uint64_t e;

  for (e = first; e <= last; ++e)
    if (atomic_load (&al->state[e]) & AL_FAILED)
      return true;
  return false;
}

/* Let go of a range whose commit failed: drop our references; a FAILED
 * extent nobody holds any more is plain cold again.  Lock held.
 */
static void
drop_failed (struct al *al, uint64_t first, uint64_t last)
{
  uint64_t e;

  for (e = first; e <= last; ++e) {
    uint32_t w = atomic_fetch_sub (&al->state[e], 1) - 1;
    if ((w & AL_FAILED) && (w & AL_REFS) == 0)
      atomic_store (&al->state[e], 0);
  }
}

/* Is an extent of the range still waiting for a commit? */
static bool
any_pending (struct al *al, uint64_t first, uint64_t last)
{
  uint64_t e;

  for (e = first; e <= last; ++e)
    if (atomic_load (&al->state[e]) & AL_PENDING)
      return true;
  return false;
}

/* Order extent numbers. */
static int
compare_u32 (const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
  return x < y ? -1 : x > y;
}

/* Write the sorted list (nr extents) to legs with FUA.  Returns the
 * legs that failed, their errors in errs.  Only the holder of the
 * committer role.
 */
static uint16_t
write_log (struct al *al, uint16_t legs, uint32_t nr, int *errs,
           unsigned *epochs)
{
  struct volume *v = al->v;
  struct ioreq r;
  uint16_t failed = 0;
  unsigned i;

  ioreq_init (&r, v);
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    struct leg_cmd cmd = {
      .op = OP_WRITE, .buf = l->al_buf, .flags = ENGINE_FLAG_FUA,
      .count = (uint32_t) v->layout.al_bytes,
    };
    if (!(legs & (1u << i)))
      continue;
    l->al_seq++;
    al_encode (l->al_buf, al->capacity, l->al_seq, v->sb.volume_uuid,
               v->cfg.al_extent, al->sorted, nr);
    cmd.offset = md_al_offset (&v->layout, l->caps.size, l->al_seq % 2);
    ioreq_submit (&r, l, &cmd);
  }
  ioreq_wait_fua (&r);
  for (i = 0; i < v->nr_legs; ++i) {
    errs[i] = (legs & (1u << i)) ? ioreq_leg_error (&r, i) : 0;
    epochs[i] = r.epoch[i];
    if (errs[i] != 0)
      failed |= 1u << i;
    else if (legs & (1u << i))
      atomic_store (&v->legs[i].al_acked, v->legs[i].al_seq);
  }
  ioreq_destroy (&r);
  atomic_fetch_add (&al->commits, 1);
  return failed;
}

/* The error every leg in legs refused the log with alike, if it is a
 * refusal of the request rather than a broken leg (see io.c), else 0.
 */
static int
refused_alike (uint16_t legs, const int *errs)
{
  int common = 0;
  unsigned i;

  for (i = 0; i < MAX_LEGS; ++i) {
    if (!(legs & (1u << i)))
      continue;
    if (errs[i] == 0 || state_errno_fails_leg (errs[i]) ||
        (common && errs[i] != common))
      return 0;
    common = errs[i];
  }
  return common;
}

/* Fail the legs the activity log could not be written to. */
static void
fail_legs (struct volume *v, uint16_t legs, const int *errs,
           const unsigned *epochs)
{
  unsigned i;

  for (i = 0; i < v->nr_legs; ++i)
    if (legs & (1u << i))
      member_fail_leg (v, &v->legs[i], epochs[i],
                       "activity log write failed: %s", strerror (errs[i]));
}

/* Take the committer role, waiting for it.  Lock held. */
static void
take_role (struct al *al)
{
  while (al->committing)
    pthread_cond_wait (&al->cond, &al->lock);
  al->committing = true;
}

/* The pending extents of a commit: hot if it was written, FAILED and
 * out of the list if every leg refused it alike.  Lock held.
 */
static void
settle_pending (struct al *al, uint32_t nr_pending, int refused)
{
  uint32_t i, j;

  for (i = 0; i < nr_pending; ++i) {
    _Atomic uint32_t *st = &al->state[al->pending[i]];
    atomic_fetch_or (st, refused ? AL_FAILED : AL_HOT);
    atomic_fetch_and (st, ~AL_PENDING);
  }
  if (!refused)
    return;
  al->commit_err = refused;
  for (i = j = 0; i < al->nr_list; ++i)
    if (!(atomic_load (&al->state[al->list[i]]) & AL_FAILED))
      al->list[j++] = al->list[i];
  al->nr_list = j;
}

/* Commit the current list to legs (0 = every leg receiving writes).
 * Lock held; the role is taken here and the lock dropped while writing.
 * Afterwards the extents that were pending are hot (or failed).
 */
static void
commit_locked (struct al *al, uint16_t legs)
{
  uint32_t nr, nr_pending = 0, i;
  int errs[MAX_LEGS], refused;
  unsigned epochs[MAX_LEGS];
  uint16_t failed;

  take_role (al);
  nr = al->nr_list;
  memcpy (al->sorted, al->list, nr * sizeof *al->list);
  qsort (al->sorted, nr, sizeof *al->sorted, compare_u32);
  for (i = 0; i < nr; ++i)
    if (atomic_load (&al->state[al->sorted[i]]) & AL_PENDING)
      al->pending[nr_pending++] = al->sorted[i];

  pthread_mutex_unlock (&al->lock);
  if (legs == 0)
    legs = volume_sync_legs (al->v, MB_WRITING (membership_load (al->v)));
  failed = write_log (al, legs, nr, errs, epochs);
  refused = failed ? refused_alike (legs, errs) : 0;
  if (!refused)
    fail_legs (al->v, failed, errs, epochs);
  pthread_mutex_lock (&al->lock);

  settle_pending (al, nr_pending, refused);
  al->committing = false;
  pthread_cond_broadcast (&al->cond);
}

/* Make the range hot and take references (see the design note).
 * Returns 0, or the error every leg refused the log with (nothing is
 * then held).
 */
int
al_acquire (struct al *al, uint64_t offset, uint64_t count)
{
  uint64_t first, last;

  extent_range (al, offset, count, &first, &last);
  if (take_all_hot (al, first, last))
    return 0;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&al->lock);
  while (al->nr_list + count_cold (al, first, last) > al->capacity) {
    al->want_cool = true;
    pthread_cond_signal (&al->wake);
    pthread_cond_wait (&al->cond, &al->lock);
  }
  take_locked (al, first, last);
  while (any_pending (al, first, last)) {
    if (!al->committing)
      commit_locked (al, 0);
    else
      pthread_cond_wait (&al->cond, &al->lock);
  }
  if (any_failed (al, first, last)) {
    drop_failed (al, first, last);
    return al->commit_err;
  }
  return 0;
}

/* al_acquire without waiting: takes the extents only if every one is
 * hot already (no log write needed).  Returns true if taken.
 */
bool
al_try_acquire (struct al *al, uint64_t offset, uint64_t count)
{
  uint64_t first, last;

  extent_range (al, offset, count, &first, &last);
  return take_all_hot (al, first, last);
}

/* One more reference on extents the caller holds (they are hot, and
 * cannot cool while it holds them).
 */
void
al_hold (struct al *al, uint64_t offset, uint64_t count)
{
  uint64_t first, last, e;

  extent_range (al, offset, count, &first, &last);
  for (e = first; e <= last; ++e) {
    assert (atomic_load (&al->state[e]) & AL_HOT);
    atomic_fetch_add (&al->state[e], 1);
  }
}

/* Drop the references taken by al_acquire (or al_hold). */
void
al_release (struct al *al, uint64_t offset, uint64_t count)
{
  uint64_t first, last, e;

  extent_range (al, offset, count, &first, &last);
  for (e = first; e <= last; ++e)
    atomic_fetch_sub (&al->state[e], 1);
}

/* OR the chunks of every extent in the log into b. */
void
al_or_hot_into (struct al *al, struct bitmap *b)
{
  uint64_t per = al->v->cfg.al_extent / al->v->cfg.chunk;
  uint32_t i;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&al->lock);

  for (i = 0; i < al->nr_list; ++i)
    bitmap_set_range (b, al->list[i] * per, (al->list[i] + 1) * per - 1);
}

/* Write the current log to some legs (a leg that has just started to
 * receive writes).  Returns the legs that failed.
 */
uint16_t
al_write_to (struct al *al, uint16_t legs)
{
  int errs[MAX_LEGS];
  unsigned epochs[MAX_LEGS];
  uint16_t failed;
  uint32_t nr;

  pthread_mutex_lock (&al->lock);
  take_role (al);
  nr = al->nr_list;
  memcpy (al->sorted, al->list, nr * sizeof *al->list);
  qsort (al->sorted, nr, sizeof *al->sorted, compare_u32);
  pthread_mutex_unlock (&al->lock);

  failed = write_log (al, legs, nr, errs, epochs);

  pthread_mutex_lock (&al->lock);
  al->committing = false;
  pthread_cond_broadcast (&al->cond);
  pthread_mutex_unlock (&al->lock);
  return failed;
}

/* Collect idle hot extents as cooling candidates, clearing their DIRTY
 * bit.  Returns how many.
 */
static uint32_t
collect_candidates (struct al *al)
{
  uint32_t i, n = 0;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&al->lock);

  for (i = 0; i < al->nr_list; ++i) {
    uint32_t e = al->list[i];
    uint32_t w = atomic_load (&al->state[e]);
    if ((w & AL_HOT) && !(w & AL_PENDING) && (w & AL_REFS) == 0) {
      atomic_fetch_and (&al->state[e], ~AL_DIRTY);
      al->cand[n++] = e;
    }
  }
  return n;
}

/* Remove the candidates nobody wrote to since they were collected.
 * Lock held.  Returns how many left the log.
 */
static uint32_t
remove_idle (struct al *al, uint32_t nr_cand)
{
  uint32_t i, j, cooled = 0;

  for (i = 0; i < nr_cand; ++i) {
    uint32_t expected = AL_HOT;
    if (atomic_compare_exchange_strong (&al->state[al->cand[i]],
                                        &expected, 0))
      cooled++;
  }
  for (i = j = 0; i < al->nr_list; ++i)
    if (atomic_load (&al->state[al->list[i]]) != 0)
      al->list[j++] = al->list[i];
  al->nr_list = j;
  return cooled;
}

/* One cooling pass (see the design note).  Returns the extents still
 * in the log.
 */
uint64_t
al_cool (struct al *al)
{
  struct volume *v = al->v;
  uint32_t nr_cand = collect_candidates (al);
  int err;

  /* The engine's flush ends the asynchronous legs' epochs too, so that
   * their queued writes let go of the log even when clients never
   * flush; a log filling up with extents they hold makes them fall
   * behind (async_shed), their bitmap pages written below before those
   * extents cool.
   */
  if (al_nr_hot (al) * 4 >= al->capacity * 3)
    async_shed (v);
  async_cut_epochs (v);
  if (nr_cand > 0) {
    uint16_t sync = volume_sync_legs (v, MB_WRITING (membership_load (v)));
    if (judge_flush_legs (v, sync, &err) == -1)
      nr_cand = 0;              /* nothing is known to be durable */
    else {
      debug_pause (replicate_debug_cool_pause, "activity log cooling",
                   "before writing the bitmap pages", "cool_pause");
      if (metaio_persist_bitmaps (v) == -1)
        nr_cand = 0;
    }
  }

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&al->lock);
  if (nr_cand > 0 && remove_idle (al, nr_cand) > 0)
    commit_locked (al, 0);
  pthread_cond_broadcast (&al->cond);
  return al->nr_list;
}

/* The flusher thread: cool the log every AL_INTERVAL seconds, or at
 * once when it fills up.
 */
static void *
flusher (void *arg)
{
  struct al *al = arg;

  pthread_mutex_lock (&al->lock);
  while (!al->stop) {
    const struct timespec ts =
      deadline_after (CLOCK_REALTIME, AL_INTERVAL * UINT64_C (1000000000));

    while (!al->stop && !al->want_cool)
      if (pthread_cond_timedwait (&al->wake, &al->lock, &ts) == ETIMEDOUT)
        break;
    al->want_cool = false;
    if (al->stop || al->nr_list == 0)
      continue;
    pthread_mutex_unlock (&al->lock);
    al_cool (al);
    pthread_mutex_lock (&al->lock);
  }
  pthread_mutex_unlock (&al->lock);
  return NULL;
}

/* Start the flusher. */
int
al_start (struct al *al)
{
  int r = pthread_create (&al->thread, NULL, flusher, al);

  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  thread_name (al->thread, "rep-al");
  al->running = true;
  return 0;
}

/* Stop the flusher. */
void
al_stop (struct al *al)
{
  if (!al->running)
    return;
  pthread_mutex_lock (&al->lock);
  al->stop = true;
  pthread_cond_signal (&al->wake);
  pthread_mutex_unlock (&al->lock);
  pthread_join (al->thread, NULL);
  al->running = false;
}

/* Extents in the log. */
uint64_t
al_nr_hot (struct al *al)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&al->lock);
  return al->nr_list;
}

/* Log writes so far. */
uint64_t
al_commits (struct al *al)
{
  return atomic_load (&al->commits);
}
