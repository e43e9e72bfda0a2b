/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for the metadata decoders (meta.c).
 *
 * The input, zero-padded or cut, is taken as a superblock block, an
 * activity log of FUZZ_AL_CAP extents and a bitmap page, and each
 * decoder runs on it; the sanitizers catch any out-of-bounds access.
 * The expected volume UUID, extent size, slot and page are fixed, so
 * the fuzzer has to match them (its comparison tracing finds them).
 *
 * An input of odd size is sealed first: the crc field of each record
 * (superblock block, activity log, bitmap page) is set to the crc32c
 * of the bytes its length field covers, as an encoder does, so that
 * mutations reach the checks behind the checksum; an input of even size
 * is decoded as it is.  Seeds: tests/fuzz-corpus/fuzz-meta/, one valid
 * record of each kind as meta.c's encoders write it (a superblock of a
 * 3-slot volume, an activity log of 3 extents, bitmap page 5 of slot
 * 3, with the fixed values below), and a NUL byte to make it odd.
 *
 * Whenever a decoder says META_OK, the record must be canonical: the
 * re-encoding of what was decoded equals the input over [0, length)
 * (every covered byte is decoded or checked), and decoding the
 * re-encoding gives the same values again.  Anything else aborts.
 *
 * make check-fuzz builds and runs it (tests/check-fuzz.sh); by hand,
 * keeping the products out of the tree:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. \
 *     -Icommon/utils -Icommon/mdformat common/mdformat/fuzz-meta.c \
 *     common/mdformat/meta.c common/utils/crc32c.c -o /tmp/fuzz-meta
 *   cp -r tests/fuzz-corpus/fuzz-meta /tmp/corpus-meta
 *   /tmp/fuzz-meta -max_total_time=60 -dict=tests/fuzz-corpus/fuzz-meta.dict \
 *     /tmp/corpus-meta
 */

#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "meta.h"

#define FUZZ_AL_CAP 1500
#define FUZZ_AL_BYTES 8192      /* al_record_bytes (FUZZ_AL_CAP): 6056 up */
#define FUZZ_AL_EXTENT (4 * 1024 * 1024)
#define FUZZ_NR_AL_EXTENTS 100000
#define FUZZ_SLOT 3
#define FUZZ_PAGE 5

static const uint8_t fuzz_volume[16] = "fuzz-volume-id!";

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* The record length field of an encoded block (little-endian u32). */
static uint32_t
record_length (const uint8_t *buf)
{
  return buf[12] | buf[13] << 8 | buf[14] << 16 | (uint32_t) buf[15] << 24;
}

/* Seal the record in buf (size bytes): its crc field (offset 16) set
 * to the crc32c of [0, length) taken with that field zero, when its
 * length field covers the header and fits.
 */
static void
seal (uint8_t *buf, size_t size)
{
  static const uint8_t zero[4];
  uint32_t length = record_length (buf), crc;

  if (length < 32 || length > size)
    return;
  crc = crc32c (0, buf, 16);
  crc = crc32c (crc, zero, sizeof zero);
  crc = crc32c (crc, buf + 20, length - 20);
  for (unsigned i = 0; i < 4; ++i)
    buf[16 + i] = (uint8_t) (crc >> (8 * i));
}

/* Are two decoded superblocks the same, field by field? */
static int
sb_same (const struct superblock *a, const struct superblock *b)
{
#define SAME(f) (memcmp (&a->f, &b->f, sizeof a->f) == 0)
  if (!(SAME (seq) && SAME (volume_uuid) && SAME (leg_uuid) && SAME (slot) &&
        SAME (max_legs) && SAME (flags) && SAME (quorum) &&
        SAME (volume_size) && SAME (chunk_size) && SAME (al_extent_size) &&
        SAME (al_extents) && SAME (history_len) && SAME (ctime) &&
        SAME (mtime) && SAME (gen) && SAME (history)))
    return 0;
  for (unsigned s = 0; s < MAX_LEGS; ++s)
    if (!(SAME (slots[s].uuid) && SAME (slots[s].flags) &&
          SAME (slots[s].bm_gen)))
      return 0;
#undef SAME
  return 1;
}

