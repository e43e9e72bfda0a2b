/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the on-disk metadata codec and layout (meta.c).
 *
 * Byte offsets in the tables below are written out from the format
 * note in meta.h, not taken from meta.c, so they check the documented
 * layout.  Layout sizes are computed by hand.  The tests:
 *
 *   - round trips of superblocks, activity logs and bitmap pages, and
 *     the exact bytes of a few fields;
 *   - tables of single-field corruptions of valid records, with the
 *     checksum recomputed where the field check must catch it, each
 *     with the expected status and a piece of the message;
 *   - random blocks and torn writes: never META_OK unless the record
 *     is exactly a valid one;
 *   - layout arithmetic, offsets, invalid geometries, and that
 *     md_max_volume_size is exact;
 *   - meta_pick_copy and the generation helpers.
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "meta.h"
#include "unit.h"

#define KiB 1024ull
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)
#define TiB (1024 * GiB)

#define SB_LENGTH 1288          /* 136 + 16 * 32 + 40 * 16 */
#define NELEMS(a) (sizeof (a) / sizeof (a)[0])

/* UUIDs of the base superblock, as 64-bit patterns (see uuid_from). */
#define VOL 0x0123456789abcdefull
#define LEG 0x1122334455667788ull
#define U0  0x99aabbccddeeff00ull
#define U2  0x0f1e2d3c4b5a6978ull
#define U9  0x5555aaaa5555aaaaull

static const char *const status_name[] = { "OK", "BLANK", "CORRUPT" };

/* A deterministic xorshift64* generator, so failures repeat. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* The next pseudo-random number. */
static uint64_t
rng (void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

/* Fill n bytes with pseudo-random data. */
static void
rng_fill (uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; ++i)
    p[i] = rng ();
}

/* Write v little-endian into width bytes at p (16: v twice). */
static void
poke (uint8_t *p, unsigned width, uint64_t v)
{
  for (unsigned i = 0; i < width; ++i)
    p[i] = v >> (8 * (i % 8));
}

/* Read width (<= 8) bytes at p, little-endian. */
static uint64_t
peek (const uint8_t *p, unsigned width)
{
  uint64_t v = 0;

  for (unsigned i = 0; i < width; ++i)
    v |= (uint64_t) p[i] << (8 * i);
  return v;
}

/* A 16-byte UUID made of the pattern v twice, little-endian. */
static void
uuid_from (uint8_t u[16], uint64_t v)
{
  poke (u, 16, v);
}

/* Recompute a record's crc32c over [0, length) with the crc field
 * zero, independently of meta.c.
 */
static void
reseal (uint8_t *buf, size_t bufsize)
{
  uint64_t length = peek (buf + 12, 4);

  if (length > bufsize)
    length = bufsize;
  poke (buf + 16, 4, 0);
  poke (buf + 16, 4, crc32c (0, buf, length));
}

/* The superblock most tests start from: 4 slots (0 and 1 members, 2
 * assigned, 3 free), this leg in slot 1, gen 10 with history 9, 7, 4.
 */
static void
base_sb (struct superblock *sb)
{
  memset (sb, 0, sizeof *sb);
  sb->seq = 6;
  uuid_from (sb->volume_uuid, VOL);
  uuid_from (sb->leg_uuid, LEG);
  sb->slot = 1;
  sb->max_legs = 4;
  sb->quorum = 2;
  sb->volume_size = 1 * GiB;
  sb->chunk_size = 64 * KiB;
  sb->al_extent_size = 4 * MiB;
  sb->al_extents = 1024;
  sb->ctime = 1700000000;
  sb->mtime = 1700000500;
  sb->gen = (struct gen) { 10, 0xa10 };
  sb->history_len = 3;
  sb->history[0] = (struct gen) { 9, 0xa09 };
  sb->history[1] = (struct gen) { 7, 0xa07 };
  sb->history[2] = (struct gen) { 4, 0xa04 };
  uuid_from (sb->slots[0].uuid, U0);
  sb->slots[0].flags = SLOT_ASSIGNED | SLOT_MEMBER;
  sb->slots[0].bm_gen = sb->gen;
  uuid_from (sb->slots[1].uuid, LEG);
  sb->slots[1].flags = SLOT_ASSIGNED | SLOT_MEMBER;
  sb->slots[1].bm_gen = sb->gen;
  uuid_from (sb->slots[2].uuid, U2);
  sb->slots[2].flags = SLOT_ASSIGNED;
  sb->slots[2].bm_gen = sb->history[1];
}

/* The name of the first field where a and b differ, or NULL. */
static const char *
sb_diff (const struct superblock *a, const struct superblock *b)
{
#define FIELD(f) if (memcmp (&a->f, &b->f, sizeof a->f) != 0) return #f
  FIELD (seq);
  FIELD (volume_uuid);
  FIELD (leg_uuid);
  FIELD (slot);
  FIELD (max_legs);
  FIELD (flags);
  FIELD (quorum);
  FIELD (volume_size);
  FIELD (chunk_size);
  FIELD (al_extent_size);
  FIELD (al_extents);
  FIELD (history_len);
  FIELD (ctime);
  FIELD (mtime);
  FIELD (gen);
  FIELD (history);
  for (unsigned s = 0; s < MAX_LEGS; ++s) {
    FIELD (slots[s].uuid);
    FIELD (slots[s].flags);
    FIELD (slots[s].bm_gen);
  }
#undef FIELD
  return NULL;
}

/* A superblock with every slot assigned to a distinct leg. */
static void
full_sb (struct superblock *sb, uint32_t max_legs, uint32_t slot)
{
  base_sb (sb);
  memset (sb->slots, 0, sizeof sb->slots);
  sb->max_legs = max_legs;
  sb->slot = slot;
  sb->quorum = max_legs;
  for (uint32_t s = 0; s < max_legs; ++s) {
    uuid_from (sb->slots[s].uuid, U9 + s);
    sb->slots[s].flags = SLOT_ASSIGNED | (s % 2 ? SLOT_MEMBER : 0);
    sb->slots[s].bm_gen = (struct gen) { s + 1, 0xb00 + s };
  }
  uuid_from (sb->leg_uuid, U9 + slot);
}

/* A superblock with a full history of 32 generations. */
static void
full_history_sb (struct superblock *sb)
{
  base_sb (sb);
  sb->gen = (struct gen) { 1000, 0xffffffffffffffffull };
  sb->history_len = META_HISTORY;
  for (unsigned i = 0; i < META_HISTORY; ++i)
    sb->history[i] = (struct gen) { 999 - 3 * i, rng () };
}

typedef void (*sb_maker) (struct superblock *sb);

/* Variants of full_sb for the round-trip table. */
static void sb_16_legs (struct superblock *sb) { full_sb (sb, 16, 15); }
static void sb_1_leg (struct superblock *sb) { full_sb (sb, 1, 0); }

/* A superblock with extreme but valid values everywhere. */
static void
sb_extremes (struct superblock *sb)
{
  full_sb (sb, 16, 0);
  sb->seq = UINT64_MAX;
  sb->flags = SB_INCONSISTENT;
  sb->quorum = 1;
  sb->volume_size = 4096;
  sb->chunk_size = 64 * MiB;
  sb->al_extent_size = 1 * GiB;
  sb->al_extents = AL_MAX_EXTENTS;
  sb->ctime = UINT64_MAX;
  sb->mtime = 0;
  sb->gen = (struct gen) { UINT64_MAX, 0 };
  sb->history_len = 1;
  memset (sb->history, 0, sizeof sb->history);
  sb->history[0] = (struct gen) { 1, UINT64_MAX };
}

