/* SPDX-License-Identifier: BSD-3-Clause */
/* Range lock: serialises overlapping byte ranges, lets the rest run.
 *
 * Client writes hold the bytes they write; resync and verify hold whole
 * chunks while they look at the source and write the target.  Two holds
 * conflict only if their byte ranges overlap.
 *
 * There is no global lock.  The volume is cut into granules (a power of
 * two, the chunk size); granule g is registered in bucket g % nbuckets,
 * each bucket having its own mutex, condition variable and list of the
 * holds registered there.  A hold registers itself once in the bucket
 * of every granule it covers, in ascending bucket order, waiting at
 * each bucket while a hold registered there overlaps its bytes within a
 * granule of that bucket.  Because every hold registers in ascending
 * bucket order, a hold only ever waits for holds that are already past
 * it, and no cycle of waiters can form.  (Ascending granule order would
 * not do: a hold covering more granules than there are buckets would be
 * registered for its later granules before reaching them, and two such
 * holds could wait for each other.)
 *
 * A 4 KiB write touches one bucket: one short locked section to
 * register, one to unregister.  The list of a bucket is a vector that
 * grows and never shrinks, so steady state does no allocation.  The
 * bucket locks and the waits are futexes (rangelock.c), so a section
 * costs two atomic instructions when nobody else is in the bucket.
 */

#ifndef REPLICATE_RANGELOCK_H
#define REPLICATE_RANGELOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

struct rangelock;

/* One hold: caller-owned storage (usually on the stack), valid from lock
 * to unlock.
 */
struct range_hold {
  uint64_t offset;
  uint64_t length;
  uint64_t first_granule;   /* filled in by the lock functions */
  uint64_t nr_buckets_held; /* how many buckets it is registered in */
};

/* Create a lock with granule size granularity (a power of two) and
 * nbuckets buckets (a power of two).  Returns NULL on ENOMEM.
 */
extern struct rangelock *rangelock_new (uint64_t granularity,
                                        unsigned nbuckets);
extern void rangelock_free (struct rangelock *rl);

/* Hold [offset, offset+length), waiting for overlapping holds to go.
 * length must be > 0.  Returns 0, or -1 on ENOMEM (nothing held).
 */
extern int rangelock_lock (struct rangelock *rl, struct range_hold *h,
                           uint64_t offset, uint64_t length);

/* Like rangelock_lock, but never waits: returns 1 if held, 0 if an
 * overlapping hold exists (nothing held), -1 on ENOMEM.
 */
extern int rangelock_trylock (struct rangelock *rl, struct range_hold *h,
                              uint64_t offset, uint64_t length);

/* Release a hold and wake those waiting on it. */
extern void rangelock_unlock (struct rangelock *rl, struct range_hold *h);

/* futex(2) on a private 32-bit word (glibc has no wrapper), for the
 * range lock and the engine's request countdown (ioreq.c), the two
 * places where a thread sleeps on the data path.  Sleep while *word
 * is val, until woken or until the absolute CLOCK_MONOTONIC time
 * deadline (NULL: none); returns 0, or -1 with errno (ETIMEDOUT,
 * EAGAIN when *word was not val, EINTR).
 */
static inline int
futex_wait (_Atomic uint32_t *word, uint32_t val,
            const struct timespec *deadline)
{
  return (int) syscall (SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, val,
                        deadline, NULL, FUTEX_BITSET_MATCH_ANY);
}

/* Wake up to n threads sleeping on word. */
static inline void
futex_wake (_Atomic uint32_t *word, int n)
{
  syscall (SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

#endif /* REPLICATE_RANGELOCK_H */
