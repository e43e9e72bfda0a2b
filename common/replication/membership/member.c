/* SPDX-License-Identifier: BSD-3-Clause */
/* Membership: who receives writes, who serves reads, and changing it.
 *
 * The membership word (internal.h) is read by every write once, after
 * its range lock.  A write holds a "ticket" (a count in wcount[parity
 * of the epoch it read]) only from reading the word until it has set
 * the bits of the absent slots it skips; nothing blocks inside that
 * window.  membership_publish stores a new word (epoch + 1) and then
 * waits for the old parity's count to drain, so when it returns every
 * write that saw the old word has marked the bitmaps it had to mark.
 * Publishes are made under v->lock, so the parities never flip twice
 * during one drain.
 *
 * A write that reads a word with no absent slot takes no ticket: it has
 * no bit to set, so its window is empty, exactly as if it had taken a
 * ticket and given it back before the publish began; the publish has
 * nothing to wait for on its account.  That is every write of a healthy
 * volume, which then costs one load here.
 *
 * Failing a leg: the state change is published at once (no new request
 * goes to the leg), the leg's sockets are shut down (its requests in
 * flight end), and the failure is recorded: the hot activity-log
 * extents are ORed into its bitmap and the generation is bumped on the
 * remaining uptodate legs.  While that is in progress pending_changes
 * is non-zero and every write that completes waits before it is
 * acknowledged (invariant 1 of DESIGN.md section 5).
 *
 * One funnel (as DRBD's): member_set_state is the only way a leg changes
 * state.  It asserts that v->lock is held and that the move is in the
 * transition table (state_move_allowed), stores the state, recomputes
 * the word from every leg (state_membership; the leg's own slot
 * turns absent or present by state_absent_after_move) and publishes it, and
 * logs "leg N: FROM -> TO (WHY)".  A move between failed and stale
 * changes no mask and publishes nothing.  member_set_absent
 * publishes a change of the absent slots that belong to no leg (the
 * backup's tracker; at start, the slots the election found absent);
 * membership_publish, which only those two call, asserts what the word
 * promises: uptodate legs are writing and no writing leg's slot is
 * absent; member_set_state first asserts that the word it starts from
 * agrees with the leg states (nothing moved a leg behind its back).
 * The lock checks need an error-checking v->lock, which
 * member_lock_init makes wherever assertions are compiled in.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "member.h"
#include "state.h"
#include "leg.h"
#include "metaio.h"
#include "cleanup.h"

/* This thread's stripe of the write counters (from its thread id:
 * no thread-local storage, which thread sanitizers misjudge in a
 * dlopen'ed plugin).
 */
static unsigned
my_stripe (void)
{
  uintptr_t t = (uintptr_t) pthread_self ();

  return (unsigned) ((t >> 12) ^ (t >> 20)) % WCOUNT_STRIPES;
}

/* The ticket of a write that needs none (no absent slot). */
#define NO_TICKET UINT16_MAX

#define MAX_SOURCE_BACKOFF 60   /* seconds: retry_delay_ns at most */

/* Take a write ticket and the membership it is valid for.  Returns the
 * ticket for member_leave_write.
 */
uint16_t
member_enter_write (struct volume *v, uint64_t *mp)
{
  uint64_t m = atomic_load (&v->membership);
  unsigned s;

  if (MB_ABSENT (m) == 0) {
    *mp = m;
    return NO_TICKET;
  }
  s = my_stripe ();
  for (;;) {
    unsigned p = MB_EPOCH (m) & 1;

    atomic_fetch_add (&v->wcount[p][s].n, 1);
    if (atomic_load (&v->membership) == m) {
      *mp = m;
      return (uint16_t) (p | (s << 1));
    }
    atomic_fetch_sub (&v->wcount[p][s].n, 1);
    m = atomic_load (&v->membership);
  }
}

/* Give the ticket back: the absent slots' bits are set. */
void
member_leave_write (struct volume *v, uint16_t ticket)
{
  if (ticket != NO_TICKET)
    atomic_fetch_sub (&v->wcount[ticket & 1][ticket >> 1].n, 1);
}