/* A fresh superblock: generation 1, no history. */
static void
sb_fresh (struct superblock *sb)
{
  base_sb (sb);
  sb->gen = (struct gen) { 1, 0x1234 };
  sb->history_len = 0;
  memset (sb->history, 0, sizeof sb->history);
}

/* Encode, decode, compare; then the re-encoding must be identical. */
static void
test_sb_round_trip (void)
{
  static const struct { const char *name; sb_maker make; } cases[] = {
    { "base (4 slots)", base_sb },
    { "full history", full_history_sb },
    { "max_legs 16", sb_16_legs },
    { "max_legs 1", sb_1_leg },
    { "extremes", sb_extremes },
    { "fresh", sb_fresh },
  };

  for (size_t i = 0; i < NELEMS (cases); ++i) {
    struct superblock in, out;
    uint8_t buf[META_BLOCK], again[META_BLOCK];
    char err[256] = "";
    enum meta_status st;
    const char *diff;

    cases[i].make (&in);
    memset (buf, 0xee, sizeof buf);
    sb_encode (&in, buf);
    st = sb_decode (buf, &out, err, sizeof err);
    CHECKF (st == META_OK, "%s: %s: %s", cases[i].name, status_name[st], err);
    if (st != META_OK)
      continue;
    diff = sb_diff (&in, &out);
    CHECKF (diff == NULL, "%s: field %s differs", cases[i].name, diff);
    sb_encode (&out, again);
    CHECKF (memcmp (buf, again, sizeof buf) == 0,
            "%s: re-encoding differs", cases[i].name);
    CHECKF (buf[4095] == 0 && buf[SB_LENGTH] == 0,
            "%s: bytes past the record are not zero", cases[i].name);
  }
}

/* Check the documented bytes of an encoded superblock. */
static void
test_sb_bytes (void)
{
  struct superblock sb;
  uint8_t buf[META_BLOCK], copy[META_BLOCK];

  base_sb (&sb);
  sb_encode (&sb, buf);
  CHECK (memcmp (buf, "NBDRPSB1", 8) == 0);
  CHECK (peek (buf + 8, 4) == META_VERSION);
  CHECK (peek (buf + 12, 4) == SB_LENGTH);
  CHECK (peek (buf + 20, 4) == 0);
  CHECK (peek (buf + 24, 8) == 6);
  CHECK (peek (buf + 32, 8) == VOL && peek (buf + 40, 8) == VOL);
  CHECK (peek (buf + 48, 8) == LEG && peek (buf + 56, 8) == LEG);
  CHECK (peek (buf + 64, 4) == 1);
  CHECK (peek (buf + 68, 4) == 4);
  CHECK (peek (buf + 72, 4) == 0);
  CHECK (peek (buf + 76, 4) == 2);
  CHECK (peek (buf + 80, 8) == 1 * GiB);
  CHECK (buf[88] == 0 && buf[89] == 0 && buf[90] == 1 && buf[91] == 0);
  CHECK (peek (buf + 92, 4) == 4 * MiB);
  CHECK (peek (buf + 96, 4) == 1024);
  CHECK (peek (buf + 100, 4) == 3);
  CHECK (peek (buf + 104, 8) == 1700000000);
  CHECK (peek (buf + 112, 8) == 1700000500);
  CHECK (peek (buf + 120, 8) == 10 && peek (buf + 128, 8) == 0xa10);
  CHECK (peek (buf + 152, 8) == 7 && peek (buf + 160, 8) == 0xa07);
  CHECK (peek (buf + 648 + 40 + 0, 8) == LEG);     /* slot 1 uuid */
  CHECK (peek (buf + 648 + 40 + 16, 4) == 3);      /* slot 1 flags */
  CHECK (peek (buf + 648 + 80 + 24, 8) == 7);      /* slot 2 bm_gen */
  CHECK (peek (buf + 648 + 80 + 32, 8) == 0xa07);

  memcpy (copy, buf, sizeof copy);
  memset (copy + 16, 0, 4);
  CHECK (peek (buf + 16, 4) == crc32c (0, copy, SB_LENGTH));
}

struct corruption {
  unsigned offset;
  unsigned width;               /* 1, 4, 8, or 16 (the value twice) */
  uint64_t value;
  bool reseal;                  /* recompute the crc after the change */
  enum meta_status status;
  const char *msg;              /* must appear in the message */
};

/* Slot s's field at offset f in the superblock. */
#define SLOT(s, f) (648 + 40 * (s) + (f))
/* History entry i's counter. */
#define HIST(i) (136 + 16 * (i))

