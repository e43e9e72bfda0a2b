/* SPDX-License-Identifier: BSD-3-Clause */
/* On-disk metadata: layout arithmetic and the record codecs (pure).
 *
 * The format is described in meta.h.  Every integer is read and
 * written byte by byte, little-endian, so the format does not depend
 * on the host; structs are never copied to disk.
 *
 * Encoders zero the whole buffer first, so every byte they do not set
 * is zero, then seal the record: the crc32c of [0, length) computed
 * with the crc field zero.
 *
 * Decoders trust nothing.  In order: the magic (not ours: META_BLANK),
 * the version, the length (exactly what this version writes), the
 * checksum, then every field.  Every byte in [0, length) is either
 * decoded into the result or checked to be zero, so a record that
 * decodes as META_OK is exactly the encoding of what it decoded to.
 * Any failure is META_CORRUPT with a message naming the field and its
 * value.  Bytes past length are not part of the record.  Outputs are
 * never left undefined: a failed activity log or bitmap page gives seq
 * 0 (nr 0, bm_gen zero), a failed superblock its fields as read (all
 * zero if the checksum failed), so callers may hand any result's seq
 * to meta_pick_copy.
 *
 * The superblock always covers all MAX_LEGS slot entries and all
 * META_HISTORY history entries; those beyond max_legs and history_len
 * are zero.  A bitmap page's bm_gen is returned, not judged: whether
 * it is the slot's current one is for the caller to decide.
 */

#include <config.h>

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "crc32c.h"
#include "meta.h"

/* The 32-byte header common to all records. */
#define HDR_MAGIC     0
#define HDR_VERSION   8
#define HDR_LENGTH    12
#define HDR_CRC       16
#define HDR_RESERVED  20
#define HDR_SEQ       24
#define HDR_SIZE      32

/* Superblock body. */
#define SB_VOLUME_UUID    32
#define SB_LEG_UUID       48
#define SB_SLOT           64
#define SB_MAX_LEGS       68
#define SB_FLAGS          72
#define SB_QUORUM         76
#define SB_VOLUME_SIZE    80
#define SB_CHUNK_SIZE     88
#define SB_AL_EXTENT_SIZE 92
#define SB_AL_EXTENTS     96
#define SB_HISTORY_LEN    100
#define SB_CTIME          104
#define SB_MTIME          112
#define SB_GEN            120
#define SB_HISTORY        136
#define SB_SLOTS          (SB_HISTORY + 16 * META_HISTORY)
#define SB_LENGTH         (SB_SLOTS + SLOT_SIZE * MAX_LEGS)

/* One slot entry of the superblock. */
#define SLOT_UUID     0
#define SLOT_FLAGS    16
#define SLOT_RESERVED 20
#define SLOT_BM_GEN   24
#define SLOT_SIZE     40

/* Activity-log body. */
#define AL_VOLUME_UUID    32
#define AL_EXTENT_SIZE    48
#define AL_NR             52
#define AL_EXTENTS        AL_HEADER

/* Bitmap page body. */
#define BM_VOLUME_UUID    32
#define BM_SLOT           48
#define BM_PAGE           52
#define BM_BM_GEN         56
#define BM_RESERVED       72
#define BM_WORDS          BM_PAGE_HEADER

/* Geometry limits. */
#define MIN_CHUNK         4096
#define MAX_CHUNK         (64 * 1024 * 1024)
#define MAX_AL_EXTENT     (1024 * 1024 * 1024)
#define VOLUME_ALIGN      4096

static const char sb_magic[8] = "NBDRPSB1";
static const char al_magic[8] = "NBDRPAL1";
static const char bm_magic[8] = "NBDRPBM1";

/* Store a 32-bit little-endian integer. */
static void
put_le32 (uint8_t *p, uint32_t v)
{
  for (unsigned i = 0; i < 4; ++i)
    p[i] = v >> (8 * i);
}

/* Store a 64-bit little-endian integer. */
static void
put_le64 (uint8_t *p, uint64_t v)
{
  for (unsigned i = 0; i < 8; ++i)
    p[i] = v >> (8 * i);
}

/* Load a 32-bit little-endian integer. */
static uint32_t
get_le32 (const uint8_t *p)
{
  uint32_t v = 0;

  for (unsigned i = 0; i < 4; ++i)
    v |= (uint32_t) p[i] << (8 * i);
  return v;
}

/* Load a 64-bit little-endian integer. */
static uint64_t
get_le64 (const uint8_t *p)
{
  uint64_t v = 0;

  for (unsigned i = 0; i < 8; ++i)
    v |= (uint64_t) p[i] << (8 * i);
  return v;
}

