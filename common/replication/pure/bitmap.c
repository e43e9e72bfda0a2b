/* SPDX-License-Identifier: BSD-3-Clause */
/* Out-of-sync bitmap of one slot (the idea is in bitmap.h).
 *
 * Invariants:
 * - Bits at or past nr_bits (the padding of the last page) are never
 *   set: ranges are clamped and loaded pages are masked.  So counting
 *   and scanning may look at whole words.
 * - A page is marked dirty after any change to one of its words, by the
 *   thread that made the change.
 *
 * Dirty marks and the metadata writer: a writer does take_dirty
 * (exchange with 0) and then loads the words of the page; a setter
 * changes a word (fetch_or/fetch_and) and then marks the page (a load,
 * and a store of 1 if it was 0).  All of these are sequentially
 * consistent, so they fall in one total order.  If the writer's load
 * misses the setter's change, the change comes after the load, hence
 * after the exchange; the setter's mark then either stores 1 after the
 * exchange or reads a 1 that was stored after it.  Either way the page
 * is dirty again, and the change is written next time.  Loading the
 * mark first saves a store (and a cache line bounce) when it is
 * already set.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "bitmap.h"

/* Words of a bitmap that can hold bits: ceil (nr_bits / 64). */
static uint64_t
nr_words (const struct bitmap *b)
{
  return b->nr_bits / 64 + (b->nr_bits % 64 != 0);
}

/* Mask of the bits of word w that are within [first, last]. */
static uint64_t
word_mask (uint64_t w, uint64_t first, uint64_t last)
{
  unsigned lo = w == first / 64 ? first % 64 : 0;
  unsigned hi = w == last / 64 ? last % 64 : 63;

  return (UINT64_MAX << lo) & (UINT64_MAX >> (63 - hi));
}

/* Mask of the bits of word w that are below nr_bits. */
static uint64_t
valid_mask (const struct bitmap *b, uint64_t w)
{
  if (w >= nr_words (b))
    return 0;
  return word_mask (w, 0, b->nr_bits - 1);
}

/* Clamp [*first, *last] to the bitmap.  Returns false if empty. */
static bool
clamp_range (const struct bitmap *b, uint64_t first, uint64_t *last)
{
  if (first >= b->nr_bits || first > *last)
    return false;
  if (*last >= b->nr_bits)
    *last = b->nr_bits - 1;
  return true;
}