static const struct corruption sb_corruptions[] = {
  /* header */
  { 0, 1, 'X', false, META_BLANK, "no superblock" },
  { 7, 1, '2', true, META_BLANK, "no superblock" },
  { 8, 4, 2, false, META_CORRUPT, "superblock: unsupported version 2" },
  { 8, 4, 0, true, META_CORRUPT, "unsupported version 0" },
  { 12, 4, SB_LENGTH + 1, false, META_CORRUPT, "length 1289, expected 1288" },
  { 12, 4, 4096, true, META_CORRUPT, "length 4096, expected 1288" },
  { 12, 4, 0, false, META_CORRUPT, "length 0, expected 1288" },
  { 16, 4, 0xdeadbeef, false, META_CORRUPT,
    "checksum mismatch: stored 0xdeadbeef, computed 0x" },
  { 24, 1, 7, false, META_CORRUPT, "checksum mismatch" },
  { 100, 1, 0x7f, false, META_CORRUPT, "checksum mismatch" },
  { SB_LENGTH - 1, 1, 1, false, META_CORRUPT, "checksum mismatch" },
  { SB_LENGTH, 1, 0xff, false, META_OK, "" },
  { 4095, 1, 0xff, false, META_OK, "" },
  { 20, 4, 1, true, META_CORRUPT, "reserved header field is 0x1" },
  { 24, 8, 12345, true, META_OK, "" },
  /* identity */
  { 32, 16, 0, true, META_CORRUPT, "superblock: volume_uuid is zero" },
  { 32, 16, U9, true, META_OK, "" },
  { 48, 16, 0, true, META_CORRUPT, "superblock: leg_uuid is zero" },
  { 64, 4, 4, true, META_CORRUPT, "slot 4 is not below max_legs 4" },
  { 64, 4, 0, true, META_CORRUPT, "own slot 0 is assigned to another leg" },
  { 68, 4, 0, true, META_CORRUPT, "max_legs 0 is not in [1, 16]" },
  { 68, 4, 17, true, META_CORRUPT, "max_legs 17 is not in [1, 16]" },
  { 68, 4, 1, true, META_CORRUPT, "slot 1 is not below max_legs 1" },
  { 68, 4, 2, true, META_CORRUPT, "slot 2 beyond max_legs 2 is not zero" },
  { 68, 4, 3, true, META_OK, "" },
  { 72, 4, SB_INCONSISTENT, true, META_OK, "" },
  { 72, 4, 2, true, META_CORRUPT, "superblock: flags 0x2 has unknown bits" },
  { 72, 4, 0x80000001, true, META_CORRUPT, "flags 0x80000001 has unknown" },
  { 76, 4, 0, true, META_CORRUPT, "quorum 0 is not in [1, max_legs 4]" },
  { 76, 4, 5, true, META_CORRUPT, "quorum 5 is not in [1, max_legs 4]" },
  { 76, 4, 4, true, META_OK, "" },
  /* geometry */
  { 80, 8, 0, true, META_CORRUPT, "superblock: volume_size is 0" },
  { 80, 8, 1 * GiB + 512, true, META_CORRUPT,
    "volume_size 1073742336 is not a multiple of 4096" },
  { 80, 8, 1ull << 63, true, META_CORRUPT,
    "volume_size 9223372036854775808 is too large" },
  { 80, 8, 4096, true, META_OK, "" },
  { 88, 4, 3000, true, META_CORRUPT,
    "superblock: chunk_size 3000 is not a power of two" },
  { 88, 4, 0, true, META_CORRUPT, "chunk_size 0 is not a power of two" },
  { 88, 4, 2048, true, META_CORRUPT,
    "chunk_size 2048 is not in [4096, 67108864]" },
  { 88, 4, 128 * MiB, true, META_CORRUPT,
    "chunk_size 134217728 is not in [4096, 67108864]" },
  { 88, 4, 4 * KiB, true, META_OK, "" },
  { 92, 4, 3 * MiB, true, META_CORRUPT,
    "al_extent_size 3145728 is not a power of two" },
  { 92, 4, 32 * KiB, true, META_CORRUPT,
    "al_extent_size 32768 is not in [chunk_size 65536, 1073741824]" },
  { 92, 4, 2 * GiB, true, META_CORRUPT,
    "al_extent_size 2147483648 is not in" },
  { 92, 4, 64 * KiB, true, META_OK, "" },
  { 96, 4, 0, true, META_CORRUPT, "al_extents 0 is not in [1, 65536]" },
  { 96, 4, 65537, true, META_CORRUPT, "al_extents 65537 is not in" },
  { 96, 4, 65536, true, META_OK, "" },
  { 104, 8, 0, true, META_OK, "" },
  { 112, 8, UINT64_MAX, true, META_OK, "" },
  /* generations */
  { 100, 4, 33, true, META_CORRUPT, "history_len 33 is above 32" },
  { 100, 4, 2, true, META_CORRUPT,
    "history[2] beyond history_len 2 is not zero" },
  { 100, 4, 0, true, META_CORRUPT,
    "history[0] beyond history_len 0 is not zero" },
  { 100, 4, 4, true, META_CORRUPT, "history[3] counter is 0" },
  { 120, 8, 0, true, META_CORRUPT, "superblock: gen counter is 0" },
  { 120, 8, 9, true, META_CORRUPT,
    "history[0] counter 9 is not below 9 (newest first)" },
  { 120, 8, UINT64_MAX, true, META_OK, "" },
  { 128, 8, 0, true, META_OK, "" },
  { HIST (0), 8, 10, true, META_CORRUPT,
    "history[0] counter 10 is not below 10" },
  { HIST (0), 8, 0, true, META_CORRUPT, "history[0] counter is 0" },
  { HIST (1), 8, 9, true, META_CORRUPT, "history[1] counter 9 is not below 9" },
  { HIST (1), 8, 8, true, META_OK, "" },
  { HIST (2), 8, 8, true, META_CORRUPT, "history[2] counter 8 is not below 7" },
  { HIST (2), 8, 0, true, META_CORRUPT, "history[2] counter is 0" },
  { HIST (2) + 8, 8, 0, true, META_OK, "" },
  { HIST (3), 1, 1, true, META_CORRUPT, "history[3] beyond history_len 3" },
  { HIST (3) + 8, 1, 1, true, META_CORRUPT, "history[3] beyond history_len" },
  { HIST (31) + 15, 1, 1, true, META_CORRUPT, "history[31] beyond" },
  /* slots */
  { SLOT (0, 16), 4, 0x10, true, META_CORRUPT,
    "slot 0 flags 0x10 has unknown bits" },
  { SLOT (3, 16), 4, 0x24, true, META_CORRUPT,
    "slot 3 flags 0x24 has unknown bits" },
  { SLOT (0, 16), 4, SLOT_ASSIGNED | SLOT_TRACKER, true, META_OK, "" },
  { SLOT (0, 16), 4, SLOT_ASSIGNED | SLOT_TRACKER | SLOT_BASE, true,
    META_OK, "" },
  { SLOT (0, 16), 4, 7, true, META_CORRUPT,
    "slot 0 tracks changed blocks but is a member" },
  { SLOT (3, 16), 4, SLOT_TRACKER, true, META_CORRUPT,
    "slot 3 tracks changed blocks but is not assigned" },
  { SLOT (0, 16), 4, SLOT_ASSIGNED | SLOT_BASE, true, META_CORRUPT,
    "slot 0 names a backup but does not track changed blocks" },
  { SLOT (0, 20), 4, 1, true, META_CORRUPT,
    "slot 0 reserved field is 0x1, not 0" },
  { SLOT (3, 20), 1, 1, true, META_CORRUPT, "slot 3 reserved field is 0x1" },
  { SLOT (0, 24), 8, 5, true, META_OK, "" },
  { SLOT (0, 16), 4, 0, true, META_CORRUPT,
    "slot 0 is not assigned but has a uuid" },
  { SLOT (0, 16), 4, SLOT_ASSIGNED, true, META_OK, "" },
  { SLOT (1, 16), 4, 0, true, META_CORRUPT, "own slot 1 is not assigned" },
  { SLOT (1, 16), 4, SLOT_MEMBER, true, META_CORRUPT,
    "own slot 1 is not assigned" },
  { SLOT (1, 0), 16, U9, true, META_CORRUPT,
    "own slot 1 is assigned to another leg" },
  { SLOT (2, 0), 16, 0, true, META_CORRUPT,
    "slot 2 is assigned but its uuid is zero" },
  { SLOT (2, 0), 16, U0, true, META_CORRUPT,
    "slot 2 has the same uuid as slot 0" },
  { SLOT (2, 0), 16, LEG, true, META_CORRUPT,
    "slot 2 has the same uuid as slot 1" },
  { SLOT (3, 0), 16, U9, true, META_CORRUPT,
    "slot 3 is not assigned but has a uuid" },
  { SLOT (3, 15), 1, 1, true, META_CORRUPT,
    "slot 3 is not assigned but has a uuid" },
  { SLOT (3, 16), 4, SLOT_MEMBER, true, META_CORRUPT,
    "slot 3 is not assigned but has the member flag" },
  { SLOT (3, 24), 8, 3, true, META_OK, "" },
  { SLOT (4, 0), 1, 1, true, META_CORRUPT,
    "slot 4 beyond max_legs 4 is not zero" },
  { SLOT (6, 24), 8, 1, true, META_CORRUPT, "slot 6 beyond max_legs 4" },
  { SLOT (15, 39), 1, 1, true, META_CORRUPT, "slot 15 beyond max_legs 4" },
};

/* Apply one corruption row to a copy of a valid record of bufsize
 * bytes.
 */
static void
apply_corruption (uint8_t *buf, size_t bufsize, const struct corruption *c)
{
  poke (buf + c->offset, c->width, c->value);
  if (c->reseal)
    reseal (buf, bufsize);
}

/* Check a decode result against a corruption row. */
static void
check_row (const char *what, size_t row, const struct corruption *c,
           enum meta_status st, const char *err)
{
  CHECKF (st == c->status, "%s row %zu (offset %u = %" PRIu64 "):"
          " status %s, expected %s (%s)", what, row, c->offset, c->value,
          status_name[st], status_name[c->status], err);
  CHECKF (strstr (err, c->msg) != NULL,
          "%s row %zu (offset %u): message \"%s\" lacks \"%s\"",
          what, row, c->offset, err, c->msg);
}

