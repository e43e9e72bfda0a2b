/* SPDX-License-Identifier: BSD-3-Clause */
/* On-disk metadata format: layout, encoding and decoding (pure).
 *
 * Every leg reserves a metadata area at its end (DRBD "internal"
 * metadata).  The data area before it is a plain raw image of the
 * volume.  From the end of the leg backwards:
 *
 *   leg_size - 8192   superblock copy 0 (4096 bytes)
 *   leg_size - 4096   superblock copy 1 (4096 bytes)
 *   before those      activity log, copy 0 then copy 1 (al_bytes each)
 *   before those      out-of-sync bitmaps: for slot s, page p, copy c
 *                     the 4096-byte record ((s * bm_pages + p) * 2 + c)
 *
 * so md_size = max_legs * bm_pages * 2 * 4096 + 2 * al_bytes + 8192
 * and a leg of size S holds the volume if volume_size <= S - md_size.
 * The superblock is always found in the last 8 KiB, whatever the leg's
 * size, which is how "nbdrep inspect" finds it.
 *
 * Every record starts with the same 32-byte header, little-endian:
 *
 *   0   u64  magic      "NBDRPSB1", "NBDRPAL1" or "NBDRPBM1"
 *   8   u32  version    META_VERSION
 *   12  u32  length     bytes covered by the checksum, from offset 0
 *   16  u32  crc32c     of bytes [0, length) with this field zero
 *   20  u32  reserved   zero
 *   24  u64  seq        sequence number of this record
 *
 * Each record is written as two alternating copies: write number seq
 * goes to copy (seq % 2).  On reading, the valid copy with the higher
 * seq wins, so a torn write of one copy leaves the other.  Decoders
 * check every field; a record that fails a check is reported with the
 * reason and never trusted.
 *
 * Superblock body (offsets from the start of the record):
 *
 *   32  u8[16] volume_uuid        48  u8[16] leg_uuid
 *   64  u32 slot                  68  u32 max_legs
 *   72  u32 flags (SB_INCONSISTENT)
 *   76  u32 quorum
 *   80  u64 volume_size           88  u32 chunk_size
 *   92  u32 al_extent_size        96  u32 al_extents
 *   100 u32 history_len
 *   104 u64 ctime (unix seconds)  112 u64 mtime (unix seconds)
 *   120 gen  generation (u64 counter, u64 id)
 *   136 gen  history[META_HISTORY] (newest first)
 *   136 + 16 * META_HISTORY: per slot (MAX_LEGS entries of 40 bytes,
 *         those from max_legs on all zero)
 *         u8[16] leg_uuid, u32 flags (SLOT_ASSIGNED, SLOT_MEMBER,
 *         SLOT_TRACKER, SLOT_BASE), u32 reserved, gen bm_gen; a tracker
 *         slot (backup.c) holds the token of a backup in leg_uuid and is
 *         never a member
 *   length is always 136 + 16 * META_HISTORY + 40 * MAX_LEGS (1288);
 *   history entries from history_len on are zero
 *
 * Activity-log body:
 *
 *   32  u8[16] volume_uuid   48  u32 al_extent_size   52  u32 nr
 *   56  u32 extents[nr]  (sorted, unique, extent numbers)
 *
 * Bitmap page body:
 *
 *   32  u8[16] volume_uuid   48  u32 slot   52  u32 page
 *   56  gen bm_gen (u64 counter, u64 id): the slot's bm_gen when the
 *       page was written; a page whose bm_gen is not the slot's current
 *       one is left over from an earlier absence and is not used
 *   72  u8[8] reserved
 *   80  u64 words[BM_PAGE_WORDS]  (bit i of the page = chunk
 *       page * BM_PAGE_BITS + i; bit i is bit (i % 64) of word i / 64)
 */

#ifndef REPLICATE_META_H
#define REPLICATE_META_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "params.h"

#define META_VERSION 1
#define META_BLOCK 4096              /* every record is written in 4K units */
#define META_HISTORY 32              /* earlier generations remembered */
#define META_SB_AREA (2 * META_BLOCK)

#define BM_PAGE_HEADER 80
#define BM_PAGE_WORDS ((META_BLOCK - BM_PAGE_HEADER) / 8)   /* 502 */
#define BM_PAGE_BITS (BM_PAGE_WORDS * 64)                   /* 32128 */

#define AL_HEADER 56
#define AL_MAX_EXTENTS 65536

/* Superblock flags. */
#define SB_INCONSISTENT   (1u << 0)
/* Slot flags. */
#define SLOT_ASSIGNED     (1u << 0)  /* the slot belongs to leg_uuid */
#define SLOT_MEMBER       (1u << 1)  /* that leg is uptodate at this gen */
#define SLOT_TRACKER      (1u << 2)  /* no leg: the changed-block tracker */
#define SLOT_BASE         (1u << 3)  /* tracker: the backup uuid names is done */

/* Results of the decoders. */
enum meta_status {
  META_OK = 0,
  META_BLANK,        /* no record here: the magic is not ours */
  META_CORRUPT,      /* our magic, but a check failed: see the message */
};

/* A generation: a counter and a random id. */
struct gen {
  uint64_t counter;
  uint64_t id;
};

struct sb_slot {
  uint8_t uuid[16];
  uint32_t flags;
  struct gen bm_gen;    /* the slot's bitmap counts from this generation */
};

struct superblock {
  uint64_t seq;
  uint8_t volume_uuid[16];
  uint8_t leg_uuid[16];
  uint32_t slot;
  uint32_t max_legs;
  uint32_t flags;
  uint32_t quorum;
  uint64_t volume_size;
  uint32_t chunk_size;
  uint32_t al_extent_size;
  uint32_t al_extents;
  uint32_t history_len;
  uint64_t ctime;
  uint64_t mtime;
  struct gen gen;
  struct gen history[META_HISTORY];
  struct sb_slot slots[MAX_LEGS];
};

