/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the out-of-sync bitmap.
 *
 * - A table of ranges set then cleared on a fresh bitmap whose last
 *   page and last word are partial: bits changed, count, dirty pages,
 *   boundary bits, clamping at nr_bits.
 * - Overlapping updates count only the bits that change, and updates
 *   that change nothing mark nothing dirty.
 * - next_set and next_dirty_page from a table of starting points.
 * - page_get / page_or round trip and masking of the padding.
 * - set_all / clear_all for sizes that are not multiples of 64 or of
 *   BM_PAGE_BITS.
 * - Threads setting and clearing interleaved bits of the same words
 *   concurrently while a metadata writer takes dirty pages and
 *   snapshots them: the counts are exact and the final snapshots miss
 *   no bit.
 */

#include <config.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#include "bitmap.h"
#include "unit.h"

#define PB ((uint64_t) BM_PAGE_BITS)
#define NB (3 * PB + 100)       /* 4 pages, the last word partial */
#define NPAGES 4
#define ALL_PAGES ((1u << NPAGES) - 1)

/* Bit p set in the result = page p dirty. */
static unsigned
dirty_pages (const struct bitmap *b)
{
  unsigned p, mask = 0;

  for (p = 0; p < b->nr_pages; p++)
    if (bitmap_page_is_dirty (b, p))
      mask |= 1u << p;
  return mask;
}

/* Take every dirty mark; return which pages were dirty. */
static unsigned
take_all_dirty (struct bitmap *b)
{
  unsigned p, mask = 0;

  for (p = 0; p < b->nr_pages; p++)
    if (bitmap_page_take_dirty (b, p))
      mask |= 1u << p;
  return mask;
}

struct range_case {
  const char *name;
  uint64_t first, last;
  uint64_t changed;
  unsigned pages;               /* dirty pages after setting */
};

static const struct range_case range_cases[] = {
  { "bit 0",                0, 0, 1, 0x1 },
  { "inside a word",        3, 10, 8, 0x1 },
  { "whole word",           64, 127, 64, 0x1 },
  { "crossing a word",      60, 70, 11, 0x1 },
  { "many words",           10, 1000, 991, 0x1 },
  { "last bit of a page",   PB - 1, PB - 1, 1, 0x1 },
  { "first bit of a page",  PB, PB, 1, 0x2 },
  { "crossing a page",      PB - 5, PB + 4, 10, 0x3 },
  { "a whole page",         PB, 2 * PB - 1, PB, 0x2 },
  { "crossing two pages",   PB - 1, 2 * PB, PB + 2, 0x7 },
  { "last bit",             NB - 1, NB - 1, 1, 0x8 },
  { "clamped at nr_bits",   NB - 10, NB + 1000, 10, 0x8 },
  { "clamped, huge last",   NB - 1, UINT64_MAX, 1, 0x8 },
  { "past nr_bits",         NB, NB + 5, 0, 0 },
  { "far past nr_bits",     UINT64_MAX, UINT64_MAX, 0, 0 },
  { "first > last",         10, 5, 0, 0 },
  { "everything",           0, UINT64_MAX, NB, ALL_PAGES },
};