/* A decoded superblock must re-encode to the input and decode again
 * to itself.
 */
static void
check_sb (const uint8_t *block, const struct superblock *sb)
{
  uint8_t again[META_BLOCK];
  struct superblock sb2;

  sb_encode (sb, again);
  if (memcmp (again, block, record_length (again)) != 0)
    abort ();
  if (sb_decode (again, &sb2, NULL, 0) != META_OK || !sb_same (sb, &sb2))
    abort ();
}

/* The same for an activity log of nr extents. */
static void
check_al (const uint8_t *al, uint64_t seq, const uint32_t *extents,
          uint32_t nr)
{
  static uint8_t again[FUZZ_AL_BYTES];
  static uint32_t extents2[FUZZ_AL_CAP];
  uint64_t seq2;
  uint32_t nr2;

  al_encode (again, FUZZ_AL_CAP, seq, fuzz_volume, FUZZ_AL_EXTENT,
             extents, nr);
  if (memcmp (again, al, record_length (again)) != 0)
    abort ();
  if (al_decode (again, FUZZ_AL_CAP, fuzz_volume, FUZZ_AL_EXTENT,
                 FUZZ_NR_AL_EXTENTS, &seq2, extents2, &nr2,
                 NULL, 0) != META_OK ||
      seq2 != seq || nr2 != nr ||
      memcmp (extents2, extents, nr * sizeof *extents) != 0)
    abort ();
}

/* The same for a bitmap page. */
static void
check_bm (const uint8_t *block, uint64_t seq, struct gen bm_gen,
          const uint64_t *words)
{
  static uint64_t words2[BM_PAGE_WORDS];
  uint8_t again[META_BLOCK];
  uint64_t seq2;
  struct gen bm_gen2;

  bm_page_encode (again, seq, fuzz_volume, FUZZ_SLOT, FUZZ_PAGE, bm_gen,
                  words);
  if (memcmp (again, block, META_BLOCK) != 0)
    abort ();
  if (bm_page_decode (again, fuzz_volume, FUZZ_SLOT, FUZZ_PAGE, &seq2,
                      &bm_gen2, words2, NULL, 0) != META_OK ||
      seq2 != seq || !gen_equal (bm_gen2, bm_gen) ||
      memcmp (words2, words, sizeof words2) != 0)
    abort ();
}

/* Run every decoder on the input. */
int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static uint8_t al[FUZZ_AL_BYTES];
  static uint32_t extents[FUZZ_AL_CAP];
  static uint64_t words[BM_PAGE_WORDS];
  uint8_t block[META_BLOCK];
  struct superblock sb;
  char err[64];
  uint64_t seq;
  uint32_t nr;
  struct gen bm_gen;

  if (al_record_bytes (FUZZ_AL_CAP) != FUZZ_AL_BYTES)
    abort ();
  memset (block, 0, sizeof block);
  memcpy (block, data, size < sizeof block ? size : sizeof block);
  memset (al, 0, sizeof al);
  memcpy (al, data, size < sizeof al ? size : sizeof al);
  if (size % 2 == 1) {
    seal (block, sizeof block);
    seal (al, sizeof al);
  }

  if (sb_decode (block, &sb, err, sizeof err) == META_OK)
    check_sb (block, &sb);
  if (al_decode (al, FUZZ_AL_CAP, fuzz_volume, FUZZ_AL_EXTENT,
                 FUZZ_NR_AL_EXTENTS, &seq, extents, &nr,
                 err, sizeof err) == META_OK)
    check_al (al, seq, extents, nr);
  if (bm_page_decode (block, fuzz_volume, FUZZ_SLOT, FUZZ_PAGE, &seq,
                      &bm_gen, words, err, sizeof err) == META_OK)
    check_bm (block, seq, bm_gen, words);
  return 0;
}