/* Store a generation (counter, id). */
static void
put_gen (uint8_t *p, struct gen g)
{
  put_le64 (p, g.counter);
  put_le64 (p + 8, g.id);
}

/* Load a generation. */
static struct gen
get_gen (const uint8_t *p)
{
  struct gen g = { .counter = get_le64 (p), .id = get_le64 (p + 8) };

  return g;
}

/* Are the n bytes at p all zero? */
static bool
all_zero (const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0)
      return false;
  return true;
}

/* Is x a power of two (and not zero)? */
static bool
is_power_of_2 (uint64_t x)
{
  return x != 0 && (x & (x - 1)) == 0;
}

/* x / y rounded up, without overflow. */
static uint64_t
div_round_up (uint64_t x, uint64_t y)
{
  return x / y + (x % y != 0);
}

/* Format a message into err (which may be short, or NULL if errlen is
 * 0) and return st.
 */
static enum meta_status report (enum meta_status st, char *err,
                                size_t errlen, const char *fs, ...)
  __attribute__ ((format (printf, 4, 5)));

static enum meta_status
report (enum meta_status st, char *err, size_t errlen, const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  vsnprintf (err, errlen, fs, ap);
  va_end (ap);
  return st;
}

/* The crc32c of [0, length) with the crc field taken as zero. */
static uint32_t
record_crc (const uint8_t *buf, uint32_t length)
{
  static const uint8_t zero[4];
  uint32_t crc;

  crc = crc32c (0, buf, HDR_CRC);
  crc = crc32c (crc, zero, sizeof zero);
  return crc32c (crc, buf + HDR_CRC + 4, length - HDR_CRC - 4);
}

/* Zero a record buffer of size bytes and write the header (the crc is
 * filled in by seal_record once the body is written).
 */
static void
start_record (uint8_t *buf, size_t size, const char magic[8],
              uint32_t length, uint64_t seq)
{
  memset (buf, 0, size);
  memcpy (buf + HDR_MAGIC, magic, 8);
  put_le32 (buf + HDR_VERSION, META_VERSION);
  put_le32 (buf + HDR_LENGTH, length);
  put_le64 (buf + HDR_SEQ, seq);
}

/* Compute and store the checksum of a record whose body is written. */
static void
seal_record (uint8_t *buf)
{
  put_le32 (buf + HDR_CRC, record_crc (buf, get_le32 (buf + HDR_LENGTH)));
}

/* First checks of any record: the magic (META_BLANK if not ours) and
 * the version.  Returns the length field in *length.
 */
static enum meta_status
check_magic_version (const uint8_t *buf, const char magic[8],
                     const char *what, uint32_t *length,
                     char *err, size_t errlen)
{
  uint32_t version;

  if (memcmp (buf + HDR_MAGIC, magic, 8) != 0)
    return report (META_BLANK, err, errlen, "no %s (magic 0x%016" PRIx64 ")",
                   what, get_le64 (buf + HDR_MAGIC));
  version = get_le32 (buf + HDR_VERSION);
  if (version != META_VERSION)
    return report (META_CORRUPT, err, errlen,
                   "%s: unsupported version %" PRIu32,
                   what, version);
  *length = get_le32 (buf + HDR_LENGTH);
  return META_OK;
}

/* Check a fixed-size record's length field. */
static enum meta_status
check_exact_length (uint32_t length, uint32_t expected, const char *what,
                    char *err, size_t errlen)
{
  if (length != expected)
    return report (META_CORRUPT, err, errlen,
                   "%s: length %" PRIu32 ", expected %" PRIu32,
                   what, length, expected);
  return META_OK;
}

/* Once the length is known to be sane: the checksum, then the reserved
 * header field.
 */
static enum meta_status
check_crc_reserved (const uint8_t *buf, uint32_t length, const char *what,
                    char *err, size_t errlen)
{
  uint32_t stored = get_le32 (buf + HDR_CRC);
  uint32_t computed = record_crc (buf, length);
  uint32_t reserved = get_le32 (buf + HDR_RESERVED);

  if (stored != computed)
    return report (META_CORRUPT, err, errlen,
                   "%s: checksum mismatch: stored 0x%08" PRIx32
                   ", computed 0x%08" PRIx32, what, stored, computed);
  if (reserved != 0)
    return report (META_CORRUPT, err, errlen,
                   "%s: reserved header field is 0x%" PRIx32 ", not 0",
                   what, reserved);
  return META_OK;
}

/* Check the geometry fields (prefix starts each message) and compute
 * the layout.  Shared by md_layout_init and the superblock decoder.
 */