/* Every row of the superblock corruption table. */
static void
test_sb_corruptions (void)
{
  struct superblock sb, out;
  uint8_t good[META_BLOCK];

  base_sb (&sb);
  sb_encode (&sb, good);
  for (size_t i = 0; i < NELEMS (sb_corruptions); ++i) {
    const struct corruption *c = &sb_corruptions[i];
    uint8_t buf[META_BLOCK];
    char err[256] = "";
    enum meta_status st;

    memcpy (buf, good, sizeof buf);
    apply_corruption (buf, sizeof buf, c);
    CHECKF (memcmp (buf, good, sizeof buf) != 0,
            "sb row %zu changes nothing", i);
    st = sb_decode (buf, &out, err, sizeof err);
    check_row ("sb", i, c, st, err);
  }
}

/* Messages are cut to fit small buffers, and errlen 0 writes nothing. */
static void
test_short_err (void)
{
  struct superblock sb;
  uint8_t buf[META_BLOCK];
  char full[256], small[12];

  base_sb (&sb);
  sb.chunk_size = 3000;
  sb_encode (&sb, buf);
  CHECK (sb_decode (buf, &sb, full, sizeof full) == META_CORRUPT);
  memset (small, 'x', sizeof small);
  CHECK (sb_decode (buf, &sb, small, sizeof small) == META_CORRUPT);
  CHECK (small[sizeof small - 1] == '\0');
  CHECK (strncmp (small, full, sizeof small - 1) == 0);
  CHECK (sb_decode (buf, &sb, NULL, 0) == META_CORRUPT);
  CHECK (md_layout_init (&(struct md_layout) { 0 }, 0, 4096, 1, 4096, 1,
                         NULL, 0) == -1);
}

/* The activity log used by the AL tests. */
#define AL_CAP 8
#define AL_NR_EXTENTS 256
static const uint32_t al_base[] = { 2, 17, 255 };

/* AL offsets of the base record: extent i at 56 + 4 * i. */
#define ALX(i) (56 + 4 * (i))

static const struct corruption al_corruptions[] = {
  { 0, 1, 'x', false, META_BLANK, "no activity log" },
  { 4, 1, 'S', true, META_BLANK, "no activity log" },
  { 8, 4, 7, false, META_CORRUPT, "activity log: unsupported version 7" },
  { 12, 4, 57, true, META_CORRUPT, "length 57 is not 56 plus a multiple of 4" },
  { 12, 4, 52, true, META_CORRUPT, "length 52 is not 56" },
  { 12, 4, 56 + 4 * 9, false, META_CORRUPT,
    "length 92 exceeds the capacity of 8 extents" },
  { 12, 4, 0xfffffffc, false, META_CORRUPT, "exceeds the capacity" },
  { 12, 4, 64, true, META_CORRUPT, "nr 3 does not match length 64" },
  { 16, 4, 1, false, META_CORRUPT, "checksum mismatch: stored 0x00000001" },
  { ALX (2), 1, 0, false, META_CORRUPT, "checksum mismatch" },
  { ALX (3), 4, 9, false, META_OK, "" },         /* past the length */
  { 20, 4, 0x100, true, META_CORRUPT, "reserved header field is 0x100" },
  { 24, 8, 99, true, META_OK, "" },
  { 32, 16, U9, true, META_CORRUPT, "volume_uuid does not match" },
  { 47, 1, 0, true, META_CORRUPT, "volume_uuid does not match" },
  { 48, 4, 1 * MiB, true, META_CORRUPT,
    "al_extent_size 1048576 does not match the volume's 4194304" },
  { 52, 4, 4, true, META_CORRUPT, "nr 4 does not match length 68" },
  { 52, 4, 2, true, META_CORRUPT, "nr 2 does not match length 68" },
  { ALX (2), 4, 256, true, META_CORRUPT,
    "extents[2] 256 is not below nr_al_extents 256" },
  { ALX (0), 4, 0xffffffff, true, META_CORRUPT, "extents[0] 4294967295" },
  { ALX (1), 4, 2, true, META_CORRUPT,
    "extents[1] 2 is not above extents[0] 2" },
  { ALX (1), 4, 1, true, META_CORRUPT,
    "extents[1] 1 is not above extents[0] 2" },
  { ALX (0), 4, 0, true, META_OK, "" },
};

/* Every row of the activity-log corruption table. */
static void
test_al_corruptions (void)
{
  uint8_t vol[16], good[META_BLOCK];

  CHECK (al_record_bytes (AL_CAP) == sizeof good);
  uuid_from (vol, VOL);
  al_encode (good, AL_CAP, 5, vol, 4 * MiB, al_base, NELEMS (al_base));
  for (size_t i = 0; i < NELEMS (al_corruptions); ++i) {
    const struct corruption *c = &al_corruptions[i];
    uint8_t buf[META_BLOCK];
    uint32_t ext[AL_CAP], nr;
    uint64_t seq;
    char err[256] = "";
    enum meta_status st;

    memcpy (buf, good, sizeof buf);
    apply_corruption (buf, sizeof buf, c);
    st = al_decode (buf, AL_CAP, vol, 4 * MiB, AL_NR_EXTENTS, &seq, ext, &nr,
                    err, sizeof err);
    check_row ("al", i, c, st, err);
  }
}

/* The bitmap page used by the bitmap tests: slot 2, page 7.  Its
 * bm_gen (56) is returned, not judged, so any value decodes.
 */
static const struct corruption bm_corruptions[] = {
  { 0, 1, 'n', false, META_BLANK, "no bitmap page" },
  { 5, 1, 'A', true, META_BLANK, "no bitmap page" },
  { 8, 4, 3, false, META_CORRUPT, "bitmap page: unsupported version 3" },
  { 12, 4, 4095, true, META_CORRUPT, "length 4095, expected 4096" },
  { 12, 4, 4097, false, META_CORRUPT, "length 4097, expected 4096" },
  { 16, 4, 0, false, META_CORRUPT, "checksum mismatch: stored 0x00000000" },
  { 4095, 1, 0x5a, false, META_CORRUPT, "checksum mismatch" },
  { 20, 4, 2, true, META_CORRUPT, "reserved header field is 0x2" },
  { 24, 8, 0, true, META_OK, "" },
  { 32, 16, U9, true, META_CORRUPT, "bitmap page: volume_uuid does not match" },
  { 48, 4, 3, true, META_CORRUPT, "bitmap page: slot 3, expected 2" },
  { 52, 4, 8, true, META_CORRUPT, "bitmap page: page 8, expected 7" },
  { 56, 8, 0, true, META_OK, "" },
  { 64, 8, UINT64_MAX, true, META_OK, "" },
  { 72, 1, 1, true, META_CORRUPT, "reserved bytes are not zero" },
  { 79, 1, 0x80, true, META_CORRUPT, "reserved bytes are not zero" },
  { 80, 8, 0, true, META_OK, "" },
  { 4088, 8, UINT64_MAX, true, META_OK, "" },
};

/* Every row of the bitmap-page corruption table. */
static void
test_bm_corruptions (void)
{
  static uint64_t words[BM_PAGE_WORDS], out[BM_PAGE_WORDS];
  uint8_t vol[16], good[META_BLOCK];

  uuid_from (vol, VOL);
  for (size_t i = 0; i < BM_PAGE_WORDS; ++i)
    words[i] = i * 0x0101010101010101ull;
  bm_page_encode (good, 11, vol, 2, 7, (struct gen) { 5, 0xa05 }, words);
  for (size_t i = 0; i < NELEMS (bm_corruptions); ++i) {
    const struct corruption *c = &bm_corruptions[i];
    uint8_t buf[META_BLOCK];
    uint64_t seq;
    struct gen g;
    char err[256] = "";
    enum meta_status st;

    memcpy (buf, good, sizeof buf);
    apply_corruption (buf, sizeof buf, c);
    st = bm_page_decode (buf, vol, 2, 7, &seq, &g, out, err, sizeof err);
    check_row ("bm", i, c, st, err);
  }
}