/* Set then clear each range of the table on a fresh bitmap. */
static void
test_ranges (void)
{
  size_t i;

  for (i = 0; i < sizeof range_cases / sizeof range_cases[0]; i++) {
    const struct range_case *c = &range_cases[i];
    uint64_t last = c->last < NB ? c->last : NB - 1;
    struct bitmap b;
    uint64_t r;

    CHECKF (bitmap_init (&b, NB) == 0, "row %zu (%s)", i, c->name);
    CHECKF (b.nr_pages == NPAGES, "row %zu (%s)", i, c->name);

    r = bitmap_set_range (&b, c->first, c->last);
    CHECKF (r == c->changed, "row %zu (%s): set changed %llu", i, c->name,
            (unsigned long long) r);
    CHECKF (bitmap_count (&b) == c->changed, "row %zu (%s): count %llu",
            i, c->name, (unsigned long long) bitmap_count (&b));
    CHECKF (dirty_pages (&b) == c->pages, "row %zu (%s): dirty 0x%x",
            i, c->name, dirty_pages (&b));
    CHECKF (bitmap_any (&b, 0, UINT64_MAX) == (c->changed > 0),
            "row %zu (%s): any", i, c->name);
    CHECKF (bitmap_next_set (&b, 0) == (c->changed ? c->first : NB),
            "row %zu (%s): next_set %llu", i, c->name,
            (unsigned long long) bitmap_next_set (&b, 0));
    if (c->changed) {
      CHECKF (bitmap_test (&b, c->first) && bitmap_test (&b, last),
              "row %zu (%s): end bits", i, c->name);
      CHECKF (c->first == 0 || !bitmap_test (&b, c->first - 1),
              "row %zu (%s): bit before", i, c->name);
      CHECKF (!bitmap_test (&b, last + 1), "row %zu (%s): bit after",
              i, c->name);
      CHECKF (bitmap_any (&b, last, last), "row %zu (%s)", i, c->name);
      CHECKF (c->first == 0 || !bitmap_any (&b, 0, c->first - 1),
              "row %zu (%s): any before", i, c->name);
    }
    CHECKF (!bitmap_test (&b, NB), "row %zu (%s): bit nr_bits", i, c->name);

    /* take_dirty returns the marks once. */
    CHECKF (take_all_dirty (&b) == c->pages, "row %zu (%s)", i, c->name);
    CHECKF (take_all_dirty (&b) == 0, "row %zu (%s)", i, c->name);
    CHECKF (bitmap_next_dirty_page (&b, 0) == NPAGES, "row %zu (%s)",
            i, c->name);

    r = bitmap_clear_range (&b, c->first, c->last);
    CHECKF (r == c->changed, "row %zu (%s): clear changed %llu", i, c->name,
            (unsigned long long) r);
    CHECKF (bitmap_count (&b) == 0, "row %zu (%s)", i, c->name);
    CHECKF (dirty_pages (&b) == c->pages, "row %zu (%s): dirty after clear",
            i, c->name);
    bitmap_free (&b);
  }
}

struct step {
  bool set;
  uint64_t first, last;
  uint64_t changed;
  uint64_t count;               /* after the step */
};

static const struct step steps[] = {
  { true,  0, 99, 100, 100 },
  { true,  50, 149, 50, 150 },
  { true,  50, 60, 0, 150 },
  { false, 0, 9, 10, 140 },
  { false, 0, 9, 0, 140 },
  { true,  149, 149, 0, 140 },
  { false, 140, PB + 5, 10, 130 },
  { true,  PB - 2, PB + 1, 4, 134 },
  { false, 0, UINT64_MAX, 134, 0 },
  { false, 0, UINT64_MAX, 0, 0 },
};

/* A sequence of overlapping updates: only changes are counted, and a
 * step that changes nothing marks nothing dirty.
 */
static void
test_steps (void)
{
  struct bitmap b;
  size_t i;

  CHECK (bitmap_init (&b, NB) == 0);
  for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    const struct step *s = &steps[i];
    uint64_t r;

    take_all_dirty (&b);
    r = s->set ? bitmap_set_range (&b, s->first, s->last)
      : bitmap_clear_range (&b, s->first, s->last);
    CHECKF (r == s->changed, "step %zu: changed %llu", i,
            (unsigned long long) r);
    CHECKF (bitmap_count (&b) == s->count, "step %zu: count %llu", i,
            (unsigned long long) bitmap_count (&b));
    CHECKF ((dirty_pages (&b) != 0) == (s->changed != 0),
            "step %zu: dirty 0x%x", i, dirty_pages (&b));
  }
  bitmap_free (&b);
}

static const uint64_t scattered[] = { 5, 64, 200, PB + 7, NB - 1 };

struct next_case {
  uint64_t from;
  uint64_t next;
};