static enum meta_status
compute_layout (struct md_layout *l, uint64_t volume_size, uint32_t chunk,
                uint32_t max_legs, uint32_t al_extent, uint32_t al_extents,
                const char *prefix, char *err, size_t errlen)
{
  if (max_legs < 1 || max_legs > MAX_LEGS)
    return report (META_CORRUPT, err, errlen,
                   "%smax_legs %" PRIu32 " is not in [1, %d]",
                   prefix, max_legs, MAX_LEGS);
  if (!is_power_of_2 (chunk))
    return report (META_CORRUPT, err, errlen,
                   "%schunk_size %" PRIu32 " is not a power of two",
                   prefix, chunk);
  if (chunk < MIN_CHUNK || chunk > MAX_CHUNK)
    return report (META_CORRUPT, err, errlen,
                   "%schunk_size %" PRIu32 " is not in [%d, %d]",
                   prefix, chunk, MIN_CHUNK, MAX_CHUNK);
  if (!is_power_of_2 (al_extent))
    return report (META_CORRUPT, err, errlen,
                   "%sal_extent_size %" PRIu32 " is not a power of two",
                   prefix, al_extent);
  if (al_extent < chunk || al_extent > MAX_AL_EXTENT)
    return report (META_CORRUPT, err, errlen,
                   "%sal_extent_size %" PRIu32 " is not in"
                   " [chunk_size %" PRIu32 ", %d]",
                   prefix, al_extent, chunk, MAX_AL_EXTENT);
  if (al_extents < 1 || al_extents > AL_MAX_EXTENTS)
    return report (META_CORRUPT, err, errlen,
                   "%sal_extents %" PRIu32 " is not in [1, %d]",
                   prefix, al_extents, AL_MAX_EXTENTS);
  if (volume_size == 0)
    return report (META_CORRUPT, err, errlen, "%svolume_size is 0", prefix);
  if (volume_size % VOLUME_ALIGN != 0)
    return report (META_CORRUPT, err, errlen,
                   "%svolume_size %" PRIu64 " is not a multiple of %d",
                   prefix, volume_size, VOLUME_ALIGN);

  l->volume_size = volume_size;
  l->chunk = chunk;
  l->max_legs = max_legs;
  l->al_extent = al_extent;
  l->al_extents = al_extents;
  l->nr_chunks = div_round_up (volume_size, chunk);
  l->nr_al_extents = div_round_up (volume_size, al_extent);
  l->bm_pages = div_round_up (l->nr_chunks, BM_PAGE_BITS);
  l->al_bytes = al_record_bytes (al_extents);
  l->md_size = max_legs * l->bm_pages * 2 * META_BLOCK
    + 2 * l->al_bytes + META_SB_AREA;

  /* Leg sizes are signed 64-bit in NBD and nbdkit: a volume whose leg
   * could not be that large is nonsense, and rejecting it keeps
   * volume_size + md_size from overflowing in every caller.
   */
  if (volume_size > INT64_MAX - l->md_size)
    return report (META_CORRUPT, err, errlen,
                   "%svolume_size %" PRIu64 " is too large: with %" PRIu64
                   " bytes of metadata a leg would exceed 2^63-1 bytes",
                   prefix, volume_size, l->md_size);
  return META_OK;
}

/* Validate a geometry and compute where everything is. */
int
md_layout_init (struct md_layout *l, uint64_t volume_size,
                uint32_t chunk, uint32_t max_legs,
                uint32_t al_extent, uint32_t al_extents,
                char *err, size_t errlen)
{
  if (compute_layout (l, volume_size, chunk, max_legs, al_extent, al_extents,
                      "", err, errlen) != META_OK)
    return -1;
  return 0;
}

/* Does a volume of blocks * 4096 bytes, with its metadata, fit in a
 * leg of leg_size bytes?
 */
static bool
volume_fits (uint64_t blocks, uint64_t leg_size, uint32_t chunk,
             uint32_t max_legs, uint32_t al_extent, uint32_t al_extents)
{
  struct md_layout l;

  return compute_layout (&l, blocks * VOLUME_ALIGN, chunk, max_legs,
                         al_extent, al_extents, "", NULL, 0) == META_OK
    && l.volume_size + l.md_size <= leg_size;
}

/* The largest volume that fits in the leg with its metadata.  As
 * volume + md_size (volume) grows strictly with the volume, bisection
 * on the number of 4K blocks finds it exactly: lo always fits (0
 * standing for "none"), hi never does (the whole leg leaves no room
 * for the metadata).
 */