/* Failed decodes leave defined outputs: seq 0 unless the checksum
 * passed.
 */
static void
test_failed_outputs (void)
{
  static uint64_t words[BM_PAGE_WORDS];
  struct superblock sb;
  uint8_t buf[META_BLOCK] = { 0 }, vol[16];
  uint32_t ext[AL_CAP], nr = 77;
  uint64_t seq = 77;
  struct gen g = { 77, 77 };

  uuid_from (vol, VOL);
  memset (&sb, 0xff, sizeof sb);
  CHECK (sb_decode (buf, &sb, NULL, 0) == META_BLANK);
  CHECK (sb.seq == 0 && sb.max_legs == 0 && sb.slots[15].flags == 0);
  CHECK (al_decode (buf, AL_CAP, vol, 4 * MiB, AL_NR_EXTENTS, &seq, ext, &nr,
                    NULL, 0) == META_BLANK);
  CHECK (seq == 0 && nr == 0);
  seq = 77;
  CHECK (bm_page_decode (buf, vol, 2, 7, &seq, &g, words, NULL, 0)
         == META_BLANK);
  CHECK (seq == 0 && g.counter == 0 && g.id == 0);
}

/* Activity logs of 0, 1 and capacity extents round trip. */
static void
test_al_round_trip (void)
{
  static const struct {
    uint32_t capacity, nr, first, step;
    uint64_t nr_al_extents, bytes;
  } cases[] = {
    { 8, 0, 0, 0, 1, 4096 },
    { 8, 1, 0, 0, 1, 4096 },
    { 8, 8, 3, 5, 100, 4096 },
    { 1, 1, 41, 0, 42, 4096 },
    { 1010, 1010, 0, 1, 1010, 4096 },   /* 56 + 4040 = 4096 exactly */
    { 1011, 1011, 0, 1, 1011, 8192 },
    { 1024, 1, 4000000000u, 0, 4000000001ull, 8192 },
    { AL_MAX_EXTENTS, AL_MAX_EXTENTS, 7, 3, 1 << 20, 266240 },
  };

  for (size_t i = 0; i < NELEMS (cases); ++i) {
    uint32_t cap = cases[i].capacity, n = cases[i].nr;
    uint64_t bytes = al_record_bytes (cap), seq = 0;
    uint8_t *buf = malloc (bytes);
    uint32_t *in = malloc (cap * sizeof *in), *out = malloc (cap * sizeof *out);
    uint8_t vol[16];
    uint32_t nr = UINT32_MAX;
    char err[256] = "";
    enum meta_status st;

    if (!buf || !in || !out) {
      perror ("malloc");
      exit (EXIT_FAILURE);
    }
    CHECKF (bytes == cases[i].bytes, "al row %zu: al_record_bytes %" PRIu64
            ", expected %" PRIu64, i, bytes, cases[i].bytes);
    uuid_from (vol, VOL + i);
    for (uint32_t j = 0; j < n; ++j)
      in[j] = cases[i].first + j * cases[i].step;
    memset (buf, 0xee, bytes);
    al_encode (buf, cap, 1000 + i, vol, 64 * KiB, in, n);
    CHECKF (peek (buf + 12, 4) == 56 + 4 * n, "al row %zu: length", i);
    CHECKF (peek (buf + 52, 4) == n, "al row %zu: nr", i);
    CHECKF (n == 0 || peek (buf + 56, 4) == in[0], "al row %zu: extents[0]", i);
    CHECKF (buf[bytes - 1] == 0, "al row %zu: tail not zeroed", i);
    st = al_decode (buf, cap, vol, 64 * KiB, cases[i].nr_al_extents,
                    &seq, out, &nr, err, sizeof err);
    CHECKF (st == META_OK, "al row %zu: %s: %s", i, status_name[st], err);
    CHECKF (seq == 1000 + i && nr == n, "al row %zu: seq %" PRIu64 " nr %"
            PRIu32, i, seq, nr);
    CHECKF (st != META_OK || memcmp (in, out, n * sizeof *in) == 0,
            "al row %zu: extents differ", i);
    free (buf);
    free (in);
    free (out);
  }
}

/* Bitmap pages with various patterns round trip. */
static void
test_bm_round_trip (void)
{
  enum { ZERO, ONES, ALTERNATE, MIXED, LAST_BIT, FIRST_BIT };
  static const struct {
    int pattern;
    uint32_t slot, page;
    struct gen bm_gen;
  } cases[] = {
    { ZERO, 0, 0, { 1, 0 } },
    { ONES, 15, 1, { UINT64_MAX, UINT64_MAX } },
    { ALTERNATE, 3, 100, { 42, 0x1234567890abcdefull } },
    { MIXED, 7, 0xffffffff, { 7, 7 } },
    { LAST_BIT, 1, 2, { 0, 0 } },
    { FIRST_BIT, 0, 9, { 1ull << 63, 1 } },
  };

  for (size_t i = 0; i < NELEMS (cases); ++i) {
    static uint64_t in[BM_PAGE_WORDS], out[BM_PAGE_WORDS];
    uint8_t buf[META_BLOCK], vol[16];
    uint64_t seq = 0;
    struct gen g = { 99, 99 };
    char err[256] = "";
    enum meta_status st;

    memset (in, 0, sizeof in);
    for (size_t w = 0; w < BM_PAGE_WORDS; ++w) {
      switch (cases[i].pattern) {
      case ONES: in[w] = UINT64_MAX; break;
      case ALTERNATE: in[w] = 0xaaaaaaaaaaaaaaaaull; break;
      case MIXED: in[w] = (w + 1) * 0x9e3779b97f4a7c15ull; break;
      default: break;
      }
    }
    if (cases[i].pattern == LAST_BIT)
      in[BM_PAGE_WORDS - 1] = 1ull << 63;
    if (cases[i].pattern == FIRST_BIT)
      in[0] = 1;
    uuid_from (vol, U0);
    bm_page_encode (buf, 77 + i, vol, cases[i].slot, cases[i].page,
                    cases[i].bm_gen, in);
    CHECKF (peek (buf + 12, 4) == META_BLOCK, "bm row %zu: length", i);
    CHECKF (peek (buf + 48, 4) == cases[i].slot, "bm row %zu: slot", i);
    CHECKF (peek (buf + 52, 4) == cases[i].page, "bm row %zu: page", i);
    CHECKF (peek (buf + 56, 8) == cases[i].bm_gen.counter &&
            peek (buf + 64, 8) == cases[i].bm_gen.id, "bm row %zu: bm_gen", i);
    CHECKF (peek (buf + 80, 8) == in[0], "bm row %zu: word 0", i);
    CHECKF (peek (buf + 4088, 8) == in[BM_PAGE_WORDS - 1],
            "bm row %zu: last word", i);
    memset (out, 0x55, sizeof out);
    st = bm_page_decode (buf, vol, cases[i].slot, cases[i].page, &seq, &g,
                         out, err, sizeof err);
    CHECKF (st == META_OK, "bm row %zu: %s: %s", i, status_name[st], err);
    CHECKF (seq == 77 + i, "bm row %zu: seq %" PRIu64, i, seq);
    CHECKF (gen_equal (g, cases[i].bm_gen), "bm row %zu: bm_gen", i);
    CHECKF (memcmp (in, out, sizeof in) == 0, "bm row %zu: words differ", i);
  }
}

/* Random blocks: without our magic BLANK; with it, CORRUPT (the crc
 * catches random bodies; with a valid header and crc, the field checks
 * do).
 */