static const struct next_case next_cases[] = {
  { 0, 5 }, { 5, 5 }, { 6, 64 }, { 63, 64 }, { 65, 200 }, { 201, PB + 7 },
  { PB, PB + 7 }, { PB + 8, NB - 1 }, { NB - 1, NB - 1 }, { NB, NB },
  { UINT64_MAX, NB },
};

/* next_set over scattered bits, and next_dirty_page. */
static void
test_next (void)
{
  struct bitmap b;
  size_t i;

  CHECK (bitmap_init (&b, NB) == 0);
  for (i = 0; i < sizeof scattered / sizeof scattered[0]; i++)
    CHECK (bitmap_set_range (&b, scattered[i], scattered[i]) == 1);
  for (i = 0; i < sizeof next_cases / sizeof next_cases[0]; i++)
    CHECKF (bitmap_next_set (&b, next_cases[i].from) == next_cases[i].next,
            "from %llu: %llu", (unsigned long long) next_cases[i].from,
            (unsigned long long) bitmap_next_set (&b, next_cases[i].from));
  bitmap_clear_range (&b, NB - 1, NB - 1);
  CHECK (bitmap_next_set (&b, PB + 8) == NB);

  take_all_dirty (&b);
  bitmap_page_mark_dirty (&b, 1);
  bitmap_page_mark_dirty (&b, 3);
  CHECK (bitmap_next_dirty_page (&b, 0) == 1);
  CHECK (bitmap_next_dirty_page (&b, 1) == 1);
  CHECK (bitmap_next_dirty_page (&b, 2) == 3);
  CHECK (bitmap_next_dirty_page (&b, 4) == NPAGES);
  CHECK (bitmap_page_take_dirty (&b, 1));
  CHECK (!bitmap_page_take_dirty (&b, 1));
  CHECK (bitmap_next_dirty_page (&b, 0) == 3);
  bitmap_mark_all_dirty (&b);
  CHECK (dirty_pages (&b) == ALL_PAGES);
  bitmap_free (&b);
}

/* Copy every page of src into a fresh bitmap with page_or: same bits,
 * and dirty exactly where there are bits.  Then OR all ones into the
 * last page: only the bits below nr_bits appear.
 */
static void
test_page_round_trip (void)
{
  struct bitmap src, dst;
  uint64_t a[BM_PAGE_WORDS], z[BM_PAGE_WORDS], p, i, before;
  unsigned pages_with_bits = 0;

  CHECK (bitmap_init (&src, NB) == 0);
  CHECK (bitmap_init (&dst, NB) == 0);
  bitmap_set_range (&src, 3, 700);
  bitmap_set_range (&src, PB - 1, PB);
  bitmap_set_range (&src, NB - 40, NB - 1);
  for (p = 0; p < NPAGES; p++) {
    bitmap_page_get (&src, p, a);
    bitmap_page_or (&dst, p, a);
    if (bitmap_any (&src, p * PB, p * PB + PB - 1))
      pages_with_bits |= 1u << p;
  }
  CHECK (pages_with_bits == 0xb);
  CHECK (dirty_pages (&dst) == pages_with_bits);
  CHECK (bitmap_count (&dst) == bitmap_count (&src));
  for (p = 0; p < NPAGES; p++) {
    bitmap_page_get (&src, p, a);
    bitmap_page_get (&dst, p, z);
    CHECKF (memcmp (a, z, sizeof a) == 0, "page %llu differs",
            (unsigned long long) p);
  }

  /* ORing what is already there changes nothing and dirties nothing. */
  take_all_dirty (&dst);
  bitmap_page_get (&src, 0, a);
  bitmap_page_or (&dst, 0, a);
  CHECK (dirty_pages (&dst) == 0);

  /* All ones into the last page: the padding stays clear. */
  memset (a, 0xff, sizeof a);
  before = bitmap_count (&dst);
  bitmap_page_or (&dst, NPAGES - 1, a);
  CHECK (bitmap_count (&dst) == before + (NB - 3 * PB) - 40);
  CHECK (dirty_pages (&dst) == 1u << (NPAGES - 1));
  bitmap_page_get (&dst, NPAGES - 1, z);
  CHECK (z[0] == UINT64_MAX);
  CHECK (z[1] == (UINT64_C (1) << (100 - 64)) - 1);
  for (i = 2; i < BM_PAGE_WORDS; i++)
    CHECKF (z[i] == 0, "padding word %llu is 0x%llx",
            (unsigned long long) i, (unsigned long long) z[i]);
  CHECK (bitmap_next_set (&dst, NB - 1) == NB - 1);
  bitmap_free (&src);
  bitmap_free (&dst);
}