uint64_t
md_max_volume_size (uint64_t leg_size, uint32_t chunk,
                    uint32_t max_legs, uint32_t al_extent,
                    uint32_t al_extents)
{
  uint64_t lo = 0, hi = leg_size / VOLUME_ALIGN;

  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;

    if (volume_fits (mid, leg_size, chunk, max_legs, al_extent, al_extents))
      lo = mid;
    else
      hi = mid;
  }
  return lo * VOLUME_ALIGN;
}

/* Offset of superblock copy `copy' in a leg. */
uint64_t
md_sb_offset (uint64_t leg_size, unsigned copy)
{
  return leg_size - META_SB_AREA + (uint64_t) copy * META_BLOCK;
}

/* Start of the metadata area (end of the data area) in a leg. */
uint64_t
md_area_offset (const struct md_layout *l, uint64_t leg_size)
{
  return leg_size - l->md_size;
}

/* Offset of one copy of one bitmap page of one slot in a leg. */
uint64_t
md_bm_offset (const struct md_layout *l, uint64_t leg_size,
              unsigned slot, uint64_t page, unsigned copy)
{
  uint64_t record = (slot * l->bm_pages + page) * 2 + copy;

  return md_area_offset (l, leg_size) + record * META_BLOCK;
}

/* Offset of activity-log copy `copy' in a leg. */
uint64_t
md_al_offset (const struct md_layout *l, uint64_t leg_size, unsigned copy)
{
  uint64_t bitmaps = l->max_legs * l->bm_pages * 2 * META_BLOCK;

  return md_area_offset (l, leg_size) + bitmaps + copy * l->al_bytes;
}

/* Encode a superblock into a META_BLOCK buffer (slots past max_legs
 * and history past history_len are left zero).
 */
void
sb_encode (const struct superblock *sb, uint8_t *buf)
{
  uint32_t nr_history = sb->history_len;
  uint32_t nr_slots = sb->max_legs;

  if (nr_history > META_HISTORY)
    nr_history = META_HISTORY;
  if (nr_slots > MAX_LEGS)
    nr_slots = MAX_LEGS;

  start_record (buf, META_BLOCK, sb_magic, SB_LENGTH, sb->seq);
  memcpy (buf + SB_VOLUME_UUID, sb->volume_uuid, 16);
  memcpy (buf + SB_LEG_UUID, sb->leg_uuid, 16);
  put_le32 (buf + SB_SLOT, sb->slot);
  put_le32 (buf + SB_MAX_LEGS, sb->max_legs);
  put_le32 (buf + SB_FLAGS, sb->flags);
  put_le32 (buf + SB_QUORUM, sb->quorum);
  put_le64 (buf + SB_VOLUME_SIZE, sb->volume_size);
  put_le32 (buf + SB_CHUNK_SIZE, sb->chunk_size);
  put_le32 (buf + SB_AL_EXTENT_SIZE, sb->al_extent_size);
  put_le32 (buf + SB_AL_EXTENTS, sb->al_extents);
  put_le32 (buf + SB_HISTORY_LEN, sb->history_len);
  put_le64 (buf + SB_CTIME, sb->ctime);
  put_le64 (buf + SB_MTIME, sb->mtime);
  put_gen (buf + SB_GEN, sb->gen);
  for (uint32_t i = 0; i < nr_history; ++i)
    put_gen (buf + SB_HISTORY + 16 * i, sb->history[i]);
  for (uint32_t s = 0; s < nr_slots; ++s) {
    uint8_t *p = buf + SB_SLOTS + SLOT_SIZE * s;

    memcpy (p + SLOT_UUID, sb->slots[s].uuid, 16);
    put_le32 (p + SLOT_FLAGS, sb->slots[s].flags);
    put_gen (p + SLOT_BM_GEN, sb->slots[s].bm_gen);
  }
  seal_record (buf);
}

/* Read every superblock field (the header is already checked). */
static void
sb_read_fields (const uint8_t *buf, struct superblock *sb)
{
  sb->seq = get_le64 (buf + HDR_SEQ);
  memcpy (sb->volume_uuid, buf + SB_VOLUME_UUID, 16);
  memcpy (sb->leg_uuid, buf + SB_LEG_UUID, 16);
  sb->slot = get_le32 (buf + SB_SLOT);
  sb->max_legs = get_le32 (buf + SB_MAX_LEGS);
  sb->flags = get_le32 (buf + SB_FLAGS);
  sb->quorum = get_le32 (buf + SB_QUORUM);
  sb->volume_size = get_le64 (buf + SB_VOLUME_SIZE);
  sb->chunk_size = get_le32 (buf + SB_CHUNK_SIZE);
  sb->al_extent_size = get_le32 (buf + SB_AL_EXTENT_SIZE);
  sb->al_extents = get_le32 (buf + SB_AL_EXTENTS);
  sb->history_len = get_le32 (buf + SB_HISTORY_LEN);
  sb->ctime = get_le64 (buf + SB_CTIME);
  sb->mtime = get_le64 (buf + SB_MTIME);
  sb->gen = get_gen (buf + SB_GEN);
  for (uint32_t i = 0; i < META_HISTORY; ++i)
    sb->history[i] = get_gen (buf + SB_HISTORY + 16 * i);
  for (uint32_t s = 0; s < MAX_LEGS; ++s) {
    const uint8_t *p = buf + SB_SLOTS + SLOT_SIZE * s;

    memcpy (sb->slots[s].uuid, p + SLOT_UUID, 16);
    sb->slots[s].flags = get_le32 (p + SLOT_FLAGS);
    sb->slots[s].bm_gen = get_gen (p + SLOT_BM_GEN);
  }
}

