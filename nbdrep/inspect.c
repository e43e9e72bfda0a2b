/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep inspect URI: a leg's metadata, read offline (like mdadm
 * --examine).
 *
 * Read-only and independent of any controller: we connect to the leg
 * with libnbd's synchronous API and decode its records with the
 * engine's own codecs (meta.h), so what we print is exactly what a
 * controller would trust.  The steps follow the layout of meta.h:
 *
 * 1. the last 8 KiB hold the two superblock copies; the valid one with
 *    the higher seq wins (meta_pick_copy), and we say why the other
 *    lost.  Neither valid: blank (no magic: not a leg, or never made
 *    one) or corrupt, and we stop with exit 1;
 * 2. the geometry in the superblock gives the layout (md_layout_init);
 * 3. both activity-log copies, the newest valid one wins;
 * 4. for every slot assigned but not a member (an absent leg), its
 *    bitmap pages, counted by the rules of struct slot_oos (the same
 *    rules the controller applies when it loads them), then with the
 *    hot extents of the activity log added: bitmaps are written
 *    lazily, and the bitmap together with the log is what the slot
 *    missed (DESIGN.md section 5, invariant 2).
 *
 * An I/O error reading the leg is fatal (exit 1); corrupt activity-log
 * or bitmap records are reported, not fatal.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libnbd.h>

#include "meta.h"
#include "tls.h"
#include "cleanup.h"

#include "nbdrep.h"
#include "inspect.h"

#define PAGES_PER_READ 64       /* bitmap pages read per request */

/* The status word of a decoder result. */
const char *
meta_status_word (enum meta_status st)
{
  switch (st) {
  case META_OK: return "ok";
  case META_BLANK: return "blank";
  case META_CORRUPT: return "corrupt";
  }
  return "?";
}

/* COUNTER:ID. */
void
gen_format (struct gen g, char *buf, size_t len)
{
  snprintf (buf, len, "%" PRIu64 ":%016" PRIx64, g.counter, g.id);
}