/* Allocate a cleared bitmap (see bitmap.h). */
int
bitmap_init (struct bitmap *b, uint64_t nr_bits)
{
  uint64_t nr_pages = nr_bits / BM_PAGE_BITS + (nr_bits % BM_PAGE_BITS != 0);

  b->nr_bits = nr_bits;
  b->nr_pages = nr_pages;
  b->words = NULL;
  b->page_dirty = NULL;
  if (nr_pages == 0)
    return 0;
  if (nr_pages > SIZE_MAX / (BM_PAGE_WORDS * sizeof *b->words)) {
    errno = ENOMEM;
    return -1;
  }
  b->words = calloc (nr_pages * BM_PAGE_WORDS, sizeof *b->words);
  b->page_dirty = calloc (nr_pages, sizeof *b->page_dirty);
  if (b->words == NULL || b->page_dirty == NULL) {
    bitmap_free (b);
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

/* Free the bitmap's memory and leave it empty. */
void
bitmap_free (struct bitmap *b)
{
  free (b->words);
  free (b->page_dirty);
  b->words = NULL;
  b->page_dirty = NULL;
  b->nr_bits = b->nr_pages = 0;
}

/* Set or clear the bits of mask in word w; mark its page dirty if any
 * changed.  Returns the mask of the bits that changed.
 */
static uint64_t
update_word (struct bitmap *b, uint64_t w, uint64_t mask, bool set)
{
  uint64_t old, changed;

  if (set) {
    old = atomic_fetch_or (&b->words[w], mask);
    changed = mask & ~old;
  }
  else {
    old = atomic_fetch_and (&b->words[w], ~mask);
    changed = mask & old;
  }
  if (changed != 0)
    bitmap_page_mark_dirty (b, w / BM_PAGE_WORDS);
  return changed;
}

/* Set or clear [first, last] (clamped).  Returns the bits changed,
 * counted only if count is true.
 */
static uint64_t
update_range (struct bitmap *b, uint64_t first, uint64_t last, bool set,
              bool count)
{
  uint64_t w, changed = 0;

  if (!clamp_range (b, first, &last))
    return 0;
  for (w = first / 64; w <= last / 64; w++) {
    uint64_t m = update_word (b, w, word_mask (w, first, last), set);
    if (count && m != 0)
      changed += (uint64_t) __builtin_popcountll (m);
  }
  return changed;
}

/* Set bits [first, last]; returns how many changed. */
uint64_t
bitmap_set_range (struct bitmap *b, uint64_t first, uint64_t last)
{
  return update_range (b, first, last, true, true);
}

/* Clear bits [first, last]; returns how many changed. */
uint64_t
bitmap_clear_range (struct bitmap *b, uint64_t first, uint64_t last)
{
  return update_range (b, first, last, false, true);
}

/* Set bits [first, last] without counting them. */
void
bitmap_mark_range (struct bitmap *b, uint64_t first, uint64_t last)
{
  update_range (b, first, last, true, false);
}

/* Set every bit below nr_bits. */
void
bitmap_set_all (struct bitmap *b)
{
  update_range (b, 0, UINT64_MAX, true, false);
}

/* Clear every bit. */
void
bitmap_clear_all (struct bitmap *b)
{
  update_range (b, 0, UINT64_MAX, false, false);
}

/* Is bit set?  Bits past nr_bits are not. */
bool
bitmap_test (const struct bitmap *b, uint64_t bit)
{
  if (bit >= b->nr_bits)
    return false;
  return (atomic_load (&b->words[bit / 64]) >> (bit % 64)) & 1;
}

/* Is any bit in [first, last] set? */
bool
bitmap_any (const struct bitmap *b, uint64_t first, uint64_t last)
{
  uint64_t w;

  if (!clamp_range (b, first, &last))
    return false;
  for (w = first / 64; w <= last / 64; w++)
    if (atomic_load (&b->words[w]) & word_mask (w, first, last))
      return true;
  return false;
}

/* First set bit >= from, or nr_bits if none. */
uint64_t
bitmap_next_set (const struct bitmap *b, uint64_t from)
{
  uint64_t w, n = nr_words (b), v;

  if (from >= b->nr_bits)
    return b->nr_bits;
  w = from / 64;
  v = atomic_load (&b->words[w]) & (UINT64_MAX << (from % 64));
  while (v == 0) {
    if (++w >= n)
      return b->nr_bits;
    v = atomic_load (&b->words[w]);
  }
  return w * 64 + __builtin_ctzll (v);
}

/* Number of set bits. */
uint64_t
bitmap_count (const struct bitmap *b)
{
  uint64_t w, n = nr_words (b), count = 0;

  for (w = 0; w < n; w++)
    count += __builtin_popcountll (atomic_load (&b->words[w]));
  return count;
}

/* Copy page p out into words (BM_PAGE_WORDS). */
void
bitmap_page_get (const struct bitmap *b, uint64_t p, uint64_t *words)
{
  uint64_t i;

  assert (p < b->nr_pages);
  for (i = 0; i < BM_PAGE_WORDS; i++)
    words[i] = atomic_load (&b->words[p * BM_PAGE_WORDS + i]);
}

/* OR a page from disk into page p, ignoring bits past nr_bits; the page
 * is marked dirty if that changed it, like any other change.
 */
void
bitmap_page_or (struct bitmap *b, uint64_t p, const uint64_t *words)
{
  uint64_t i, w, bits;

  assert (p < b->nr_pages);
  for (i = 0; i < BM_PAGE_WORDS; i++) {
    w = p * BM_PAGE_WORDS + i;
    bits = words[i] & valid_mask (b, w);
    if (bits != 0)
      update_word (b, w, bits, true);
  }
}

/* Mark page p dirty (storing only if it is not already). */
void
bitmap_page_mark_dirty (struct bitmap *b, uint64_t p)
{
  assert (p < b->nr_pages);
  if (!atomic_load (&b->page_dirty[p]))
    atomic_store (&b->page_dirty[p], 1);
}

/* Mark every page dirty. */
void
bitmap_mark_all_dirty (struct bitmap *b)
{
  uint64_t p;

  for (p = 0; p < b->nr_pages; p++)
    bitmap_page_mark_dirty (b, p);
}

/* Clear the dirty mark of page p; return whether it was set. */
bool
bitmap_page_take_dirty (struct bitmap *b, uint64_t p)
{
  assert (p < b->nr_pages);
  return atomic_exchange (&b->page_dirty[p], 0) != 0;
}

/* Is page p dirty? */
bool
bitmap_page_is_dirty (const struct bitmap *b, uint64_t p)
{
  assert (p < b->nr_pages);
  return atomic_load (&b->page_dirty[p]) != 0;
}

/* First dirty page >= from, or nr_pages if none. */
uint64_t
bitmap_next_dirty_page (const struct bitmap *b, uint64_t from)
{
  uint64_t p;

  for (p = from; p < b->nr_pages; p++)
    if (atomic_load (&b->page_dirty[p]))
      return p;
  return b->nr_pages;
}