/* Check the generation and its history: counters strictly decreasing
 * from gen, none zero, entries past history_len zero.
 */
static enum meta_status
sb_check_history (const struct superblock *sb, char *err, size_t errlen)
{
  uint64_t newer = sb->gen.counter;

  if (sb->history_len > META_HISTORY)
    return report (META_CORRUPT, err, errlen,
                   "superblock: history_len %" PRIu32 " is above %d",
                   sb->history_len, META_HISTORY);
  if (sb->gen.counter == 0)
    return report (META_CORRUPT, err, errlen,
                   "superblock: gen counter is 0");
  for (uint32_t i = 0; i < META_HISTORY; ++i) {
    const struct gen *h = &sb->history[i];

    if (i >= sb->history_len) {
      if (h->counter != 0 || h->id != 0)
        return report (META_CORRUPT, err, errlen,
                       "superblock: history[%" PRIu32 "] beyond history_len"
                       " %" PRIu32 " is not zero", i, sb->history_len);
      continue;
    }
    if (h->counter == 0)
      return report (META_CORRUPT, err, errlen,
                     "superblock: history[%" PRIu32 "] counter is 0", i);
    if (h->counter >= newer)
      return report (META_CORRUPT, err, errlen,
                     "superblock: history[%" PRIu32 "] counter %" PRIu64
                     " is not below %" PRIu64 " (newest first)",
                     i, h->counter, newer);
    newer = h->counter;
  }
  return META_OK;
}

/* Check one slot entry s < max_legs on its own. */
static enum meta_status
sb_check_slot (const uint8_t *raw, const struct sb_slot *slot, uint32_t s,
               char *err, size_t errlen)
{
  const uint32_t known = SLOT_ASSIGNED | SLOT_MEMBER | SLOT_TRACKER |
    SLOT_BASE;
  uint32_t reserved = get_le32 (raw + SLOT_RESERVED);

  if (slot->flags & ~known)
    return report (META_CORRUPT, err, errlen,
                   "superblock: slot %" PRIu32 " flags 0x%" PRIx32
                   " has unknown bits", s, slot->flags);
  if (reserved != 0)
    return report (META_CORRUPT, err, errlen,
                   "superblock: slot %" PRIu32 " reserved field is 0x%" PRIx32
                   ", not 0", s, reserved);
  if ((slot->flags & SLOT_TRACKER) &&
      (slot->flags & (SLOT_ASSIGNED | SLOT_MEMBER)) != SLOT_ASSIGNED)
    return report (META_CORRUPT, err, errlen,
                   "superblock: slot %" PRIu32 " tracks changed blocks but"
                   " is %s", s, slot->flags & SLOT_MEMBER ? "a member"
                   : "not assigned");
  if ((slot->flags & SLOT_BASE) && !(slot->flags & SLOT_TRACKER))
    return report (META_CORRUPT, err, errlen,
                   "superblock: slot %" PRIu32 " names a backup but does not"
                   " track changed blocks", s);
  if (slot->flags & SLOT_ASSIGNED) {
    if (all_zero (slot->uuid, 16))
      return report (META_CORRUPT, err, errlen,
                     "superblock: slot %" PRIu32 " is assigned but its uuid"
                     " is zero", s);
  }
  else {
    if (!all_zero (slot->uuid, 16))
      return report (META_CORRUPT, err, errlen,
                     "superblock: slot %" PRIu32 " is not assigned but has"
                     " a uuid", s);
    if (slot->flags & SLOT_MEMBER)
      return report (META_CORRUPT, err, errlen,
                     "superblock: slot %" PRIu32 " is not assigned but has"
                     " the member flag", s);
  }
  return META_OK;
}

/* Check the slot table: the leg's own slot, each slot in use, no leg
 * in two slots, and nothing beyond max_legs.
 */