static void
test_random_blocks (void)
{
  static const char *const magics[] = { "NBDRPSB1", "NBDRPAL1", "NBDRPBM1" };
  static const uint32_t lengths[] = { SB_LENGTH, 0, META_BLOCK };
  struct superblock sb;
  uint8_t vol[16];
  unsigned bad[3][3] = { { 0 } };

  uuid_from (vol, VOL);
  for (unsigned n = 0; n < 10000; ++n) {
    for (unsigned kind = 0; kind < 3; ++kind) {
      for (unsigned mode = 0; mode < 3; ++mode) {
        static uint64_t words[BM_PAGE_WORDS];
        uint8_t buf[META_BLOCK];
        uint32_t ext[AL_CAP], nr;
        uint64_t seq;
        struct gen g;
        enum meta_status st, want = mode == 0 ? META_BLANK : META_CORRUPT;
        uint32_t length = lengths[kind];

        rng_fill (buf, sizeof buf);
        if (mode >= 1)
          memcpy (buf, magics[kind], 8);
        if (mode == 2) {
          if (kind == 1)
            length = 56 + 4 * (rng () % (AL_CAP + 1));
          poke (buf + 8, 4, META_VERSION);
          poke (buf + 12, 4, length);
          reseal (buf, sizeof buf);
        }
        if (kind == 0)
          st = sb_decode (buf, &sb, NULL, 0);
        else if (kind == 1)
          st = al_decode (buf, AL_CAP, vol, 4 * MiB, AL_NR_EXTENTS, &seq,
                          ext, &nr, NULL, 0);
        else
          st = bm_page_decode (buf, vol, 2, 7, &seq, &g, words, NULL, 0);
        bad[kind][mode] += st != want;
      }
    }
  }
  for (unsigned kind = 0; kind < 3; ++kind)
    for (unsigned mode = 0; mode < 3; ++mode)
      CHECKF (bad[kind][mode] == 0, "%s mode %u: %u of 10000 decoded wrongly",
              magics[kind], mode, bad[kind][mode]);
}

/* A torn write mixes a new superblock with what was there before at
 * every cut point: only a block equal to a valid record decodes.
 */
static void
test_torn_writes (void)
{
  struct superblock sb;
  uint8_t newer[META_BLOCK], older[META_BLOCK], zero[META_BLOCK] = { 0 };
  const uint8_t *before[] = { older, zero };

  base_sb (&sb);
  sb_encode (&sb, older);
  sb.seq += 2;
  sb.mtime += 60;
  sb_push_gen (&sb, (struct gen) { 11, 0xa11 });
  sb_encode (&sb, newer);

  for (size_t b = 0; b < NELEMS (before); ++b) {
    for (unsigned cut = 0; cut <= META_BLOCK; ++cut) {
      uint8_t buf[META_BLOCK];
      enum meta_status st, want;

      memcpy (buf, newer, cut);
      memcpy (buf + cut, before[b] + cut, META_BLOCK - cut);
      if (memcmp (buf, "NBDRPSB1", 8) != 0)
        want = META_BLANK;
      else if (memcmp (buf, newer, SB_LENGTH) == 0 ||
               memcmp (buf, older, SB_LENGTH) == 0)
        want = META_OK;
      else
        want = META_CORRUPT;
      st = sb_decode (buf, &sb, NULL, 0);
      CHECKF (st == want, "torn write over %s at %u: %s, expected %s",
              b ? "zeros" : "older", cut, status_name[st], status_name[want]);
    }
  }
}

struct layout_case {
  uint64_t volume;
  uint32_t chunk, max_legs, al_extent, al_extents;
  uint64_t nr_chunks, nr_al_extents, bm_pages, al_bytes, md_size;
};

/* md_size = max_legs * bm_pages * 8192 + 2 * al_bytes + 8192, worked
 * out by hand.  al_bytes: 1 extent 4096, 1024 extents 8192 (4152 up),
 * 65536 extents 266240 (262200 up to 65 blocks).
 */
static const struct layout_case layouts[] = {
  { 4 * KiB, 4 * KiB, 1, 4 * MiB, 1, 1, 1, 1, 4096, 24576 },
  { 4 * KiB, 64 * KiB, 16, 4 * MiB, 65536, 1, 1, 1, 266240, 671744 },
  { 1 * MiB, 4 * KiB, 8, 4 * MiB, 1024, 256, 1, 1, 8192, 90112 },
  { 1 * MiB, 1 * MiB, 1, 4 * MiB, 1, 1, 1, 1, 4096, 24576 },
  { 1 * MiB, 64 * KiB, 1, 64 * KiB, 65536, 16, 16, 1, 266240, 548864 },
  /* 262144 chunks / 32128 = 8.16: 9 pages */
  { 1 * GiB, 4 * KiB, 16, 4 * MiB, 1024, 262144, 256, 9, 8192, 1204224 },
  { 1 * GiB + 4 * KiB, 4 * KiB, 8, 4 * MiB, 1024, 262145, 257, 9, 8192,
    614400 },
  { 1 * GiB, 64 * KiB, 8, 4 * MiB, 65536, 16384, 256, 1, 266240, 606208 },
  { 1 * GiB, 1 * MiB, 16, 4 * MiB, 1, 1024, 256, 1, 4096, 147456 },
  /* 2^28 chunks / 32128 = 8355.19: 8356 pages */
  { 1 * TiB, 4 * KiB, 1, 4 * MiB, 65536, 268435456, 262144, 8356, 266240,
    68993024 },
  /* 2^24 chunks / 32128 = 522.2: 523 pages */
  { 1 * TiB, 64 * KiB, 8, 4 * MiB, 1024, 16777216, 262144, 523, 8192,
    34299904 },
  { 1 * TiB, 64 * KiB, 16, 64 * KiB, 65536, 16777216, 16777216, 523, 266240,
    69091328 },
  /* 2^20 chunks / 32128 = 32.64: 33 pages */
  { 1 * TiB, 1 * MiB, 16, 1 * GiB, 1024, 1048576, 1024, 33, 8192, 4349952 },
};

/* Check md_layout_init against the hand-computed table. */
static void
test_layouts (void)
{
  for (size_t i = 0; i < NELEMS (layouts); ++i) {
    const struct layout_case *c = &layouts[i];
    struct md_layout l;
    char err[256] = "";
    int r;

    r = md_layout_init (&l, c->volume, c->chunk, c->max_legs, c->al_extent,
                        c->al_extents, err, sizeof err);
    CHECKF (r == 0, "layout row %zu: %s", i, err);
    if (r != 0)
      continue;
    CHECKF (l.volume_size == c->volume && l.chunk == c->chunk &&
            l.max_legs == c->max_legs && l.al_extent == c->al_extent &&
            l.al_extents == c->al_extents, "layout row %zu: inputs", i);
    CHECKF (l.nr_chunks == c->nr_chunks, "layout row %zu: nr_chunks %" PRIu64,
            i, l.nr_chunks);
    CHECKF (l.nr_al_extents == c->nr_al_extents,
            "layout row %zu: nr_al_extents %" PRIu64, i, l.nr_al_extents);
    CHECKF (l.bm_pages == c->bm_pages, "layout row %zu: bm_pages %" PRIu64,
            i, l.bm_pages);
    CHECKF (l.al_bytes == c->al_bytes, "layout row %zu: al_bytes %" PRIu64,
            i, l.al_bytes);
    CHECKF (l.md_size == c->md_size, "layout row %zu: md_size %" PRIu64,
            i, l.md_size);
  }
}