/* Writes still holding tickets of a parity. */
static long
tickets_out (struct volume *v, unsigned parity)
{
  long n = 0;
  unsigned s;

  for (s = 0; s < WCOUNT_STRIPES; ++s)
    n += atomic_load (&v->wcount[parity][s].n);
  return n;
}

/* Make v->lock: error-checking where assertions are compiled in, so
 * that member_lock_held can tell its owner.
 */
void
member_lock_init (struct volume *v)
{
#ifndef NDEBUG
  pthread_mutexattr_t attr;

  pthread_mutexattr_init (&attr);
  pthread_mutexattr_settype (&attr, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init (&v->lock, &attr);
  pthread_mutexattr_destroy (&attr);
#else
  pthread_mutex_init (&v->lock, NULL);
#endif
}

/* Does this thread hold v->lock (for assertions)?  A timed lock of an
 * error-checking mutex fails at once with EDEADLK for its owner; held
 * by another thread it times out at once (the deadline is past); free,
 * it is taken, and given back.  Without assertions: true.
 */
bool
member_lock_held (struct volume *v)
{
#ifndef NDEBUG
  static const struct timespec past = { 0, 0 };
  int r = pthread_mutex_timedlock (&v->lock, &past);

  if (r == 0) {
    pthread_mutex_unlock (&v->lock);
    return false;
  }
  return r == EDEADLK;
#else
  (void) v;
  return true;
#endif
}

/* The word (epoch 0) the legs' states make, with these absent slots. */
static uint64_t
membership_of_legs (struct volume *v, uint16_t absent)
{
  enum leg_state states[MAX_LEGS];
  size_t i, n = atomic_load (&v->nr_legs);

  for (i = 0; i < n; ++i)
    states[i] = atomic_load (&v->legs[i].state);
  return state_membership (states, n, absent);
}

/* The word without its epoch. */
#define MB_MASKS(m) ((m) & ~((uint64_t) 0xffff << 48))

/* Publish a new membership and wait until no write holds a ticket of
 * the old one.  v->lock held.  Only the funnel (member_set_state,
 * member_set_absent) publishes.
 */
static void
membership_publish (struct volume *v, uint16_t uptodate, uint16_t writing,
                    uint16_t absent)
{
  uint64_t old = atomic_load (&v->membership);

  assert (member_lock_held (v));
  assert ((uptodate & ~writing) == 0);
  assert ((absent & member_slot_mask_of (v, writing)) == 0);
  atomic_store (&v->membership,
                MB_MAKE (uptodate, writing, absent, MB_EPOCH (old) + 1));
  while (tickets_out (v, MB_EPOCH (old) & 1) > 0)
    sched_yield ();
}

/* The slots of a set of legs, as a mask. */
uint16_t
member_slot_mask_of (struct volume *v, uint16_t legs)
{
  uint16_t slots = 0;
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if ((legs & (1u << i)) && v->legs[i].slot >= 0)
      slots |= 1u << v->legs[i].slot;
  return slots;
}

/* Set the state a leg starts in: before it is part of the volume
 * (engine_config_complete, an added leg before nr_legs counts it) or
 * while the volume starts, before any thread but the starting one can
 * look (the election's roles).  No lock, no move: there is no earlier
 * state to move from, and the word is published once for every leg
 * afterwards (member_set_absent).
 */
void
member_init_state (struct leg *l, enum leg_state s)
{
  assert (!l->v->started || l->index >= atomic_load (&l->v->nr_legs));
  atomic_store (&l->state, s);
}

/* Move a leg to another state: the only writer of l->state once the
 * volume runs (see the design note).  v->lock held.
 */
void
member_set_state (struct volume *v, struct leg *l, enum leg_state to,
               const char *why)
{
  enum leg_state from = atomic_load (&l->state);
  uint64_t old = membership_load (v), m;
  uint16_t absent;

  assert (member_lock_held (v));
  assert (!v->started ||
          MB_MASKS (membership_of_legs (v, MB_ABSENT (old))) ==
          MB_MASKS (old));
  if (!state_move_allowed (from, to)) {
    nbdkit_error ("leg %u: %s -> %s is not a valid move (%s)", l->index,
                  state_leg_name (from), state_leg_name (to), why);
    assert (state_move_allowed (from, to));
  }
  absent = state_absent_after_move (MB_ABSENT (old), from, to, l->slot,
                              v->metadata);
  atomic_store (&l->state, to);
  m = membership_of_legs (v, absent);
  nbdkit_debug ("leg %u: %s -> %s (%s)", l->index, state_leg_name (from),
                state_leg_name (to), why);
  /* A removal always publishes: the slot it frees must be out of every
   * write's hands before it is cleared.
   */
  if (MB_MASKS (m) != MB_MASKS (old) || to == LEG_REMOVED)
    membership_publish (v, MB_UPTODATE (m), MB_WRITING (m), MB_ABSENT (m));
}

/* Publish a new set of absent slots (a slot that belongs to no leg
 * turning absent or present; at start, every slot the election found
 * absent), the masks computed from the legs.  v->lock held.
 */
void
member_set_absent (struct volume *v, uint16_t absent, const char *why)
{
  uint64_t m = membership_of_legs (v, absent);

  nbdkit_debug ("membership: absent slots %#x -> %#x (%s)",
                (unsigned) MB_ABSENT (membership_load (v)),
                (unsigned) absent, why);
  membership_publish (v, MB_UPTODATE (m), MB_WRITING (m), absent);
}

/* Start recording a membership change: writes completing from now on
 * wait for member_change_end before they are acknowledged.
 */
void
member_change_begin (struct volume *v)
{
  atomic_fetch_add (&v->pending_changes, 1);
}

/* The change is recorded: let waiting writes go. */
void
member_change_end (struct volume *v)
{
  unsigned begun;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  begun = atomic_fetch_sub (&v->pending_changes, 1);
  assert (begun > 0);           /* one end per member_change_begin */
  (void) begun;
  pthread_cond_broadcast (&v->cond);
}

/* Wait until no membership change is being recorded. */
void
member_wait_changes (struct volume *v)
{
  if (atomic_load (&v->pending_changes) == 0)
    return;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  while (atomic_load (&v->pending_changes) > 0)
    pthread_cond_wait (&v->cond, &v->lock);
}

/* Allocate the bitmap of a slot (and its page sequence numbers). */
int
member_alloc_bitmap (struct volume *v, unsigned slot)
{
  uint64_t bits = v->metadata ? v->layout.nr_chunks
                              : (v->size + v->cfg.chunk - 1) / v->cfg.chunk;
  struct bitmap *b;
  uint64_t *seq = NULL;

  if (volume_bitmap (v, slot) != NULL)
    return 0;
  b = calloc (1, sizeof *b);
  if (v->metadata)
    seq = calloc (v->layout.bm_pages, sizeof *seq);
  if (b == NULL || (v->metadata && seq == NULL) ||
      bitmap_init (b, bits) == -1) {
    nbdkit_error ("bitmap: %m");
    free (b);
    free (seq);
    return -1;
  }
  /* Published whole: the page writer and the data path read the
   * pointer without a lock.
   */
  v->bm_seq[slot] = seq;
  __atomic_store_n (&v->bitmaps[slot], b, __ATOMIC_RELEASE);
  return 0;
}

/* Wake the monitor thread (a leg to reconnect or resync). */
void
member_wake_monitor (struct volume *v)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  pthread_cond_broadcast (&v->monitor_cond);
}