static enum meta_status
sb_check_slots (const uint8_t *buf, const struct superblock *sb,
                char *err, size_t errlen)
{
  const struct sb_slot *own = &sb->slots[sb->slot];
  enum meta_status st;

  if (!(own->flags & SLOT_ASSIGNED))
    return report (META_CORRUPT, err, errlen,
                   "superblock: own slot %" PRIu32 " is not assigned",
                   sb->slot);
  if (memcmp (own->uuid, sb->leg_uuid, 16) != 0)
    return report (META_CORRUPT, err, errlen,
                   "superblock: own slot %" PRIu32 " is assigned to another"
                   " leg", sb->slot);

  for (uint32_t s = 0; s < MAX_LEGS; ++s) {
    const uint8_t *raw = buf + SB_SLOTS + SLOT_SIZE * s;

    if (s >= sb->max_legs) {
      if (!all_zero (raw, SLOT_SIZE))
        return report (META_CORRUPT, err, errlen,
                       "superblock: slot %" PRIu32 " beyond max_legs %" PRIu32
                       " is not zero", s, sb->max_legs);
      continue;
    }
    st = sb_check_slot (raw, &sb->slots[s], s, err, errlen);
    if (st != META_OK)
      return st;
    if (!(sb->slots[s].flags & SLOT_ASSIGNED))
      continue;
    for (uint32_t t = 0; t < s; ++t)
      if ((sb->slots[t].flags & SLOT_ASSIGNED) &&
          memcmp (sb->slots[t].uuid, sb->slots[s].uuid, 16) == 0)
        return report (META_CORRUPT, err, errlen,
                       "superblock: slot %" PRIu32 " has the same uuid as"
                       " slot %" PRIu32, s, t);
  }
  return META_OK;
}

/* Decode and check a superblock. */
enum meta_status
sb_decode (const uint8_t *buf, struct superblock *sb,
           char *err, size_t errlen)
{
  const char *what = "superblock";
  struct md_layout l;
  uint32_t length;
  enum meta_status st;

  memset (sb, 0, sizeof *sb);
  st = check_magic_version (buf, sb_magic, what, &length, err, errlen);
  if (st == META_OK)
    st = check_exact_length (length, SB_LENGTH, what, err, errlen);
  if (st == META_OK)
    st = check_crc_reserved (buf, length, what, err, errlen);
  if (st != META_OK)
    return st;

  sb_read_fields (buf, sb);
  if (all_zero (sb->volume_uuid, 16))
    return report (META_CORRUPT, err, errlen,
                   "superblock: volume_uuid is zero");
  if (all_zero (sb->leg_uuid, 16))
    return report (META_CORRUPT, err, errlen,
                   "superblock: leg_uuid is zero");
  st = compute_layout (&l, sb->volume_size, sb->chunk_size, sb->max_legs,
                       sb->al_extent_size, sb->al_extents, "superblock: ",
                       err, errlen);
  if (st != META_OK)
    return st;
  if (sb->slot >= sb->max_legs)
    return report (META_CORRUPT, err, errlen,
                   "superblock: slot %" PRIu32 " is not below max_legs %"
                   PRIu32, sb->slot, sb->max_legs);
  if (sb->flags & ~SB_INCONSISTENT)
    return report (META_CORRUPT, err, errlen,
                   "superblock: flags 0x%" PRIx32 " has unknown bits",
                   sb->flags);
  if (sb->quorum < 1 || sb->quorum > sb->max_legs)
    return report (META_CORRUPT, err, errlen,
                   "superblock: quorum %" PRIu32 " is not in [1, max_legs %"
                   PRIu32 "]", sb->quorum, sb->max_legs);
  st = sb_check_history (sb, err, errlen);
  if (st != META_OK)
    return st;
  return sb_check_slots (buf, sb, err, errlen);
}

/* The valid copy with the higher seq (copy 0 on a tie), or -1. */
int
meta_pick_copy (enum meta_status s0, uint64_t seq0,
                enum meta_status s1, uint64_t seq1)
{
  if (s0 == META_OK && s1 == META_OK)
    return seq1 > seq0 ? 1 : 0;
  if (s0 == META_OK)
    return 0;
  if (s1 == META_OK)
    return 1;
  return -1;
}

/* Bytes of one activity-log copy: header and extents, rounded up to 4K. */
uint64_t
al_record_bytes (uint32_t al_extents)
{
  uint64_t bytes = AL_HEADER + 4 * (uint64_t) al_extents;

  return div_round_up (bytes, META_BLOCK) * META_BLOCK;
}