static const uint64_t all_sizes[] = {
  1, 63, 64, 65, 1000, PB - 1, PB, PB + 1, 2 * PB + 77, 5 * PB - 64,
};

/* set_all sets exactly nr_bits bits and no padding; clear_all clears. */
static void
test_all (void)
{
  size_t i;

  for (i = 0; i < sizeof all_sizes / sizeof all_sizes[0]; i++) {
    uint64_t n = all_sizes[i], pages = (n + PB - 1) / PB;
    uint64_t words[BM_PAGE_WORDS], w, in_last = 0;
    struct bitmap b;

    CHECKF (bitmap_init (&b, n) == 0, "%llu bits", (unsigned long long) n);
    CHECKF (b.nr_pages == pages, "%llu bits", (unsigned long long) n);
    bitmap_set_all (&b);
    CHECKF (bitmap_count (&b) == n, "%llu bits: count %llu",
            (unsigned long long) n, (unsigned long long) bitmap_count (&b));
    CHECKF (dirty_pages (&b) == (1u << pages) - 1, "%llu bits",
            (unsigned long long) n);
    CHECKF (bitmap_next_set (&b, n - 1) == n - 1, "%llu bits",
            (unsigned long long) n);
    CHECKF (bitmap_test (&b, n - 1) && !bitmap_test (&b, n), "%llu bits",
            (unsigned long long) n);

    /* The last page holds exactly its share, in its lowest bits. */
    bitmap_page_get (&b, pages - 1, words);
    for (w = 0; w < BM_PAGE_WORDS; w++)
      in_last += __builtin_popcountll (words[w]);
    CHECKF (in_last == n - (pages - 1) * PB, "%llu bits: last page has %llu",
            (unsigned long long) n, (unsigned long long) in_last);
    w = (n - 1) % PB / 64;
    CHECKF (words[w] == UINT64_MAX >> (63 - (n - 1) % 64),
            "%llu bits: top word 0x%llx", (unsigned long long) n,
            (unsigned long long) words[w]);

    take_all_dirty (&b);
    bitmap_clear_all (&b);
    CHECKF (bitmap_count (&b) == 0, "%llu bits", (unsigned long long) n);
    CHECKF (dirty_pages (&b) == (1u << pages) - 1, "%llu bits",
            (unsigned long long) n);
    bitmap_free (&b);
  }
}

/* An empty bitmap: nothing to set, nothing to find. */
static void
test_empty (void)
{
  struct bitmap b;

  CHECK (bitmap_init (&b, 0) == 0);
  CHECK (b.nr_pages == 0);
  bitmap_set_all (&b);
  CHECK (bitmap_set_range (&b, 0, UINT64_MAX) == 0);
  CHECK (bitmap_count (&b) == 0);
  CHECK (bitmap_next_set (&b, 0) == 0);
  CHECK (bitmap_next_dirty_page (&b, 0) == 0);
  CHECK (!bitmap_any (&b, 0, UINT64_MAX));
  CHECK (!bitmap_test (&b, 0));
  bitmap_mark_all_dirty (&b);
  bitmap_free (&b);
}

#define THREADS 4
#define THREADED_BITS (2 * PB + 1000)
#define HOT_BITS 256            /* 4 words that every thread hammers */
#define HOT_ROUNDS 30000

struct setter {
  pthread_t thread;
  struct bitmap *b;
  pthread_barrier_t *start;     /* so that the threads overlap */
  unsigned id;
  uint64_t changed;
};