/* Invalid geometries are rejected with a message naming the field. */
static void
test_bad_layouts (void)
{
  static const struct {
    uint64_t volume;
    uint32_t chunk, max_legs, al_extent, al_extents;
    const char *msg;
  } cases[] = {
    { 1 * GiB, 3000, 8, 4 * MiB, 1024,
      "chunk_size 3000 is not a power of two" },
    { 1 * GiB, 0, 8, 4 * MiB, 1024, "chunk_size 0 is not a power of two" },
    { 1 * GiB, 2048, 8, 4 * MiB, 1024, "chunk_size 2048 is not in [4096," },
    { 1 * GiB, 128 * MiB, 8, 1 * GiB, 1024, "chunk_size 134217728 is not in" },
    { 1 * GiB, 64 * KiB, 0, 4 * MiB, 1024, "max_legs 0 is not in [1, 16]" },
    { 1 * GiB, 64 * KiB, 17, 4 * MiB, 1024, "max_legs 17 is not in [1, 16]" },
    { 1 * GiB, 64 * KiB, 8, 5 * MiB, 1024,
      "al_extent_size 5242880 is not a power of two" },
    { 1 * GiB, 64 * KiB, 8, 0, 1024, "al_extent_size 0 is not a power of two" },
    { 1 * GiB, 64 * KiB, 8, 32 * KiB, 1024,
      "al_extent_size 32768 is not in [chunk_size 65536, 1073741824]" },
    { 1 * GiB, 64 * KiB, 8, 2 * GiB, 1024, "al_extent_size 2147483648" },
    { 1 * GiB, 64 * KiB, 8, 4 * MiB, 0, "al_extents 0 is not in [1, 65536]" },
    { 1 * GiB, 64 * KiB, 8, 4 * MiB, 65537, "al_extents 65537 is not in" },
    { 0, 64 * KiB, 8, 4 * MiB, 1024, "volume_size is 0" },
    { 4097, 64 * KiB, 8, 4 * MiB, 1024,
      "volume_size 4097 is not a multiple of 4096" },
    { (1ull << 63) - 4096, 64 * KiB, 8, 4 * MiB, 1024,
      "volume_size 9223372036854771712 is too large" },
    { UINT64_MAX - 4095, 4 * KiB, 16, 4 * MiB, 65536, "is too large" },
  };

  for (size_t i = 0; i < NELEMS (cases); ++i) {
    struct md_layout l;
    char err[256] = "";
    int r;

    r = md_layout_init (&l, cases[i].volume, cases[i].chunk,
                        cases[i].max_legs, cases[i].al_extent,
                        cases[i].al_extents, err, sizeof err);
    CHECKF (r == -1, "bad layout row %zu accepted", i);
    CHECKF (strstr (err, cases[i].msg) != NULL,
            "bad layout row %zu: \"%s\" lacks \"%s\"", i, err, cases[i].msg);
  }
}

/* Offsets for one hand-worked leg, and that the records of a bigger
 * layout tile the metadata area exactly, in the documented order.
 */
static void
test_offsets (void)
{
  struct md_layout l;
  uint64_t leg, next;

  /* layouts[2]: 1 MiB, 8 legs, 1 page, al_bytes 8192, md_size 90112. */
  CHECK (md_layout_init (&l, 1 * MiB, 4 * KiB, 8, 4 * MiB, 1024,
                         NULL, 0) == 0);
  leg = 1 * MiB + 90112;
  CHECK (md_sb_offset (leg, 0) == 1130496);
  CHECK (md_sb_offset (leg, 1) == 1134592);
  CHECK (md_area_offset (&l, leg) == 1 * MiB);
  CHECK (md_bm_offset (&l, leg, 0, 0, 0) == 1 * MiB);
  CHECK (md_bm_offset (&l, leg, 0, 0, 1) == 1 * MiB + 4096);
  CHECK (md_bm_offset (&l, leg, 7, 0, 1) == 1110016);
  CHECK (md_al_offset (&l, leg, 0) == 1114112);
  CHECK (md_al_offset (&l, leg, 1) == 1122304);
  /* The superblock is in the last 8K whatever the leg. */
  CHECK (md_sb_offset (8192, 0) == 0);
  CHECK (md_sb_offset (UINT64_MAX, 1) == UINT64_MAX - 4096);

  /* layouts[5]: 16 legs of 9 pages; the leg a little larger. */
  CHECK (md_layout_init (&l, 1 * GiB, 4 * KiB, 16, 4 * MiB, 1024,
                         NULL, 0) == 0);
  leg = 1 * GiB + l.md_size + 12345;
  next = md_area_offset (&l, leg);
  CHECK (next == 1 * GiB + 12345);
  for (unsigned s = 0; s < 16; ++s)
    for (uint64_t p = 0; p < l.bm_pages; ++p)
      for (unsigned c = 0; c < 2; ++c) {
        CHECKF (md_bm_offset (&l, leg, s, p, c) == next,
                "slot %u page %" PRIu64 " copy %u", s, p, c);
        next += META_BLOCK;
      }
  CHECK (md_al_offset (&l, leg, 0) == next);
  CHECK (md_al_offset (&l, leg, 1) == next + l.al_bytes);
  CHECK (md_sb_offset (leg, 0) == next + 2 * l.al_bytes);
  CHECK (md_sb_offset (leg, 1) + META_BLOCK == leg);
}

/* Does a volume of v bytes fit in a leg with this geometry? */
static bool
fits (uint64_t v, uint64_t leg, const struct layout_case *g)
{
  struct md_layout l;

  if (md_layout_init (&l, v, g->chunk, g->max_legs, g->al_extent,
                      g->al_extents, NULL, 0) == -1)
    return false;
  return l.volume_size + l.md_size <= leg;
}

/* md_max_volume_size (leg) fits and one more 4K block does not. */
static void
check_max_volume (uint64_t leg, const struct layout_case *g, size_t gi)
{
  uint64_t v = md_max_volume_size (leg, g->chunk, g->max_legs, g->al_extent,
                                   g->al_extents);

  if (v == 0) {
    CHECKF (!fits (4096, leg, g), "geometry %zu leg %" PRIu64 ": 0 but 4K"
            " fits", gi, leg);
    return;
  }
  CHECKF (v % 4096 == 0 && fits (v, leg, g),
          "geometry %zu leg %" PRIu64 ": %" PRIu64 " does not fit", gi, leg, v);
  CHECKF (!fits (v + 4096, leg, g), "geometry %zu leg %" PRIu64 ": %" PRIu64
          " is not the largest", gi, leg, v);
}

/* md_max_volume_size: exact values by hand, then exactness for tiny
 * legs, legs around the points where a bitmap page is added, random
 * legs of every magnitude, and legs near 2^50, 2^63 and 2^64.
 */
