/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep inspect --json: what was found on a leg, as one JSON object.
 *
 * The same facts as the text rendering, with stable field names
 * (nbdrep(1) lists them).  Sizes and offsets are integers in bytes,
 * times Unix seconds, UUIDs strings (null for an all-zero UUID), a
 * generation {"counter": N, "id": "16 hex digits"} (the id is a full
 * 64-bit number, which JSON integers do not carry safely).
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "random.h"

#include "nbdrep.h"
#include "inspect.h"

/* An unsigned number as a JSON integer. */
static json_t *
ju64 (uint64_t n)
{
  return json_integer ((json_int_t) n);
}

/* A UUID, or null if it is all zero. */
static json_t *
juuid (const uint8_t *u)
{
  char s[37];

  if (uuid_is_zero (u))
    return json_null ();
  uuid_format (u, s);
  return json_string (s);
}

/* A generation. */
static json_t *
jgen (struct gen g)
{
  char id[24];

  snprintf (id, sizeof id, "%016" PRIx64, g.id);
  return json_pack ("{s:o, s:s}", "counter", ju64 (g.counter), "id", id);
}

/* The decode results of two copies. */
static json_t *
jcopies (enum meta_status st0, uint64_t seq0, const char *why0,
         enum meta_status st1, uint64_t seq1, const char *why1)
{
  return json_pack ("[{s:s, s:o, s:o}, {s:s, s:o, s:o}]",
                    "status", meta_status_word (st0),
                    "seq", st0 == META_OK ? ju64 (seq0) : json_null (),
                    "reason", st0 == META_OK ? json_null ()
                                             : json_string (why0),
                    "status", meta_status_word (st1),
                    "seq", st1 == META_OK ? ju64 (seq1) : json_null (),
                    "reason", st1 == META_OK ? json_null ()
                                             : json_string (why1));
}

/* The superblock object. */
static json_t *
superblock_json (const struct exam *e)
{
  const struct superblock *sb = e->sb;
  const struct sb_copy *c = e->sbc;
  json_t *history = json_array (), *j;
  char why[256];
  uint32_t h;

  for (h = 0; h < sb->history_len && h < META_HISTORY; ++h)
    json_array_append_new (history, jgen (sb->history[h]));
  loser_reason (c[!e->pick].st, c[!e->pick].sb.seq, sb->seq,
                c[!e->pick].why, why, sizeof why);
  j = json_pack ("{s:i, s:o, s:s, s:o}",
                 "copy", e->pick, "seq", ju64 (sb->seq),
                 "other_copy", why,
                 "copies", jcopies (c[0].st, c[0].sb.seq, c[0].why,
                                    c[1].st, c[1].sb.seq, c[1].why));
  json_object_set_new (j, "volume_uuid", juuid (sb->volume_uuid));
  json_object_set_new (j, "leg_uuid", juuid (sb->leg_uuid));
  json_object_set_new (j, "slot", ju64 (sb->slot));
  json_object_set_new (j, "flags", ju64 (sb->flags));
  json_object_set_new (j, "inconsistent",
                       json_boolean (sb->flags & SB_INCONSISTENT));
  json_object_set_new (j, "format_version", json_integer (META_VERSION));
  json_object_set_new (j, "max_legs", ju64 (sb->max_legs));
  json_object_set_new (j, "quorum", ju64 (sb->quorum));
  json_object_set_new (j, "volume_size", ju64 (sb->volume_size));
  json_object_set_new (j, "chunk_size", ju64 (sb->chunk_size));
  json_object_set_new (j, "al_extent_size", ju64 (sb->al_extent_size));
  json_object_set_new (j, "al_extents", ju64 (sb->al_extents));
  json_object_set_new (j, "ctime", ju64 (sb->ctime));
  json_object_set_new (j, "mtime", ju64 (sb->mtime));
  json_object_set_new (j, "generation", jgen (sb->gen));
  json_object_set_new (j, "history", history);
  return j;
}

