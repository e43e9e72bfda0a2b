/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the range lock.
 *
 * - A table of pairs of ranges: with the first held, trylock of the
 *   second must fail exactly when the two overlap, and the other way
 *   round; a failed trylock must leave nothing behind.
 * - Many holds in one bucket (vector growth, removal from the middle).
 * - Blocking: a thread waiting in rangelock_lock gets the range when
 *   the conflicting hold goes, and not before.
 * - Stress: threads lock random ranges of a small area, stamp their id
 *   over the range, yield and check that the stamp is still theirs.
 */

#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "rangelock.h"
#include "unit.h"

#define KiB 1024ull
#define MiB (1024 * KiB)
#define G (64 * KiB)            /* the granule of most rows */
#define TOP UINT64_MAX

struct pair_case {
  const char *name;
  uint64_t granularity;
  unsigned nbuckets;
  uint64_t a_off, a_len;
  uint64_t b_off, b_len;
  bool conflict;
  uint64_t a_buckets;           /* expected nr_buckets_held of a */
};

static const struct pair_case pair_cases[] = {
  /* Within one granule. */
  { "same granule, overlap",     G, 16, 0, 4096, 4095, 1, true, 1 },
  { "same granule, adjacent",    G, 16, 0, 4096, 4096, 4096, false, 1 },
  { "same granule, disjoint",    G, 16, 0, 4096, 8192, 4096, false, 1 },
  { "identical",                 G, 16, 100, 50, 100, 50, true, 1 },
  { "b contains a",              G, 16, 1000, 10, 0, G, true, 1 },
  { "1 byte, same",              G, 16, 7, 1, 7, 1, true, 1 },
  { "1 byte, next",              G, 16, 7, 1, 8, 1, false, 1 },
  { "1 byte, previous",          G, 16, 7, 1, 6, 1, false, 1 },
  /* Across granule boundaries. */
  { "spans boundary, overlap",   G, 16, G - 100, 200, G + 50, 10, true, 2 },
  { "spans boundary, adjacent",  G, 16, G - 100, 200, G - 200, 100, false, 2 },
  { "spans boundary, after",     G, 16, G - 100, 200, G + 100, 100, false, 2 },
  { "boundary bytes, last",      G, 16, G - 1, 2, G - 1, 1, true, 2 },
  { "boundary bytes, first",     G, 16, G - 1, 2, G, 1, true, 2 },
  { "boundary bytes, beyond",    G, 16, G - 1, 2, G + 1, 1, false, 2 },
  { "neighbouring granules",     G, 16, 0, G, G, G, false, 1 },
  /* Different granules of the same bucket never conflict. */
  { "same bucket, whole",        G, 16, 0, G, 16 * G, G, false, 1 },
  { "same bucket, same offsets", G, 16, 5, 10, 16 * G + 5, 10, false, 1 },
  { "same bucket, far",          G, 16, 3 * G, 1, 1003 * G, 1, false, 1 },
  /* A run of buckets that wraps past the last one. */
  { "wrapping, overlap",         G, 16, 15 * G, 2 * G, 16 * G + 10, 1,
    true, 2 },
  { "wrapping, bucket 0 only",   G, 16, 15 * G, 2 * G, 0, 1, false, 2 },
  { "wrapping, bucket 15 only",  G, 16, 15 * G, 2 * G, 31 * G, G, false, 2 },
  /* Longer than nbuckets granules: in every bucket once. */
  { "long, last byte",           G, 16, 0, 32 * G, 31 * G + 5, 1, true, 16 },
  { "long, just after",          G, 16, 0, 32 * G, 32 * G, 1, false, 16 },
  { "long, same bucket beyond",  G, 16, 0, 32 * G, 40 * G, G, false, 16 },
  { "long, long tail",           G, 16, 0, 32 * G, 20 * G + G / 2, 100 * G,
    true, 16 },
  { "two long, adjacent",        G, 16, 0, 20 * G, 20 * G, 20 * G, false, 16 },
  { "two long, one byte",        G, 16, 0, 20 * G, 20 * G - 1, 20 * G,
    true, 16 },
  { "long unaligned, last",      G, 16, G / 2, 17 * G, 17 * G + G / 2 - 1, 1,
    true, 16 },
  { "long unaligned, after",     G, 16, G / 2, 17 * G, 17 * G + G / 2, 1,
    false, 16 },
  { "exactly nbuckets granules", G, 16, 0, 16 * G, 16 * G, 1, false, 16 },
  { "nbuckets - 1 granules",     G, 16, 0, 15 * G, 15 * G - 1, 2, true, 15 },
  /* The top of the 64-bit space, and lengths that would overflow. */
  { "top byte, same",            G, 16, TOP, 1, TOP, 1, true, 1 },
  { "top byte, next to it",      G, 16, TOP - 1, 1, TOP, 1, false, 1 },
  { "overflowing, top byte",     G, 16, TOP - 10, 1000, TOP, 1, true, 1 },
  { "overflowing, before",       G, 16, TOP - 10, 1000, TOP - 20, 10,
    false, 1 },
  { "overflowing, touching",     G, 16, TOP - 10, 1000, TOP - 20, 11,
    true, 1 },
  { "nearly everything, top",    G, 16, 0, TOP, TOP, 1, false, 16 },
  { "nearly everything, inside", G, 16, 0, TOP, 12345, 1, true, 16 },
  { "two huge",                  G, 16, 0, TOP, 1, TOP, true, 16 },
  { "huge from the middle",      G, 16, 1ull << 63, TOP, (1ull << 63) - 1, 1,
    false, 16 },
  /* Other geometries. */
  { "byte granules, overlap",    1, 4, 0, 10, 4, 1, true, 4 },
  { "byte granules, adjacent",   1, 4, 0, 10, 10, 4, false, 4 },
  { "byte granules, same bucket", 1, 16, 3, 2, 19, 1, false, 2 },
  { "byte granules, everything", 1, 4, 0, TOP, TOP, 1, false, 4 },
  { "byte granules, inside",     1, 4, 0, TOP, 1000000, 3, true, 4 },
  { "one bucket, adjacent",      4096, 1, 0, 4096, 4096, 1, false, 1 },
  { "one bucket, overlap",       4096, 1, 0, 4097, 4096, 1, true, 1 },
  { "one bucket, far",           4096, 1, 0, 1, 1 << 30, 1, false, 1 },
  { "2^63 granules, adjacent",   1ull << 63, 2, 0, 1ull << 63, 1ull << 63, 1,
    false, 1 },
  { "2^63 granules, overlap",    1ull << 63, 2, (1ull << 63) - 1, 2,
    1ull << 63, TOP, true, 2 },
};