/* How long a leg just failed waits for its first reconnection: a
 * second, or, if resyncs of it keep ending at a media error of their
 * last uptodate source (resync-copy.c), twice as long each time, up to
 * MAX_SOURCE_BACKOFF: the bad range will not heal by itself, and
 * every attempt costs a generation bump.  v->lock held.
 */
static uint64_t
retry_delay_ns (const struct leg *l)
{
  unsigned n = l->source_errors < 6 ? l->source_errors : 6;
  uint64_t s = (uint64_t) 1 << n;       /* 1, 2, 4 ... 64 */

  return (s < MAX_SOURCE_BACKOFF ? s : MAX_SOURCE_BACKOFF) * 1000000000;
}

/* Would failing the uptodate leg l leave fewer than keep other legs
 * uptodate?  v->lock held.
 */
static bool
leaves_too_few (struct volume *v, const struct leg *l, unsigned keep)
{
  uint16_t up = MB_UPTODATE (membership_load (v)) & ~(1u << l->index);

  return l->state == LEG_UPTODATE &&
    (unsigned) __builtin_popcount (up) < keep;
}

/* member_mark_failed, unless the leg is uptodate and fewer than keep
 * other legs are (then *refused is set): checked in the same hold of
 * v->lock as the state changes, so that no other failure comes between.
 */
