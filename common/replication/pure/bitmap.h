/* SPDX-License-Identifier: BSD-3-Clause */
/* Out-of-sync bitmap of one slot, in memory (bit = chunk).
 *
 * Writers that skip an absent leg set its bits from many threads at
 * once without a lock: every word is atomic.  The bitmap is cut into
 * pages of BM_PAGE_BITS bits, the unit written to disk (meta.h); a page
 * is marked dirty whenever one of its bits changes, and the metadata
 * writer clears the dirty mark before it snapshots the page, so a bit
 * set during the write marks the page dirty again and is not lost.
 *
 * Memory: one bit per chunk plus one byte per page (2 MiB per TiB at
 * 64 KiB chunks).
 */

#ifndef REPLICATE_BITMAP_H
#define REPLICATE_BITMAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "meta.h"

struct bitmap {
  uint64_t nr_bits;
  uint64_t nr_pages;
  _Atomic uint64_t *words;      /* nr_pages * BM_PAGE_WORDS words */
  _Atomic uint8_t *page_dirty;  /* one per page */
};

/* Allocate a cleared bitmap of nr_bits bits (no page dirty).  Returns
 * 0 or -1 (ENOMEM).
 */
extern int bitmap_init (struct bitmap *b, uint64_t nr_bits);
extern void bitmap_free (struct bitmap *b);

/* Set / clear bits [first, last] (inclusive, clamped to nr_bits).
 * Pages whose bits changed are marked dirty.  Return the number of bits
 * that changed.
 */
extern uint64_t bitmap_set_range (struct bitmap *b, uint64_t first,
                                  uint64_t last);
extern uint64_t bitmap_clear_range (struct bitmap *b, uint64_t first,
                                    uint64_t last);
/* Set bits [first, last] (clamped) without counting them: what writes
 * that skip an absent leg call, on the data path.
 */
extern void bitmap_mark_range (struct bitmap *b, uint64_t first,
                               uint64_t last);
extern void bitmap_set_all (struct bitmap *b);
extern void bitmap_clear_all (struct bitmap *b);

extern bool bitmap_test (const struct bitmap *b, uint64_t bit);
/* Is any bit in [first, last] set? */
extern bool bitmap_any (const struct bitmap *b, uint64_t first,
                        uint64_t last);
/* First set bit >= from, or nr_bits if none. */
extern uint64_t bitmap_next_set (const struct bitmap *b, uint64_t from);
/* Number of set bits. */
extern uint64_t bitmap_count (const struct bitmap *b);

/* Copy page p out (BM_PAGE_WORDS words; bits past nr_bits are zero). */
extern void bitmap_page_get (const struct bitmap *b, uint64_t p,
                             uint64_t *words);
/* OR a page loaded from disk into page p (bits past nr_bits ignored). */
extern void bitmap_page_or (struct bitmap *b, uint64_t p,
                            const uint64_t *words);

extern void bitmap_page_mark_dirty (struct bitmap *b, uint64_t p);
extern void bitmap_mark_all_dirty (struct bitmap *b);
/* Clear the dirty mark of page p; return whether it was set. */
extern bool bitmap_page_take_dirty (struct bitmap *b, uint64_t p);
extern bool bitmap_page_is_dirty (const struct bitmap *b, uint64_t p);
/* First dirty page >= from, or nr_pages if none. */
extern uint64_t bitmap_next_dirty_page (const struct bitmap *b,
                                        uint64_t from);

#endif /* REPLICATE_BITMAP_H */