/* With x held, trylock y; expect success exactly when they do not
 * conflict.  Releases whatever it took.
 */
static void
check_trylock_while_held (const struct pair_case *c, size_t row,
                          struct rangelock *rl,
                          uint64_t x_off, uint64_t x_len,
                          uint64_t y_off, uint64_t y_len)
{
  struct range_hold hx, hy;
  int r;

  r = rangelock_trylock (rl, &hx, x_off, x_len);
  CHECKF (r == 1, "row %zu (%s): first trylock %d", row, c->name, r);
  if (r != 1)
    return;
  r = rangelock_trylock (rl, &hy, y_off, y_len);
  CHECKF (r == (c->conflict ? 0 : 1), "row %zu (%s): second trylock %d",
          row, c->name, r);
  if (r == 1)
    rangelock_unlock (rl, &hy);
  else
    CHECKF (hy.nr_buckets_held == 0, "row %zu (%s): failed hold shows %llu",
            row, c->name, (unsigned long long) hy.nr_buckets_held);
  rangelock_unlock (rl, &hx);
}

/* Run every row of the pair table, both ways round. */
static void
test_pairs (void)
{
  size_t i;

  for (i = 0; i < sizeof pair_cases / sizeof pair_cases[0]; i++) {
    const struct pair_case *c = &pair_cases[i];
    struct rangelock *rl = rangelock_new (c->granularity, c->nbuckets);
    struct range_hold ha, hb;

    CHECKF (rl != NULL, "row %zu (%s): rangelock_new", i, c->name);
    if (rl == NULL)
      continue;

    /* The geometry of a alone. */
    CHECKF (rangelock_trylock (rl, &ha, c->a_off, c->a_len) == 1,
            "row %zu (%s): a alone", i, c->name);
    CHECKF (ha.first_granule == c->a_off / c->granularity,
            "row %zu (%s): first_granule %llu", i, c->name,
            (unsigned long long) ha.first_granule);
    CHECKF (ha.nr_buckets_held == c->a_buckets,
            "row %zu (%s): nr_buckets_held %llu", i, c->name,
            (unsigned long long) ha.nr_buckets_held);
    rangelock_unlock (rl, &ha);

    check_trylock_while_held (c, i, rl, c->a_off, c->a_len,
                              c->b_off, c->b_len);
    check_trylock_while_held (c, i, rl, c->b_off, c->b_len,
                              c->a_off, c->a_len);

    /* Nothing may be left behind: both are free, and blocking lock of
     * both works when they do not conflict.
     */
    CHECKF (rangelock_lock (rl, &ha, c->a_off, c->a_len) == 0,
            "row %zu (%s): lock a", i, c->name);
    rangelock_unlock (rl, &ha);
    CHECKF (rangelock_lock (rl, &hb, c->b_off, c->b_len) == 0,
            "row %zu (%s): lock b", i, c->name);
    if (!c->conflict) {
      CHECKF (rangelock_lock (rl, &ha, c->a_off, c->a_len) == 0,
              "row %zu (%s): lock a with b held", i, c->name);
      rangelock_unlock (rl, &ha);
    }
    rangelock_unlock (rl, &hb);
    rangelock_free (rl);
  }
}