static bool
mark_failed_keeping (struct volume *v, struct leg *l, unsigned epoch,
                     unsigned keep, const char *reason, bool *was_uptodate,
                     bool *refused)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  if (l->state != LEG_UPTODATE && l->state != LEG_SYNCING)
    return false;
  if (epoch != EPOCH_ANY && epoch != atomic_load (&l->epoch))
    return false;               /* an error from connections long gone */
  if (leaves_too_few (v, l, keep)) {
    *refused = true;
    return false;
  }
  *was_uptodate = l->state == LEG_UPTODATE;
  /* A leg timed out in this epoch: its requests fail with ENOTCONN once
   * its sockets are shut down, and whichever is judged first must not
   * hide why (the timeout, already in last_error).
   */
  if (atomic_load (&l->timed_out) != atomic_load (&l->epoch) + 1)
    snprintf (l->last_error, sizeof l->last_error, "%s", reason);
  l->backoff = 0;
  l->next_attempt_ns = now_ns () + retry_delay_ns (l);
  member_set_state (v, l, LEG_FAILED, reason);
  return true;
}

/* Mark a writing leg failed and publish the new membership.  Returns
 * true if this call changed it (false: it was not writing, or the
 * error came from connections of an earlier epoch, closed since: the
 * leg has been reconnected), and whether it was uptodate.  The caller
 * has begun a change.
 */
bool
member_mark_failed (struct volume *v, struct leg *l, unsigned epoch,
                    const char *reason, bool *was_uptodate)
{
  bool refused = false;

  return mark_failed_keeping (v, l, epoch, 0, reason, was_uptodate,
                              &refused);
}

/* Fail a leg unless it is uptodate and fewer than keep other legs are
 * (keep 0: always).  Returns false if refused for that.  The failure is
 * recorded before any later write is acknowledged; if another thread is
 * already failing the leg, this waits for that to be recorded.  Never
 * called with v->lock or change_lock held.
 */
static bool
fail_leg_keeping (struct volume *v, struct leg *l, unsigned epoch,
                  unsigned keep, const char *why)
{
  char reason[256], name[128];
  bool changed, was_uptodate = false, refused = false;

  member_change_begin (v);
  changed = mark_failed_keeping (v, l, epoch, keep, why, &was_uptodate,
                                 &refused);
  if (changed) {
    leg_shutdown (l);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      snprintf (reason, sizeof reason, "%s", l->last_error);
    }
    nbdkit_error ("%s failed: %s", leg_name (l, name, sizeof name), reason);
    metaio_record_failure (v, l, was_uptodate);
  }
  member_change_end (v);
  member_wait_changes (v);
  if (changed)
    member_wake_monitor (v);
  return !refused;
}

/* Fail a leg: stop using it at once and record the failure before any
 * later write is acknowledged.  If another thread is already failing
 * it, wait for that to be recorded.  Never called with v->lock or
 * change_lock held.
 */
void
member_fail_leg (struct volume *v, struct leg *l, unsigned epoch,
                 const char *fs, ...)
{
  char reason[256];
  va_list ap;

  va_start (ap, fs);
  vsnprintf (reason, sizeof reason, fs, ap);
  va_end (ap);
  fail_leg_keeping (v, l, epoch, 0, reason);
}

/* Fail a leg for the operator, unless it is uptodate and fewer than
 * keep other legs are at that moment (a failure of another leg since
 * the operator's command was checked): returns false then, and nothing
 * changed.
 */
bool
member_fail_leg_keeping (struct volume *v, struct leg *l, unsigned keep,
                         const char *reason)
{
  return fail_leg_keeping (v, l, EPOCH_ANY, keep, reason);
}