/* ISO 8601 UTC. */
void
time_format (uint64_t t, char *buf, size_t len)
{
  time_t tt = (time_t) t;
  struct tm tm;

  if (gmtime_r (&tt, &tm) == NULL ||
      strftime (buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf (buf, len, "%" PRIu64, t);
}

/* Slot flags as words. */
const char *
slot_flags_word (uint32_t flags)
{
  if (flags & SLOT_TRACKER)
    return flags & SLOT_BASE ? "tracker,base" : "tracker";
  if ((flags & SLOT_ASSIGNED) && (flags & SLOT_MEMBER))
    return "assigned,member";
  if (flags & SLOT_ASSIGNED)
    return "assigned";
  if (flags & SLOT_MEMBER)
    return "member";            /* never written so; shown as it is */
  return "free";
}

/* Is a slot with these flags absent (assigned, not a member)? */
static bool
slot_is_absent (uint32_t flags)
{
  return (flags & SLOT_ASSIGNED) && !(flags & SLOT_MEMBER);
}

/* A slot's role seen from this leg. */
const char *
slot_role (const struct exam *e, uint32_t s)
{
  bool absent = slot_is_absent (e->sb->slots[s].flags);

  if (e->sb->slots[s].flags & SLOT_TRACKER)
    return "changed blocks for backups";
  if (s == e->sb->slot)
    return absent ? "this leg, absent" : "this leg";
  return absent ? "absent" : NULL;
}

/* Why a copy lost against a winner with winner_seq. */
void
loser_reason (enum meta_status st, uint64_t seq, uint64_t winner_seq,
              const char *why, char *buf, size_t len)
{
  if (st == META_OK && seq == winner_seq)
    snprintf (buf, len, "same seq %" PRIu64 " (copy 0 is preferred)", seq);
  else if (st == META_OK)
    snprintf (buf, len, "older (seq %" PRIu64 ")", seq);
  else
    snprintf (buf, len, "%s: %s", meta_status_word (st), why);
}

/* The index of the last extent of the run starting at index i. */
uint32_t
extent_run_end (const struct exam *e, uint32_t i)
{
  while (i + 1 < e->nr_extents && e->extents[i + 1] == e->extents[i] + 1)
    i++;
  return i;
}

/* Bytes covered by extents first..last, clamped to the volume. */
void
extent_run_bytes (const struct exam *e, uint32_t first, uint32_t last,
                  uint64_t *offset, uint64_t *length)
{
  uint64_t ext = e->sb->al_extent_size;
  uint64_t end = ((uint64_t) last + 1) * ext;

  *offset = (uint64_t) first * ext;
  if (end > e->sb->volume_size)
    end = e->sb->volume_size;
  *length = end > *offset ? end - *offset : 0;
}

/* Read len bytes at offset from the leg. */
static int
read_leg (struct nbd_handle *nbd, const struct exam *e, void *buf,
          size_t len, uint64_t offset)
{
  nbdrep_debug ("reading %zu bytes at %" PRIu64, len, offset);
  if (nbd_pread (nbd, buf, len, offset, 0) == -1) {
    nbdrep_error ("%s: reading %zu bytes at offset %" PRIu64 ": %s",
                  e->uri, len, offset, nbd_get_error ());
    return -1;
  }
  return 0;
}

/* Connect to the leg (with the TLS parameters tls) and learn its size.
 * NULL after an error.
 */
static struct nbd_handle *
open_leg (struct exam *e, const struct tls_params *tls)
{
  struct nbd_handle *nbd = nbd_create ();
  const char *why = NULL;
  char err[256];
  int64_t size;

  if (nbd == NULL) {
    nbdrep_error ("nbd_create: %s", nbd_get_error ());
    return NULL;
  }
  if (tls_setup_handle (nbd, tls, e->uri, err, sizeof err) == -1)
    why = err;
  else if (nbd_connect_uri (nbd, e->uri) == -1 ||
           (size = nbd_get_size (nbd)) == -1)
    why = nbd_get_error ();
  if (why) {
    nbdrep_error ("%s: %s", e->uri, why);
    nbd_close (nbd);
    return NULL;
  }
  e->leg_size = (uint64_t) size;
  return nbd;
}

/* Step 1: the superblock.  Returns 0, or -1 after an error (blank or
 * corrupt included).
 */
static int
examine_superblock (struct nbd_handle *nbd, struct exam *e)
{
  uint8_t buf[META_SB_AREA];
  unsigned c;

  if (e->leg_size < META_SB_AREA) {
    nbdrep_error ("%s: no nbdkit-replicate superblock: the leg is only "
                  "%" PRIu64 " bytes", e->uri, e->leg_size);
    return -1;
  }
  if (read_leg (nbd, e, buf, sizeof buf, md_sb_offset (e->leg_size, 0)) == -1)
    return -1;
  for (c = 0; c < 2; ++c)
    e->sbc[c].st = sb_decode (buf + c * META_BLOCK, &e->sbc[c].sb,
                              e->sbc[c].why, sizeof e->sbc[c].why);
  e->pick = meta_pick_copy (e->sbc[0].st, e->sbc[0].sb.seq,
                            e->sbc[1].st, e->sbc[1].sb.seq);
  if (e->pick >= 0) {
    e->sb = &e->sbc[e->pick].sb;
    return 0;
  }
  if (e->sbc[0].st == META_BLANK && e->sbc[1].st == META_BLANK)
    nbdrep_error ("%s: no nbdkit-replicate superblock: blank, or not a leg",
                  e->uri);
  else
    nbdrep_error ("%s: no valid superblock: copy 0 %s: %s; copy 1 %s: %s",
                  e->uri, meta_status_word (e->sbc[0].st), e->sbc[0].why,
                  meta_status_word (e->sbc[1].st), e->sbc[1].why);
  return -1;
}

/* Step 2: the layout of the metadata area. */
static int
examine_layout (struct exam *e)
{
  const struct superblock *sb = e->sb;
  char err[160];

  if (md_layout_init (&e->layout, sb->volume_size, sb->chunk_size,
                      sb->max_legs, sb->al_extent_size, sb->al_extents,
                      err, sizeof err) == -1) {
    nbdrep_error ("%s: %s", e->uri, err);
    return -1;
  }
  if (e->layout.md_size > e->leg_size) {
    nbdrep_error ("%s: the leg (%" PRIu64 " bytes) is smaller than its "
                  "metadata area (%" PRIu64 " bytes)", e->uri, e->leg_size,
                  e->layout.md_size);
    return -1;
  }
  e->area_offset = md_area_offset (&e->layout, e->leg_size);
  return 0;
}

/* Keep a copy of the winning activity log's extents in e. */
static int
keep_extents (struct exam *e, const uint32_t *extents, uint32_t nr)
{
  e->extents = malloc ((nr ? nr : 1) * sizeof *e->extents);
  if (e->extents == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  memcpy (e->extents, extents, nr * sizeof *e->extents);
  e->nr_extents = nr;
  return 0;
}

/* Step 3: the activity log. */
static int
examine_al (struct nbd_handle *nbd, struct exam *e)
{
  const struct superblock *sb = e->sb;
  size_t bytes = e->layout.al_bytes;
  CLEANUP_FREE uint8_t *buf = malloc (bytes);
  CLEANUP_FREE uint32_t *ext0 = calloc (sb->al_extents, sizeof *ext0);
  CLEANUP_FREE uint32_t *ext1 = calloc (sb->al_extents, sizeof *ext1);
  uint32_t *ext[2] = { ext0, ext1 };
  unsigned c;

  if (buf == NULL || ext0 == NULL || ext1 == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  for (c = 0; c < 2; ++c) {
    struct al_copy *a = &e->alc[c];
    if (read_leg (nbd, e, buf, bytes,
                  md_al_offset (&e->layout, e->leg_size, c)) == -1)
      return -1;
    a->st = al_decode (buf, sb->al_extents, sb->volume_uuid,
                       sb->al_extent_size, e->layout.nr_al_extents,
                       &a->seq, ext[c], &a->nr, a->why, sizeof a->why);
  }
  e->al_pick = meta_pick_copy (e->alc[0].st, e->alc[0].seq,
                               e->alc[1].st, e->alc[1].seq);
  if (e->al_pick < 0)
    return 0;
  return keep_extents (e, ext[e->al_pick], e->alc[e->al_pick].nr);
}

/* Classify page p of slot o from its two copies and write the words
 * it contributes to words (bm_page_pick: the rule the engine uses).
 */
static void
decode_page (const struct exam *e, struct slot_oos *o, uint64_t p,
             const uint8_t *copies, uint64_t *words)
{
  uint64_t seq;

  switch (bm_page_pick (copies, e->sb->volume_uuid, o->slot, (uint32_t) p,
                        e->sb->slots[o->slot].bm_gen, &seq, words)) {
  case BM_PAGE_CURRENT: o->pages_current++; break;
  case BM_PAGE_STALE: o->pages_stale++; break;
  case BM_PAGE_CORRUPT: o->pages_corrupt++; break;
  case BM_PAGE_BLANK: o->pages_blank++; break;
  }
}

/* Count the chunks set in a slot's bitmap (chunk c is bit c % 64 of
 * words[c / 64]: pages hold whole words) and the bytes they cover.
 */
static void
count_chunks (const struct exam *e, const uint64_t *words,
              uint64_t *chunks, uint64_t *bytes)
{
  uint64_t nr = e->layout.nr_chunks, last = nr - 1, w, n = 0;

  for (w = 0; w * 64 < nr; ++w) {
    uint64_t word = words[w];
    if (nr - w * 64 < 64)
      word &= (UINT64_C (1) << (nr - w * 64)) - 1;
    n += (uint64_t) __builtin_popcountll (word);
  }
  *chunks = n;
  *bytes = n * e->sb->chunk_size;
  /* The volume's last chunk may be short. */
  if (nr > 0 && (words[last / 64] >> (last % 64)) & 1)
    *bytes -= nr * e->sb->chunk_size - e->sb->volume_size;
}

/* Set the chunks of every hot activity-log extent in words. */
static void
or_hot_extents (const struct exam *e, uint64_t *words)
{
  uint64_t per_extent = e->sb->al_extent_size / e->sb->chunk_size;
  uint64_t c, last;
  uint32_t i;

  for (i = 0; i < e->nr_extents; ++i) {
    c = e->extents[i] * per_extent;
    last = c + per_extent - 1;
    if (last >= e->layout.nr_chunks)
      last = e->layout.nr_chunks - 1;
    for (; c <= last; ++c)
      words[c / 64] |= UINT64_C (1) << (c % 64);
  }
}

/* Read and decode a slot's bitmap pages into words. */
static int
read_slot_bitmap (struct nbd_handle *nbd, struct exam *e, struct slot_oos *o,
                  uint64_t *words)
{
  size_t per_page = 2 * META_BLOCK;
  CLEANUP_FREE uint8_t *buf = malloc (PAGES_PER_READ * per_page);
  uint64_t p, i, n;

  if (buf == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  for (p = 0; p < e->layout.bm_pages; p += n) {
    n = e->layout.bm_pages - p;
    if (n > PAGES_PER_READ)
      n = PAGES_PER_READ;
    if (read_leg (nbd, e, buf, n * per_page,
                  md_bm_offset (&e->layout, e->leg_size, o->slot, p, 0))
        == -1)
      return -1;
    for (i = 0; i < n; ++i)
      decode_page (e, o, p + i, buf + i * per_page,
                   words + (p + i) * BM_PAGE_WORDS);
  }
  return 0;
}

/* Step 4 for one absent slot: its bitmap, then with the hot extents. */
static int
examine_slot (struct nbd_handle *nbd, struct exam *e, struct slot_oos *o)
{
  CLEANUP_FREE uint64_t *words = calloc (e->layout.bm_pages * BM_PAGE_WORDS,
                                         sizeof *words);

  if (words == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  if (read_slot_bitmap (nbd, e, o, words) == -1)
    return -1;
  count_chunks (e, words, &o->chunks, &o->bytes);
  or_hot_extents (e, words);
  count_chunks (e, words, &o->chunks_with_al, &o->bytes_with_al);
  return 0;
}

/* Step 4: every slot assigned but not a member. */
static int
examine_bitmaps (struct nbd_handle *nbd, struct exam *e)
{
  unsigned s;

  for (s = 0; s < e->sb->max_legs; ++s) {
    if (!slot_is_absent (e->sb->slots[s].flags))
      continue;
    e->oos[e->nr_oos].slot = s;
    if (examine_slot (nbd, e, &e->oos[e->nr_oos]) == -1)
      return -1;
    e->nr_oos++;
  }
  return 0;
}

/* Read and decode everything.  Returns 0 or -1. */
static int
examine (struct nbd_handle *nbd, struct exam *e)
{
  if (examine_superblock (nbd, e) == -1 || examine_layout (e) == -1 ||
      examine_al (nbd, e) == -1 || examine_bitmaps (nbd, e) == -1)
    return -1;
  return 0;
}

/* nbdrep inspect. */
static int
run_inspect (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "json", no_argument, NULL, 'j' },
    TLS_LONG_OPTIONS,
    COMMON_LONG_OPTIONS
  };
  struct exam e = { .pick = -1, .al_pick = -1 };
  struct tls_params tls;
  struct nbd_handle *nbd;
  bool json = false;
  int opt, r = EXIT_ERROR;

  config_tls_init (&tls);
  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    if (opt == 'j')
      json = true;
    else if (!tls_option (cmd, opt, optarg, &tls))
      other_option (cmd, opt);
  }
  need_operands (cmd, argc, argv, optind, 1, 1);
  e.uri = argv[optind];

  nbd = open_leg (&e, &tls);
  if (nbd == NULL)
    return EXIT_ERROR;
  if (examine (nbd, &e) == 0) {
    if (!json)
      inspect_print_text (&e);
    r = json && inspect_print_json (&e) == -1 ? EXIT_ERROR : EXIT_OK;
  }
  nbd_shutdown (nbd, 0);
  nbd_close (nbd);
  free (e.extents);
  return r;
}

const struct subcommand cmd_inspect = {
  .name = "inspect",
  .run = run_inspect,
  .synopsis = "URI [--json] [--tls=MODE] [--tls-certificates=DIR] "
              "[--tls-verify=BOOL] [--tls-username=NAME] [--tls-psk=FILE]",
  .summary = "Print a leg's metadata, read offline (like mdadm --examine).",
  .description =
  "URI is the NBD URI of the leg (nbd://host:port, nbd+unix:///?socket=\n"
  "PATH ...).  Nothing is written.  Prints both superblock copies and\n"
  "which one won, every superblock field and the slot table, the layout\n"
  "of the metadata area, the activity log, and for each absent slot how\n"
  "much is out of sync.  Exits 1 if the leg has no valid superblock.\n",
  .options =
  "  --json            Print the same as a JSON object.\n"
  TLS_OPTIONS_HELP,
};