/* Encode an activity log of nr extents into an al_record_bytes buffer. */
void
al_encode (uint8_t *buf, uint32_t capacity, uint64_t seq,
           const uint8_t volume_uuid[16], uint32_t al_extent,
           const uint32_t *extents, uint32_t nr)
{
  assert (nr <= capacity);

  start_record (buf, al_record_bytes (capacity), al_magic,
                AL_HEADER + 4 * nr, seq);
  memcpy (buf + AL_VOLUME_UUID, volume_uuid, 16);
  put_le32 (buf + AL_EXTENT_SIZE, al_extent);
  put_le32 (buf + AL_NR, nr);
  for (uint32_t i = 0; i < nr; ++i)
    put_le32 (buf + AL_EXTENTS + 4 * i, extents[i]);
  seal_record (buf);
}

/* Check an activity log's length field against the capacity. */
static enum meta_status
al_check_length (uint32_t length, uint32_t capacity, char *err, size_t errlen)
{
  if (length < AL_HEADER || (length - AL_HEADER) % 4 != 0)
    return report (META_CORRUPT, err, errlen,
                   "activity log: length %" PRIu32 " is not %d plus a"
                   " multiple of 4", length, AL_HEADER);
  if ((length - AL_HEADER) / 4 > capacity)
    return report (META_CORRUPT, err, errlen,
                   "activity log: length %" PRIu32 " exceeds the capacity of %"
                   PRIu32 " extents", length, capacity);
  return META_OK;
}

/* Decode and check an activity log. */
enum meta_status
al_decode (const uint8_t *buf, uint32_t capacity,
           const uint8_t volume_uuid[16], uint32_t al_extent,
           uint64_t nr_al_extents, uint64_t *seq, uint32_t *extents,
           uint32_t *nr, char *err, size_t errlen)
{
  const char *what = "activity log";
  uint32_t length, n, size;
  enum meta_status st;

  *seq = 0;
  *nr = 0;
  st = check_magic_version (buf, al_magic, what, &length, err, errlen);
  if (st == META_OK)
    st = al_check_length (length, capacity, err, errlen);
  if (st == META_OK)
    st = check_crc_reserved (buf, length, what, err, errlen);
  if (st != META_OK)
    return st;

  if (memcmp (buf + AL_VOLUME_UUID, volume_uuid, 16) != 0)
    return report (META_CORRUPT, err, errlen,
                   "activity log: volume_uuid does not match the volume");
  size = get_le32 (buf + AL_EXTENT_SIZE);
  if (size != al_extent)
    return report (META_CORRUPT, err, errlen,
                   "activity log: al_extent_size %" PRIu32 " does not match"
                   " the volume's %" PRIu32, size, al_extent);
  n = get_le32 (buf + AL_NR);
  if (n != (length - AL_HEADER) / 4)
    return report (META_CORRUPT, err, errlen,
                   "activity log: nr %" PRIu32 " does not match length %"
                   PRIu32, n, length);
  for (uint32_t i = 0; i < n; ++i) {
    extents[i] = get_le32 (buf + AL_EXTENTS + 4 * i);
    if (extents[i] >= nr_al_extents)
      return report (META_CORRUPT, err, errlen,
                     "activity log: extents[%" PRIu32 "] %" PRIu32
                     " is not below nr_al_extents %" PRIu64,
                     i, extents[i], nr_al_extents);
    if (i > 0 && extents[i] <= extents[i - 1])
      return report (META_CORRUPT, err, errlen,
                     "activity log: extents[%" PRIu32 "] %" PRIu32
                     " is not above extents[%" PRIu32 "] %" PRIu32
                     " (sorted, unique)", i, extents[i], i - 1, extents[i - 1]);
  }
  *seq = get_le64 (buf + HDR_SEQ);
  *nr = n;
  return META_OK;
}

/* Encode one bitmap page into a META_BLOCK buffer. */
void
bm_page_encode (uint8_t *buf, uint64_t seq,
                const uint8_t volume_uuid[16],
                uint32_t slot, uint32_t page,
                struct gen bm_gen, const uint64_t *words)
{
  start_record (buf, META_BLOCK, bm_magic, META_BLOCK, seq);
  memcpy (buf + BM_VOLUME_UUID, volume_uuid, 16);
  put_le32 (buf + BM_SLOT, slot);
  put_le32 (buf + BM_PAGE, page);
  put_gen (buf + BM_BM_GEN, bm_gen);
  for (uint32_t i = 0; i < BM_PAGE_WORDS; ++i)
    put_le64 (buf + BM_WORDS + 8 * i, words[i]);
  seal_record (buf);
}