/* Thread: set then clear its bits of the first HOT_BITS, one at a time,
 * HOT_ROUNDS times (a lost update shows as a clear that changes
 * nothing); then set all its bits of the bitmap.  Its bits are those i
 * with i % THREADS == id, so every word is shared by all threads.
 */
static void *
setter_thread (void *arg)
{
  struct setter *s = arg;
  uint64_t i;
  int round;

  pthread_barrier_wait (s->start);
  for (round = 0; round < HOT_ROUNDS; round++) {
    for (i = s->id; i < HOT_BITS; i += THREADS)
      s->changed += bitmap_set_range (s->b, i, i);
    for (i = s->id; i < HOT_BITS; i += THREADS)
      s->changed += bitmap_clear_range (s->b, i, i);
  }
  for (i = s->id; i < THREADED_BITS; i += THREADS)
    s->changed += bitmap_set_range (s->b, i, i);
  return NULL;
}

struct writer {
  pthread_t thread;
  struct bitmap *b;
  uint64_t snapshot[3][BM_PAGE_WORDS];  /* what the "disk" holds */
  atomic_bool stop;
};

/* Snapshot every dirty page, as the metadata writer does. */
static void
write_dirty_pages (struct writer *w)
{
  uint64_t p;

  for (p = 0; p < w->b->nr_pages; p++)
    if (bitmap_page_take_dirty (w->b, p))
      bitmap_page_get (w->b, p, w->snapshot[p]);
}

/* Thread: write dirty pages until told to stop. */
static void *
writer_thread (void *arg)
{
  struct writer *w = arg;

  while (!atomic_load (&w->stop))
    write_dirty_pages (w);
  return NULL;
}

/* Setters share every word; the counts of changes are exact, and a
 * writer that snapshots dirty pages concurrently loses no bit.
 */
static void
test_threads (void)
{
  static struct writer w;
  struct setter s[THREADS];
  pthread_barrier_t start;
  struct bitmap b;
  const uint64_t hot_changes = 2 * HOT_ROUNDS * (HOT_BITS / THREADS);
  uint64_t page[BM_PAGE_WORDS], total = 0, p;
  unsigned i;

  CHECK (bitmap_init (&b, THREADED_BITS) == 0);
  CHECK (b.nr_pages == 3);
  memset (&w, 0, sizeof w);
  w.b = &b;
  atomic_init (&w.stop, false);
  CHECK (pthread_create (&w.thread, NULL, writer_thread, &w) == 0);
  CHECK (pthread_barrier_init (&start, NULL, THREADS) == 0);
  for (i = 0; i < THREADS; i++) {
    s[i] = (struct setter) { .b = &b, .start = &start, .id = i };
    CHECK (pthread_create (&s[i].thread, NULL, setter_thread, &s[i]) == 0);
  }
  for (i = 0; i < THREADS; i++) {
    pthread_join (s[i].thread, NULL);
    CHECKF (s[i].changed == hot_changes + THREADED_BITS / THREADS,
            "thread %u: %llu", i, (unsigned long long) s[i].changed);
    total += s[i].changed;
  }
  pthread_barrier_destroy (&start);
  atomic_store (&w.stop, true);
  pthread_join (w.thread, NULL);

  CHECK (total == THREADS * hot_changes + THREADED_BITS);
  CHECK (bitmap_count (&b) == THREADED_BITS);
  /* What is still dirty is written now; then the "disk" is complete. */
  write_dirty_pages (&w);
  for (p = 0; p < b.nr_pages; p++) {
    bitmap_page_get (&b, p, page);
    CHECKF (memcmp (page, w.snapshot[p], sizeof page) == 0,
            "page %llu: a set bit was lost", (unsigned long long) p);
  }
  bitmap_free (&b);
}

int
main (void)
{
  test_ranges ();
  test_steps ();
  test_next ();
  test_page_round_trip ();
  test_all ();
  test_empty ();
  test_threads ();
  return unit_exit ("unit-bitmap");
}
