/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep inspect: the human rendering of what was found on a leg.
 *
 * Sections in the order of the on-disk layout's importance: the
 * superblock (which copy won and why the other lost, then every
 * field), the slot table, the layout of the metadata area, the activity
 * log, and the out-of-sync amount of every absent slot.  Sizes are
 * shown in bytes (exact) with the human form beside them.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include "random.h"

#include "nbdrep.h"
#include "inspect.h"

/* Print the leg line and which superblock copy won. */
static void
print_header (const struct exam *e)
{
  const struct sb_copy *win = &e->sbc[e->pick], *lose = &e->sbc[!e->pick];
  char why[256];

  printf ("leg %s\n", e->uri);
  printf ("  size %" PRIu64 " (%s)\n\n", e->leg_size,
          human_size (e->leg_size).s);
  loser_reason (lose->st, lose->sb.seq, win->sb.seq, lose->why,
                why, sizeof why);
  printf ("superblock: copy %d (seq %" PRIu64 ") is current; copy %d: %s\n",
          e->pick, win->sb.seq, !e->pick, why);
}

/* Print the superblock's fields. */
static void
print_superblock (const struct exam *e)
{
  const struct superblock *sb = e->sb;
  struct table *t = table_new (2, NULL);
  char vol[37], leg[37], gen[40], ctime_[40], mtime_[40];
  uint32_t h;

  uuid_format (sb->volume_uuid, vol);
  uuid_format (sb->leg_uuid, leg);
  gen_format (sb->gen, gen, sizeof gen);
  time_format (sb->ctime, ctime_, sizeof ctime_);
  time_format (sb->mtime, mtime_, sizeof mtime_);
  table_add_kv (t, "volume uuid", "%s", vol);
  table_add_kv (t, "leg uuid", "%s", leg);
  table_add_kv (t, "slot", "%" PRIu32, sb->slot);
  table_add_kv (t, "flags", "0x%" PRIx32 " (%s)", sb->flags,
                sb->flags & SB_INCONSISTENT ? "inconsistent" : "consistent");
  table_add_kv (t, "format version", "%d", META_VERSION);
  table_add_kv (t, "max legs", "%" PRIu32, sb->max_legs);
  table_add_kv (t, "quorum", "%" PRIu32, sb->quorum);
  table_add_kv (t, "volume size", "%" PRIu64 " (%s)", sb->volume_size,
                human_size (sb->volume_size).s);
  table_add_kv (t, "chunk size", "%" PRIu32 " (%s)", sb->chunk_size,
                human_size (sb->chunk_size).s);
  table_add_kv (t, "al extent size", "%" PRIu32 " (%s)", sb->al_extent_size,
                human_size (sb->al_extent_size).s);
  table_add_kv (t, "al extents", "%" PRIu32, sb->al_extents);
  table_add_kv (t, "created", "%s", ctime_);
  table_add_kv (t, "modified", "%s", mtime_);
  table_add_kv (t, "generation", "%s", gen);
  table_add_kv (t, "history", "%" PRIu32 " earlier generation%s",
                sb->history_len, sb->history_len == 1 ? "" : "s");
  for (h = 0; h < sb->history_len && h < META_HISTORY; ++h) {
    gen_format (sb->history[h], gen, sizeof gen);
    table_add_kv (t, "", "%s", gen);
  }
  table_print (t, stdout, "  ");
  table_free (t);
}

/* Print the slot table. */
static void
print_slots (const struct exam *e)
{
  static const char *const headers[] = {
    "SLOT", "FLAGS", "LEG UUID", "BM GEN", ""
  };
  struct table *t = table_new (5, headers);
  uint32_t s;

  printf ("\nslots:\n");
  for (s = 0; s < e->sb->max_legs; ++s) {
    const struct sb_slot *sl = &e->sb->slots[s];
    char slot[16], uuid[37], gen[40];
    const char *cells[5] = {
      slot, slot_flags_word (sl->flags), uuid, gen, slot_role (e, s),
    };
    snprintf (slot, sizeof slot, "%" PRIu32, s);
    if (sl->flags == 0 && uuid_is_zero (sl->uuid)) {
      snprintf (uuid, sizeof uuid, "-");
      snprintf (gen, sizeof gen, "-");
    }
    else {
      uuid_format (sl->uuid, uuid);
      gen_format (sl->bm_gen, gen, sizeof gen);
    }
    table_add_row (t, cells);
  }
  table_print (t, stdout, "  ");
  table_free (t);
}

