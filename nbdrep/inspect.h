/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep inspect: what was found on a leg (inspect.c reads and decodes
 * it, inspect-text.c and inspect-json.c show it).
 */

#ifndef NBDREP_INSPECT_H
#define NBDREP_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include "meta.h"

/* One superblock copy as decoded. */
struct sb_copy {
  enum meta_status st;
  struct superblock sb;
  char why[160];                /* the decoder's reason if not META_OK */
};

/* One activity-log copy as decoded. */
struct al_copy {
  enum meta_status st;
  uint64_t seq;
  uint32_t nr;                  /* extents in this copy */
  char why[160];
};

/* The out-of-sync state of an absent slot, from its bitmap pages, and
 * with the activity log's hot extents added (bitmaps are written
 * lazily: until an extent cools, the log covers it; a restart ORs the
 * log into the bitmaps, so the second count is what a resync of the
 * slot's leg would copy).  A
 * page is "current" if a valid copy carries the slot's bm_gen (the
 * newest such copy counts), "stale" if its valid copies are from an
 * earlier absence (counted clear), "corrupt" if both copies fail their
 * checks (counted all set: nothing can be trusted), else "blank" (never
 * written, counted clear).
 */
struct slot_oos {
  unsigned slot;
  uint64_t chunks, bytes;       /* set in the bitmap */
  uint64_t chunks_with_al, bytes_with_al;   /* bitmap or hot extents */
  uint64_t pages_current, pages_stale, pages_blank, pages_corrupt;
};

/* Everything inspect found on a leg. */
struct exam {
  const char *uri;
  uint64_t leg_size;

  struct sb_copy sbc[2];
  int pick;                     /* the superblock copy that won, or -1 */
  const struct superblock *sb;  /* &sbc[pick].sb */

  struct md_layout layout;
  uint64_t area_offset;         /* start of the metadata area */

  struct al_copy alc[2];
  int al_pick;                  /* the activity-log copy that won, or -1 */
  uint32_t *extents;            /* the winning copy's extents */
  uint32_t nr_extents;

  struct slot_oos oos[MAX_LEGS];
  size_t nr_oos;
};

/* ---- inspect.c: helpers for the renderings ----------------------- */

/* "ok", "blank" or "corrupt". */
extern const char *meta_status_word (enum meta_status st);
/* A generation as COUNTER:ID (ID 16 hex digits); buf of 40 bytes. */
extern void gen_format (struct gen g, char *buf, size_t len);
/* A Unix time as ISO 8601 UTC. */
extern void time_format (uint64_t t, char *buf, size_t len);
/* Slot flags as words: "assigned,member", "assigned" or "free". */
extern const char *slot_flags_word (uint32_t flags);
/* A slot's role seen from this leg: "this leg", "absent" (assigned,
 * not a member), "this leg, absent", or NULL.
 */
extern const char *slot_role (const struct exam *e, uint32_t s);
/* Why the losing copy did not win (both records of one kind), e.g.
 * "older (seq 6)" or "corrupt: superblock: checksum mismatch ...".
 */
extern void loser_reason (enum meta_status st, uint64_t seq,
                          uint64_t winner_seq, const char *why,
                          char *buf, size_t len);
/* The byte range of a run of activity-log extents [first, last],
 * clamped to the volume.
 */
extern void extent_run_bytes (const struct exam *e, uint32_t first,
                              uint32_t last, uint64_t *offset,
                              uint64_t *length);
/* The end of the run of consecutive extents starting at index i. */
extern uint32_t extent_run_end (const struct exam *e, uint32_t i);

/* ---- inspect-text.c, inspect-json.c ------------------------------ */

extern void inspect_print_text (const struct exam *e);
/* Returns 0 or -1. */
extern int inspect_print_json (const struct exam *e);

#endif /* NBDREP_INSPECT_H */