/* Invalid geometries and lengths are refused. */
static void
test_invalid (void)
{
  static const struct { uint64_t granularity; unsigned nbuckets; } bad[] = {
    { 0, 16 }, { 3, 16 }, { 65536 + 4096, 16 }, { 4096, 0 }, { 4096, 6 },
  };
  struct rangelock *rl;
  struct range_hold h;
  size_t i;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    errno = 0;
    rl = rangelock_new (bad[i].granularity, bad[i].nbuckets);
    CHECKF (rl == NULL && errno == EINVAL, "row %zu accepted", i);
    rangelock_free (rl);
  }

  rl = rangelock_new (G, 16);
  CHECK (rl != NULL);
  if (rl == NULL)
    return;
  CHECK (rangelock_trylock (rl, &h, 0, 0) == -1 && errno == EINVAL);
  CHECK (rangelock_lock (rl, &h, 0, 0) == -1 && errno == EINVAL);
  rangelock_free (rl);
}

#define MANY 100

/* Many 1-byte holds in one granule: the bucket's vector grows, holds
 * leave from the middle, and exactly the held bytes conflict.
 */
static void
test_many_in_one_bucket (void)
{
  struct rangelock *rl = rangelock_new (G, 16);
  struct range_hold holds[MANY], probe;
  size_t i;

  CHECK (rl != NULL);
  if (rl == NULL)
    return;
  for (i = 0; i < MANY; i++)
    CHECKF (rangelock_trylock (rl, &holds[i], 2 * i, 1) == 1, "hold %zu", i);
  for (i = 0; i < MANY; i++) {
    CHECKF (rangelock_trylock (rl, &probe, 2 * i, 1) == 0, "byte %zu", 2 * i);
    CHECKF (rangelock_trylock (rl, &probe, 2 * i + 1, 1) == 1,
            "byte %zu", 2 * i + 1);
    rangelock_unlock (rl, &probe);
  }
  /* Release the odd holds, then check the even ones still conflict. */
  for (i = 1; i < MANY; i += 2)
    rangelock_unlock (rl, &holds[i]);
  for (i = 0; i < MANY; i++) {
    int expect = i % 2 ? 1 : 0;

    CHECKF (rangelock_trylock (rl, &probe, 2 * i, 1) == expect,
            "byte %zu after releasing the odd holds", 2 * i);
    if (expect)
      rangelock_unlock (rl, &probe);
  }
  CHECK (rangelock_trylock (rl, &probe, 0, 2 * MANY) == 0);
  for (i = 0; i < MANY; i += 2)
    rangelock_unlock (rl, &holds[i]);
  CHECK (rangelock_trylock (rl, &probe, 0, 2 * MANY) == 1);
  rangelock_unlock (rl, &probe);
  rangelock_free (rl);
}