/* Print the layout of the metadata area. */
static void
print_layout (const struct exam *e)
{
  const struct md_layout *l = &e->layout;
  struct table *t = table_new (2, NULL);

  printf ("\nlayout:\n");
  table_add_kv (t, "data area", "0 - %" PRIu64 " (%s; the volume uses %s)",
                e->area_offset, human_size (e->area_offset).s,
                human_size (l->volume_size).s);
  table_add_kv (t, "metadata area", "offset %" PRIu64 ", %" PRIu64
                " bytes (%s)", e->area_offset, l->md_size,
                human_size (l->md_size).s);
  table_add_kv (t, "chunks", "%" PRIu64, l->nr_chunks);
  table_add_kv (t, "bitmaps", "offset %" PRIu64 ", %" PRIu64
                " page%s per slot, 2 copies each",
                md_bm_offset (l, e->leg_size, 0, 0, 0), l->bm_pages,
                l->bm_pages == 1 ? "" : "s");
  table_add_kv (t, "activity log", "offsets %" PRIu64 " and %" PRIu64
                ", %" PRIu64 " bytes each",
                md_al_offset (l, e->leg_size, 0),
                md_al_offset (l, e->leg_size, 1), l->al_bytes);
  table_add_kv (t, "superblocks", "offsets %" PRIu64 " and %" PRIu64,
                md_sb_offset (e->leg_size, 0), md_sb_offset (e->leg_size, 1));
  if (l->volume_size > e->area_offset)
    table_add_kv (t, "WARNING", "the volume does not fit before the "
                  "metadata area");
  table_print (t, stdout, "  ");
  table_free (t);
}

/* Print the activity log: which copy, and its extents as byte ranges
 * (runs of consecutive extents merged).
 */
static void
print_al (const struct exam *e)
{
  static const char *const headers[] = { "OFFSET", "LENGTH", "" };
  struct table *t;
  char why[256];
  uint32_t i, j;

  printf ("\nactivity log: ");
  if (e->al_pick < 0) {
    printf ("no valid copy: copy 0 %s: %s; copy 1 %s: %s\n",
            meta_status_word (e->alc[0].st), e->alc[0].why,
            meta_status_word (e->alc[1].st), e->alc[1].why);
    return;
  }
  loser_reason (e->alc[!e->al_pick].st, e->alc[!e->al_pick].seq,
                e->alc[e->al_pick].seq, e->alc[!e->al_pick].why,
                why, sizeof why);
  printf ("copy %d (seq %" PRIu64 ") is current; copy %d: %s\n",
          e->al_pick, e->alc[e->al_pick].seq, !e->al_pick, why);
  printf ("  %" PRIu32 " of %" PRIu32 " extents hot\n", e->nr_extents,
          e->sb->al_extents);
  if (e->nr_extents == 0)
    return;
  t = table_new (3, headers);
  for (i = 0; i < e->nr_extents; i = j + 1) {
    char offset[24], length[24], human[48];
    const char *cells[3] = { offset, length, human };
    uint64_t off, len;
    j = extent_run_end (e, i);
    extent_run_bytes (e, e->extents[i], e->extents[j], &off, &len);
    snprintf (offset, sizeof offset, "%" PRIu64, off);
    snprintf (length, sizeof length, "%" PRIu64, len);
    snprintf (human, sizeof human, "%s", human_size (len).s);
    table_add_row (t, cells);
  }
  table_print (t, stdout, "  ");
  table_free (t);
}

/* Print the out-of-sync amount of each absent slot. */
static void
print_oos (const struct exam *e)
{
  size_t i;

  printf ("\nout of sync (absent slots):");
  if (e->nr_oos == 0)
    printf (" none\n");
  else
    putchar ('\n');
  for (i = 0; i < e->nr_oos; ++i) {
    const struct slot_oos *o = &e->oos[i];
    printf ("  slot %u: %" PRIu64 " chunks, %" PRIu64 " bytes (%s) with "
            "the activity log; %" PRIu64 " chunks, %" PRIu64 " bytes (%s) "
            "in the bitmap\n",
            o->slot, o->chunks_with_al, o->bytes_with_al,
            human_size (o->bytes_with_al).s, o->chunks, o->bytes,
            human_size (o->bytes).s);
    printf ("    bitmap pages: %" PRIu64 " current, %" PRIu64 " stale, %"
            PRIu64 " blank, %" PRIu64 " corrupt\n", o->pages_current,
            o->pages_stale, o->pages_blank, o->pages_corrupt);
  }
}

/* Print everything. */
void
inspect_print_text (const struct exam *e)
{
  print_header (e);
  print_superblock (e);
  print_slots (e);
  print_layout (e);
  print_al (e);
  print_oos (e);
}