/* Where everything is, for one volume geometry. */
struct md_layout {
  uint64_t volume_size;
  uint32_t chunk;
  uint32_t max_legs;
  uint32_t al_extent;
  uint32_t al_extents;
  uint64_t nr_chunks;        /* ceil (volume_size / chunk) */
  uint64_t nr_al_extents;    /* ceil (volume_size / al_extent) */
  uint64_t bm_pages;         /* bitmap pages per slot */
  uint64_t al_bytes;         /* one activity-log copy, a multiple of 4K */
  uint64_t md_size;          /* the whole metadata area */
};

/* Compute the layout for a geometry.  Returns 0, or -1 with a message
 * if the geometry is invalid (chunk not a power of two, al_extent not a
 * power of two multiple of chunk, max_legs out of range ...).
 */
extern int md_layout_init (struct md_layout *l, uint64_t volume_size,
                           uint32_t chunk, uint32_t max_legs,
                           uint32_t al_extent, uint32_t al_extents,
                           char *err, size_t errlen);

/* The largest volume (a multiple of 4096) a leg of leg_size bytes can
 * hold with this geometry, or 0 if it is too small for any.
 */
extern uint64_t md_max_volume_size (uint64_t leg_size, uint32_t chunk,
                                    uint32_t max_legs, uint32_t al_extent,
                                    uint32_t al_extents);

/* Offsets within a leg of leg_size bytes. */
extern uint64_t md_sb_offset (uint64_t leg_size, unsigned copy);
extern uint64_t md_al_offset (const struct md_layout *l, uint64_t leg_size,
                              unsigned copy);
extern uint64_t md_bm_offset (const struct md_layout *l, uint64_t leg_size,
                              unsigned slot, uint64_t page, unsigned copy);
/* Start of the metadata area (= end of the usable data area). */
extern uint64_t md_area_offset (const struct md_layout *l, uint64_t leg_size);

/* Superblock codec.  buf is META_BLOCK bytes.  decode fills *sb and
 * returns META_OK, or META_BLANK / META_CORRUPT with the reason in err.
 */
extern void sb_encode (const struct superblock *sb, uint8_t *buf);
extern enum meta_status sb_decode (const uint8_t *buf, struct superblock *sb,
                                   char *err, size_t errlen);

/* Given the decode results of both copies, which one to trust: 0 or 1,
 * or -1 if neither is valid.
 */
extern int meta_pick_copy (enum meta_status s0, uint64_t seq0,
                           enum meta_status s1, uint64_t seq1);

/* Activity-log record size for a capacity (a multiple of META_BLOCK). */
extern uint64_t al_record_bytes (uint32_t al_extents);

/* Activity-log codec.  buf is al_record_bytes (capacity) bytes.
 * extents must be sorted and unique, nr <= capacity.  decode checks
 * the volume UUID, the extent size, that every extent number is below
 * nr_al_extents, sorted and unique, and that nr <= capacity; it writes
 * at most capacity extents.
 */
extern void al_encode (uint8_t *buf, uint32_t capacity, uint64_t seq,
                       const uint8_t volume_uuid[16], uint32_t al_extent,
                       const uint32_t *extents, uint32_t nr);
extern enum meta_status al_decode (const uint8_t *buf, uint32_t capacity,
                                   const uint8_t volume_uuid[16],
                                   uint32_t al_extent,
                                   uint64_t nr_al_extents,
                                   uint64_t *seq, uint32_t *extents,
                                   uint32_t *nr, char *err, size_t errlen);

/* Bitmap page codec.  buf is META_BLOCK bytes, words BM_PAGE_WORDS.
 * decode checks the volume UUID, slot and page number, and returns the
 * page's bm_gen for the caller to compare with the slot's.
 */
extern void bm_page_encode (uint8_t *buf, uint64_t seq,
                            const uint8_t volume_uuid[16],
                            uint32_t slot, uint32_t page,
                            struct gen bm_gen, const uint64_t *words);
extern enum meta_status bm_page_decode (const uint8_t *buf,
                                        const uint8_t volume_uuid[16],
                                        uint32_t slot, uint32_t page,
                                        uint64_t *seq, struct gen *bm_gen,
                                        uint64_t *words,
                                        char *err, size_t errlen);

/* What a bitmap page contributes to its slot's bitmap, from its two
 * copies as read (2 * META_BLOCK bytes): the newest copy written for
 * the slot's current bm_gen (CURRENT); nothing if the valid copies are
 * left over from an earlier absence (STALE) or the page was never
 * written (BLANK); every bit if both copies are damaged (CORRUPT: what
 * they said cannot be known).  Fills words and *seq (0 unless CURRENT).
 */
enum bm_page_kind {
  BM_PAGE_CURRENT,
  BM_PAGE_STALE,
  BM_PAGE_CORRUPT,
  BM_PAGE_BLANK,
};
extern enum bm_page_kind bm_page_pick (const uint8_t *copies,
                                       const uint8_t volume_uuid[16],
                                       uint32_t slot, uint32_t page,
                                       struct gen bm_gen, uint64_t *seq,
                                       uint64_t *words);

/* Generations. */
extern bool gen_equal (struct gen a, struct gen b);
/* Is g the superblock's generation or in its history? */
extern bool sb_knows_gen (const struct superblock *sb, struct gen g);
/* Is the leg whose own superblock is leg assigned its slot in r? */
extern bool sb_owns_slot (const struct superblock *r,
                          const struct superblock *leg);
/* Push sb->gen onto the history and make next the generation. */
extern void sb_push_gen (struct superblock *sb, struct gen next);

#endif /* REPLICATE_META_H */