struct blocking_case {
  const char *name;
  uint64_t a_off, a_len;        /* held by the main thread */
  uint64_t b_off, b_len;        /* wanted by the waiter */
};

static const struct blocking_case blocking_cases[] = {
  { "one granule",                  0, 4096, 100, 8192 },
  { "long holder, short waiter",    0, 64 * G, 40 * G + 3, 1 },
  { "short holder, long waiter",    9 * G, 1, 0, 64 * G },
  { "waiter wraps the buckets",     16 * G, 1, 15 * G, 2 * G },
  { "both long",                    G / 2, 40 * G, 30 * G, 40 * G },
};

struct waiter {
  struct rangelock *rl;
  uint64_t off, len;
  atomic_int acquired;
};

/* Thread: take the range (waiting), flag it, release it. */
static void *
waiter_thread (void *arg)
{
  struct waiter *w = arg;
  struct range_hold h;

  if (rangelock_lock (w->rl, &h, w->off, w->len) == 0) {
    atomic_store (&w->acquired, 1);
    rangelock_unlock (w->rl, &h);
  }
  return NULL;
}

/* Sleep for ms milliseconds. */
static void
sleep_ms (long ms)
{
  struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 };

  nanosleep (&ts, NULL);
}

/* Wait up to 5 s for the waiter to flag.  Returns whether it did. */
static bool
wait_for_acquired (struct waiter *w)
{
  int i;

  for (i = 0; i < 500 && !atomic_load (&w->acquired); i++)
    sleep_ms (10);
  return atomic_load (&w->acquired);
}

/* A thread blocked in rangelock_lock wakes when the hold goes. */
static void
test_blocking (void)
{
  size_t i;

  for (i = 0; i < sizeof blocking_cases / sizeof blocking_cases[0]; i++) {
    const struct blocking_case *c = &blocking_cases[i];
    struct waiter w = { .off = c->b_off, .len = c->b_len };
    struct range_hold ha;
    pthread_t thread;

    w.rl = rangelock_new (G, 16);
    atomic_init (&w.acquired, 0);
    CHECKF (w.rl != NULL, "row %zu (%s)", i, c->name);
    if (w.rl == NULL)
      continue;
    CHECKF (rangelock_lock (w.rl, &ha, c->a_off, c->a_len) == 0,
            "row %zu (%s)", i, c->name);
    if (pthread_create (&thread, NULL, waiter_thread, &w) != 0) {
      CHECKF (false, "row %zu (%s): pthread_create", i, c->name);
      rangelock_unlock (w.rl, &ha);
      rangelock_free (w.rl);
      continue;
    }
    sleep_ms (50);
    CHECKF (!atomic_load (&w.acquired),
            "row %zu (%s): got the range while it was held", i, c->name);
    rangelock_unlock (w.rl, &ha);
    if (!wait_for_acquired (&w)) {
      fprintf (stderr, "row %zu (%s): waiter never woke\n", i, c->name);
      unit_failures++;
      exit (unit_exit ("unit-rangelock"));
    }
    pthread_join (thread, NULL);
    rangelock_free (w.rl);
  }
}

#define STRESS_AREA MiB
#define STRESS_THREADS 8
#define STRESS_ITERATIONS 2000