static void
test_max_volume (void)
{
  static const struct { uint64_t leg, volume; } exact[] = {
    /* 4K chunk, 1 leg, 1 AL extent: md_size 24576 up to 32128 chunks. */
    { 0, 0 }, { 4095, 0 }, { 24576, 0 }, { 28671, 0 }, { 28672, 4096 },
    { 32767, 4096 }, { 32768, 8192 }, { 1 * MiB, 1 * MiB - 24576 },
    { 1 * MiB + 4095, 1 * MiB - 24576 },
    /* 131596288 = 32128 chunks: one page up to there, two after. */
    { 131596288 + 24576, 131596288 },
    { 131596288 + 24576 + 4096 + 8192 - 1, 131596288 },
    { 131596288 + 24576 + 4096 + 8192, 131596288 + 4096 },
  };
  static const struct layout_case geometries[] = {
    /* chunk, max_legs, al_extent, al_extents */
    { .chunk = 4 * KiB, 1, 4 * KiB, 1 },
    { .chunk = 4 * KiB, 16, 4 * MiB, 65536 },
    { .chunk = 64 * KiB, 8, 4 * MiB, 1024 },
    { .chunk = 1 * MiB, 3, 1 * GiB, 7 },
    { .chunk = 64 * MiB, 16, 64 * MiB, 1 },
  };
  const struct layout_case *g0 = &geometries[0];

  for (size_t i = 0; i < NELEMS (exact); ++i) {
    uint64_t v = md_max_volume_size (exact[i].leg, g0->chunk, g0->max_legs,
                                     g0->al_extent, g0->al_extents);
    CHECKF (v == exact[i].volume, "leg %" PRIu64 ": %" PRIu64 ", expected %"
            PRIu64, exact[i].leg, v, exact[i].volume);
  }
  CHECK (md_max_volume_size (UINT64_MAX, 3000, 8, 4 * MiB, 1024) == 0);
  CHECK (md_max_volume_size (UINT64_MAX, 64 * KiB, 0, 4 * MiB, 1024) == 0);

  for (size_t gi = 0; gi < NELEMS (geometries); ++gi) {
    const struct layout_case *g = &geometries[gi];
    static const uint64_t bases[] = {
      0, 1ull << 50, (1ull << 63) - 1, UINT64_MAX
    };

    for (uint64_t leg = 0; leg < 2 * MiB; leg += 4096 - 1)
      check_max_volume (leg, g, gi);
    /* Around the leg size where the bitmap gets a k-th page. */
    for (uint64_t k = 1; k <= 3; ++k) {
      uint64_t v = k * BM_PAGE_BITS * (uint64_t) g->chunk;
      struct md_layout l;

      if (md_layout_init (&l, v, g->chunk, g->max_legs, g->al_extent,
                          g->al_extents, NULL, 0) == -1)
        continue;
      for (uint64_t d = 0; d < 3 * 140000; d += 97)
        check_max_volume (v + l.md_size - 140000 + d, g, gi);
    }
    for (size_t b = 0; b < NELEMS (bases); ++b)
      for (uint64_t d = 0; d < 300000; d += 4093) {
        if (bases[b] >= d)
          check_max_volume (bases[b] - d, g, gi);
        if (bases[b] <= UINT64_MAX - d)
          check_max_volume (bases[b] + d, g, gi);
      }
    for (unsigned n = 0; n < 2000; ++n) {
      uint64_t leg = rng ();

      check_max_volume (leg >> (rng () % 64), g, gi);
    }
  }
}

/* meta_pick_copy for every interesting pair. */
static void
test_pick_copy (void)
{
  static const struct {
    enum meta_status s0;
    uint64_t seq0;
    enum meta_status s1;
    uint64_t seq1;
    int want;
  } cases[] = {
    { META_OK, 5, META_OK, 6, 1 },
    { META_OK, 6, META_OK, 5, 0 },
    { META_OK, 0, META_OK, UINT64_MAX, 1 },
    { META_OK, 7, META_OK, 7, 0 },
    { META_OK, 5, META_CORRUPT, 9, 0 },
    { META_OK, 5, META_BLANK, 9, 0 },
    { META_CORRUPT, 9, META_OK, 5, 1 },
    { META_BLANK, 0, META_OK, 1, 1 },
    { META_CORRUPT, 1, META_BLANK, 2, -1 },
    { META_BLANK, 0, META_BLANK, 0, -1 },
    { META_CORRUPT, 3, META_CORRUPT, 4, -1 },
  };

  for (size_t i = 0; i < NELEMS (cases); ++i) {
    int r = meta_pick_copy (cases[i].s0, cases[i].seq0,
                            cases[i].s1, cases[i].seq1);
    CHECKF (r == cases[i].want, "pick row %zu: %d, expected %d",
            i, r, cases[i].want);
  }
}

/* gen_equal, sb_knows_gen and sb_push_gen, including a full history. */
static void
test_generations (void)
{
  struct superblock sb;
  uint8_t buf[META_BLOCK];
  char err[256] = "";

  CHECK (gen_equal ((struct gen) { 3, 4 }, (struct gen) { 3, 4 }));
  CHECK (!gen_equal ((struct gen) { 3, 4 }, (struct gen) { 3, 5 }));
  CHECK (!gen_equal ((struct gen) { 3, 4 }, (struct gen) { 2, 4 }));

  base_sb (&sb);
  CHECK (sb_knows_gen (&sb, (struct gen) { 10, 0xa10 }));
  CHECK (sb_knows_gen (&sb, (struct gen) { 4, 0xa04 }));
  CHECK (!sb_knows_gen (&sb, (struct gen) { 4, 0xa05 }));
  CHECK (!sb_knows_gen (&sb, (struct gen) { 11, 0xa10 }));
  sb.history[5] = (struct gen) { 2, 0xa02 };       /* past history_len */
  CHECK (!sb_knows_gen (&sb, (struct gen) { 2, 0xa02 }));
  sb.history[5] = (struct gen) { 0, 0 };

  {
    struct superblock leg = sb;

    CHECK (sb_owns_slot (&sb, &leg));
    leg.slot = 2;                               /* another leg's slot */
    CHECK (!sb_owns_slot (&sb, &leg));
    leg.slot = 3;                               /* free */
    CHECK (!sb_owns_slot (&sb, &leg));
    leg.slot = sb.max_legs;                     /* out of range */
    CHECK (!sb_owns_slot (&sb, &leg));
  }

  sb_push_gen (&sb, (struct gen) { 11, 0xa11 });
  CHECK (sb.history_len == 4);
  CHECK (gen_equal (sb.gen, (struct gen) { 11, 0xa11 }));
  CHECK (gen_equal (sb.history[0], (struct gen) { 10, 0xa10 }));
  CHECK (gen_equal (sb.history[3], (struct gen) { 4, 0xa04 }));
  CHECK (gen_equal (sb.history[4], (struct gen) { 0, 0 }));

  /* Fill the history and beyond: the oldest drop off. */
  for (uint64_t c = 12; c < 12 + 40; ++c) {
    sb_push_gen (&sb, (struct gen) { c, 0xa00 + c });
    CHECKF (sb.history_len == (c - 7 < META_HISTORY ? c - 7 : META_HISTORY),
            "push %" PRIu64 ": history_len %" PRIu32, c, sb.history_len);
  }
  /* gen 51; history 50 .. 19 */
  CHECK (sb.gen.counter == 51);
  CHECK (sb.history[0].counter == 50 && sb.history[0].id == 0xa00 + 50);
  CHECK (sb.history[META_HISTORY - 1].counter == 19);
  CHECK (sb_knows_gen (&sb, (struct gen) { 19, 0xa00 + 19 }));
  CHECK (!sb_knows_gen (&sb, (struct gen) { 18, 0xa00 + 18 }));
  CHECK (!sb_knows_gen (&sb, (struct gen) { 4, 0xa04 }));
  sb_encode (&sb, buf);
  CHECKF (sb_decode (buf, &sb, err, sizeof err) == META_OK, "%s", err);
}

int
main (void)
{
  test_sb_round_trip ();
  test_sb_bytes ();
  test_sb_corruptions ();
  test_short_err ();
  test_failed_outputs ();
  test_al_round_trip ();
  test_al_corruptions ();
  test_bm_round_trip ();
  test_bm_corruptions ();
  test_random_blocks ();
  test_torn_writes ();
  test_layouts ();
  test_bad_layouts ();
  test_offsets ();
  test_max_volume ();
  test_pick_copy ();
  test_generations ();
  return unit_exit ("unit-meta");
}