/* The slot table. */
static json_t *
slots_json (const struct exam *e)
{
  json_t *slots = json_array ();
  uint32_t s;

  for (s = 0; s < e->sb->max_legs; ++s) {
    const struct sb_slot *sl = &e->sb->slots[s];
    const char *role = slot_role (e, s);
    json_array_append_new (slots, json_pack (
      "{s:i, s:b, s:b, s:b, s:b, s:o, s:o, s:o}",
      "slot", (int) s,
      "assigned", (sl->flags & SLOT_ASSIGNED) != 0,
      "member", (sl->flags & SLOT_MEMBER) != 0,
      "tracker", (sl->flags & SLOT_TRACKER) != 0,
      "backup_done", (sl->flags & SLOT_BASE) != 0,
      "uuid", juuid (sl->uuid),
      "bm_gen", jgen (sl->bm_gen),
      "role", role ? json_string (role) : json_null ()));
  }
  return slots;
}

/* The layout object. */
static json_t *
layout_json (const struct exam *e)
{
  const struct md_layout *l = &e->layout;

  return json_pack ("{s:o, s:o, s:o, s:o, s:o, s:[o,o], s:o, s:[o,o]}",
                    "metadata_offset", ju64 (e->area_offset),
                    "metadata_size", ju64 (l->md_size),
                    "chunks", ju64 (l->nr_chunks),
                    "bitmap_offset",
                    ju64 (md_bm_offset (l, e->leg_size, 0, 0, 0)),
                    "bitmap_pages_per_slot", ju64 (l->bm_pages),
                    "activity_log_offsets",
                    ju64 (md_al_offset (l, e->leg_size, 0)),
                    ju64 (md_al_offset (l, e->leg_size, 1)),
                    "activity_log_bytes", ju64 (l->al_bytes),
                    "superblock_offsets",
                    ju64 (md_sb_offset (e->leg_size, 0)),
                    ju64 (md_sb_offset (e->leg_size, 1)));
}

/* The activity-log object. */
static json_t *
al_json (const struct exam *e)
{
  const struct al_copy *c = e->alc;
  json_t *ranges = json_array ();
  uint32_t i, j;

  for (i = 0; i < e->nr_extents; i = j + 1) {
    uint64_t off, len;
    j = extent_run_end (e, i);
    extent_run_bytes (e, e->extents[i], e->extents[j], &off, &len);
    json_array_append_new (ranges, json_pack ("{s:o, s:o}",
                                              "offset", ju64 (off),
                                              "length", ju64 (len)));
  }
  return json_pack ("{s:o, s:o, s:I, s:I, s:o}",
                    "copy", e->al_pick >= 0 ? json_integer (e->al_pick)
                                            : json_null (),
                    "copies", jcopies (c[0].st, c[0].seq, c[0].why,
                                       c[1].st, c[1].seq, c[1].why),
                    "hot", (json_int_t) e->nr_extents,
                    "capacity", (json_int_t) e->sb->al_extents,
                    "ranges", ranges);
}

/* The out-of-sync amounts of the absent slots. */
static json_t *
oos_json (const struct exam *e)
{
  json_t *list = json_array ();
  size_t i;

  for (i = 0; i < e->nr_oos; ++i) {
    const struct slot_oos *o = &e->oos[i];
    json_array_append_new (list, json_pack (
      "{s:i, s:o, s:o, s:o, s:o, s:{s:o, s:o, s:o, s:o}}",
      "slot", (int) o->slot, "chunks", ju64 (o->chunks),
      "bytes", ju64 (o->bytes),
      "chunks_with_activity_log", ju64 (o->chunks_with_al),
      "bytes_with_activity_log", ju64 (o->bytes_with_al),
      "pages", "current", ju64 (o->pages_current),
      "stale", ju64 (o->pages_stale), "blank", ju64 (o->pages_blank),
      "corrupt", ju64 (o->pages_corrupt)));
  }
  return list;
}

/* Print everything as one JSON object. */
int
inspect_print_json (const struct exam *e)
{
  json_t *j = json_pack ("{s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
                         "uri", e->uri, "leg_size", ju64 (e->leg_size),
                         "superblock", superblock_json (e),
                         "slots", slots_json (e),
                         "layout", layout_json (e),
                         "activity_log", al_json (e),
                         "out_of_sync", oos_json (e));
  char *s = j ? json_dumps (j, JSON_INDENT (2)) : NULL;

  json_decref (j);
  if (s == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  puts (s);
  free (s);
  return 0;
}