/* The stamp of each byte of the area: the id of the last thread that
 * wrote it.  Relaxed atomics: the range lock is what must order them.
 */
static _Atomic unsigned char stamps[STRESS_AREA];

struct stresser {
  pthread_t thread;
  struct rangelock *rl;
  unsigned char id;
  uint64_t seed;
  unsigned long errors;         /* ranges whose stamp changed */
  unsigned long contended;      /* trylocks that found a conflict */
};

/* splitmix64: the next pseudo-random number of the sequence at *s. */
static uint64_t
next_random (uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A random length in [1, max]: mostly short, some spanning granules,
 * a few up to the whole area.
 */
static uint64_t
random_length (uint64_t *s, uint64_t max)
{
  uint64_t kind = next_random (s) % 100;
  uint64_t cap = kind < 60 ? 64 : kind < 90 ? 8 * KiB
    : kind < 99 ? 160 * KiB : STRESS_AREA;

  if (cap > max)
    cap = max;
  return 1 + next_random (s) % cap;
}

/* Stamp id over [off, off+len), let others run, check the stamp is
 * still there.  Returns whether it was.
 */
static bool
stamp_and_check (unsigned char id, uint64_t off, uint64_t len)
{
  uint64_t i;
  bool ok = true;

  for (i = off; i < off + len; i++)
    atomic_store_explicit (&stamps[i], id, memory_order_relaxed);
  sched_yield ();
  for (i = off; i < off + len; i++)
    if (atomic_load_explicit (&stamps[i], memory_order_relaxed) != id)
      ok = false;
  return ok;
}

/* Thread: lock random ranges (one in four with trylock), stamp, check. */
static void *
stress_thread (void *arg)
{
  struct stresser *st = arg;
  int i;

  for (i = 0; i < STRESS_ITERATIONS; i++) {
    uint64_t off = next_random (&st->seed) % STRESS_AREA;
    uint64_t len = random_length (&st->seed, STRESS_AREA - off);
    struct range_hold h;

    if (next_random (&st->seed) % 4 == 0) {
      if (rangelock_trylock (st->rl, &h, off, len) != 1) {
        st->contended++;
        continue;
      }
    }
    else if (rangelock_lock (st->rl, &h, off, len) != 0) {
      st->errors++;
      continue;
    }
    if (!stamp_and_check (st->id, off, len))
      st->errors++;
    rangelock_unlock (st->rl, &h);
  }
  return NULL;
}

/* Run the stress threads over one geometry. */
static void
stress (uint64_t granularity, unsigned nbuckets)
{
  struct stresser st[STRESS_THREADS];
  struct rangelock *rl = rangelock_new (granularity, nbuckets);
  unsigned long contended = 0;
  size_t i, started;

  CHECK (rl != NULL);
  if (rl == NULL)
    return;
  for (started = 0; started < STRESS_THREADS; started++) {
    st[started] = (struct stresser) {
      .rl = rl, .id = started + 1, .seed = granularity * 131 + started,
    };
    if (pthread_create (&st[started].thread, NULL, stress_thread,
                        &st[started]) != 0)
      break;
  }
  CHECK (started == STRESS_THREADS);
  for (i = 0; i < started; i++) {
    pthread_join (st[i].thread, NULL);
    CHECKF (st[i].errors == 0,
            "granularity %llu, %u buckets: thread %zu saw %lu broken ranges",
            (unsigned long long) granularity, nbuckets, i, st[i].errors);
    contended += st[i].contended;
  }
  /* The threads really did contend, or the test proved nothing. */
  CHECKF (contended > 0, "granularity %llu, %u buckets: no contention",
          (unsigned long long) granularity, nbuckets);
  rangelock_free (rl);
}

int
main (void)
{
  test_pairs ();
  test_invalid ();
  test_many_in_one_bucket ();
  test_blocking ();
  stress (64 * KiB, 16);
  stress (4 * KiB, 4);
  return unit_exit ("unit-rangelock");
}