/* Decode and check one bitmap page. */
enum meta_status
bm_page_decode (const uint8_t *buf, const uint8_t volume_uuid[16],
                uint32_t slot, uint32_t page,
                uint64_t *seq, struct gen *bm_gen, uint64_t *words,
                char *err, size_t errlen)
{
  const char *what = "bitmap page";
  uint32_t length, s, p;
  enum meta_status st;

  *seq = 0;
  *bm_gen = (struct gen) { 0, 0 };
  st = check_magic_version (buf, bm_magic, what, &length, err, errlen);
  if (st == META_OK)
    st = check_exact_length (length, META_BLOCK, what, err, errlen);
  if (st == META_OK)
    st = check_crc_reserved (buf, length, what, err, errlen);
  if (st != META_OK)
    return st;

  if (memcmp (buf + BM_VOLUME_UUID, volume_uuid, 16) != 0)
    return report (META_CORRUPT, err, errlen,
                   "bitmap page: volume_uuid does not match the volume");
  s = get_le32 (buf + BM_SLOT);
  if (s != slot)
    return report (META_CORRUPT, err, errlen,
                   "bitmap page: slot %" PRIu32 ", expected %" PRIu32,
                   s, slot);
  p = get_le32 (buf + BM_PAGE);
  if (p != page)
    return report (META_CORRUPT, err, errlen,
                   "bitmap page: page %" PRIu32 ", expected %" PRIu32,
                   p, page);
  if (!all_zero (buf + BM_RESERVED, BM_WORDS - BM_RESERVED))
    return report (META_CORRUPT, err, errlen,
                   "bitmap page: reserved bytes are not zero");
  for (uint32_t i = 0; i < BM_PAGE_WORDS; ++i)
    words[i] = get_le64 (buf + BM_WORDS + 8 * i);
  *bm_gen = get_gen (buf + BM_BM_GEN);
  *seq = get_le64 (buf + HDR_SEQ);
  return META_OK;
}

/* Are two generations the same? */
bool
gen_equal (struct gen a, struct gen b)
{
  return a.counter == b.counter && a.id == b.id;
}

/* Is g the superblock's generation or in its history? */
bool
sb_knows_gen (const struct superblock *sb, struct gen g)
{
  uint32_t n = sb->history_len < META_HISTORY ? sb->history_len : META_HISTORY;

  if (gen_equal (sb->gen, g))
    return true;
  for (uint32_t i = 0; i < n; ++i)
    if (gen_equal (sb->history[i], g))
      return true;
  return false;
}

/* Is the leg whose own superblock is leg assigned its slot in r (the
 * slot in range, assigned, and to that leg's UUID)?
 */
bool
sb_owns_slot (const struct superblock *r, const struct superblock *leg)
{
  const struct sb_slot *s;

  if (leg->slot >= r->max_legs)
    return false;
  s = &r->slots[leg->slot];
  return (s->flags & SLOT_ASSIGNED) &&
    memcmp (s->uuid, leg->leg_uuid, 16) == 0;
}

/* Push sb->gen onto the history (dropping the oldest when full). */
void
sb_push_gen (struct superblock *sb, struct gen next)
{
  uint32_t kept = sb->history_len < META_HISTORY ? sb->history_len
    : META_HISTORY - 1;

  memmove (&sb->history[1], &sb->history[0], kept * sizeof sb->history[0]);
  sb->history[0] = sb->gen;
  sb->history_len = kept + 1;
  sb->gen = next;
}

/* The contribution of a bitmap page from its two copies (see meta.h). */
enum bm_page_kind
bm_page_pick (const uint8_t *copies, const uint8_t volume_uuid[16],
              uint32_t slot, uint32_t page, struct gen bm_gen, uint64_t *seq,
              uint64_t *words)
{
  uint64_t tmp[BM_PAGE_WORDS], s;
  enum meta_status st[2];
  struct gen g;
  bool any_valid = false;
  unsigned c;

  *seq = 0;
  memset (words, 0, BM_PAGE_WORDS * sizeof *words);
  for (c = 0; c < 2; ++c) {
    st[c] = bm_page_decode (copies + c * META_BLOCK, volume_uuid, slot, page,
                            &s, &g, tmp, NULL, 0);
    if (st[c] != META_OK)
      continue;
    any_valid = true;
    if (gen_equal (g, bm_gen) && s > *seq) {
      *seq = s;
      memcpy (words, tmp, sizeof tmp);
    }
  }
  if (*seq > 0)
    return BM_PAGE_CURRENT;
  if (any_valid)
    return BM_PAGE_STALE;
  if (st[0] == META_CORRUPT && st[1] == META_CORRUPT) {
    memset (words, 0xff, BM_PAGE_WORDS * sizeof *words);
    return BM_PAGE_CORRUPT;
  }
  return BM_PAGE_BLANK;
}
