/* SPDX-License-Identifier: BSD-3-Clause */
/* Backups, the controller's side: a point-in-time source and
 * changed-block tracking for `nbdrep backup`, which reads, hashes,
 * compresses and uploads (backup-begin and backup-end on the control
 * socket).
 *
 * Point in time.  With two or more uptodate legs (and at least quorum
 * left without one) an uptodate NBD leg is held out: with every client
 * write kept out by a range lock over the whole volume, the leg is
 * flushed (a leg that fails the flush is failed, and the backup goes
 * live) and leaves the write set as a failing leg does (its slot
 * turns absent, so what it misses is marked in its bitmap, and a
 * generation bump records it), except that its bitmap starts empty: it
 * completed every write.  The writes go on without it.  Its state
 * is stale with `held` set, so it serves nothing and the monitor does
 * not resync it; the client reads the image from its server directly.
 * backup-end releases it and the monitor resyncs it incrementally.
 * Otherwise the backup is "live": the client reads a leg that is still
 * written to, which is consistent only if the filesystem was frozen.
 *
 * Changed-block tracking.  The tracker is a metadata slot that belongs
 * to no leg (SLOT_TRACKER) and is always absent: every write marks its
 * bitmap, which is persisted and crash-recovered (activity log) like an
 * absent leg's.  Its uuid is the token of the backup that began the
 * current period; SLOT_BASE says that backup completed.  backup-begin
 * (writes kept out) copies the bitmap aside as the snapshot S and
 * clears it, and starts a new period with a new bm_gen, so pages of
 * the old period on disk are ignored.  If the client's base is the
 * completed backup the slot names, S is what changed since then; else
 * the answer is "unknown" and the client reads everything.  Done: the
 * slot names this backup, complete.  Failed (or the client's control
 * connection closed): S is ORed back and the slot names the old base
 * again, so the next backup still gets everything since that one.  A
 * crash during a backup leaves a period that no completed backup began,
 * so the next backup reads everything: never less than changed.
 *
 * The hold.  A backup lapses, and ends as failed (as if its client had
 * gone), when its client has not renewed it (backup-renew) for the
 * hold it began with (backup-begin's "hold", CTL_DEFAULT_HOLD seconds
 * by default): a client that hangs without closing its connection
 * cannot keep a leg out of the volume for ever.  The control thread
 * checks the lapse time in its poll loop.  The token of the last
 * backup that lapsed is kept (v->backup_lapsed), so that the client's
 * next renew or end is told why its backup is gone.
 *
 * Only the control thread calls these functions (one request at a
 * time; control_stop abandons a running backup), so v->backup and
 * v->backup_lapsed need no lock of their own.  Lock order as
 * everywhere: range lock, change_lock, v->lock.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "state.h"
#include "ioreq.h"
#include "member.h"
#include "backup.h"
#include "metaio.h"
#include "random.h"
#include "slots.h"
#include "cleanup.h"

_Static_assert (sizeof ((struct volume *) 0)->backup_lapsed ==
                BACKUP_TOKEN_LEN + 1, "v->backup_lapsed holds a token");

struct backup {
  char token[BACKUP_TOKEN_LEN + 1];
  const void *owner;
  struct leg *held;             /* or NULL: live */
  bool point_in_time;
  uint64_t since;               /* unix seconds */
  unsigned hold;                /* seconds */
  uint64_t lapse_ns;            /* monotonic: when it lapses unless renewed */
  int tracker;                  /* the tracker's slot, or -1 */
  struct sb_slot saved;         /* the tracker slot before this backup */
  struct bitmap snapshot;       /* S: the tracker's bits at begin */
  bool have_snapshot;
  bool base_matched;
};

/* The unix time (seconds) of the monotonic time t (ns). */
static uint64_t
unix_time_of (uint64_t t)
{
  uint64_t now = now_ns ();
  int64_t ahead = (int64_t) (t - now) / 1000000000;

  return (uint64_t) ((int64_t) time (NULL) + ahead);
}

/* Format 16 bytes as 32 hex digits. */
static void
hex16 (const uint8_t *b, char *out)
{
  unsigned i;

  for (i = 0; i < 16; ++i)
    sprintf (out + 2 * i, "%02x", b[i]);
}

/* The tracker's slot, or -1.  change_lock held. */
static int
tracker_slot (struct volume *v)
{
  unsigned s;

  for (s = 0; s < v->sb.max_legs; ++s)
    if (v->sb.slots[s].flags & SLOT_TRACKER)
      return (int) s;
  return -1;
}

/* Find the tracker's slot or claim a free one (absent from now on).
 * Returns -1 without metadata or without a free slot.  change_lock
 * held.
 */
static int
claim_tracker (struct volume *v)
{
  int s = tracker_slot (v);
  unsigned i;

  if (s >= 0 || !v->metadata)
    return s;
  for (i = 0; i < v->sb.max_legs; ++i)
    if (!(v->sb.slots[i].flags & SLOT_ASSIGNED)) {
      if (member_alloc_bitmap (v, i) == -1)
        return -1;
      nbdkit_debug ("backup: slot %u tracks changed blocks", i);
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      member_set_absent (v, MB_ABSENT (membership_load (v)) | (1u << i),
                             "the backup's tracker slot");
      return (int) i;
    }
  return -1;
}

/* Start a new tracking period named token in slot s, keeping the old
 * bits in b->snapshot.  Writes are kept out.  change_lock held.
 */
static int
start_period (struct volume *v, struct backup *b, int s, const char *base,
              const uint8_t token[16])
{
  struct sb_slot *slot = &v->sb.slots[s];
  struct bitmap *t = v->bitmaps[s];
  char named[BACKUP_TOKEN_LEN + 1];
  uint64_t p, words[BM_PAGE_WORDS];

  if (bitmap_init (&b->snapshot, t->nr_bits) == -1)
    return -1;
  b->have_snapshot = true;
  b->tracker = s;
  b->saved = *slot;
  hex16 (slot->uuid, named);
  b->base_matched = base && (slot->flags & SLOT_BASE) &&
    strcmp (base, named) == 0;
  for (p = 0; p < t->nr_pages; ++p) {
    bitmap_page_get (t, p, words);
    bitmap_page_or (&b->snapshot, p, words);
  }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);
    bitmap_clear_all (t);
    memcpy (slot->uuid, token, 16);
    slot->flags = SLOT_ASSIGNED | SLOT_TRACKER;
    metaio_set_bm_gen (v, (unsigned) s,
                     (struct gen) { v->sb.gen.counter, random_u64 () });
  }
  return 0;
}

/* Put the old period back after a failed backup: its bits ORed into
 * the tracker, its name restored.  change_lock held.
 */
static void
restore_period (struct volume *v, struct backup *b)
{
  struct bitmap *t = v->bitmaps[b->tracker];
  struct sb_slot *slot = &v->sb.slots[b->tracker];
  uint64_t p, words[BM_PAGE_WORDS];

  for (p = 0; p < t->nr_pages; ++p) {
    bitmap_page_get (&b->snapshot, p, words);
    bitmap_page_or (t, p, words);
  }
  bitmap_mark_all_dirty (t);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);
  memcpy (slot->uuid, b->saved.uuid, 16);
  slot->flags = b->saved.flags;
}

/* The leg to hold out as a point-in-time source, or NULL and why not.
 * change_lock held.
 */
static struct leg *
leg_to_hold (struct volume *v, const char **why)
{
  uint16_t up = MB_UPTODATE (membership_load (v));
  struct leg *pick = NULL;
  size_t i;

  if (!v->metadata) {
    *why = "metadata=none: a held leg would come back with a full rebuild";
    return NULL;
  }
  if (__builtin_popcount (up) < 2) {
    *why = "only one leg is uptodate";
    return NULL;
  }
  if ((unsigned) __builtin_popcount (up) - 1 < v->quorum) {
    *why = "holding a leg would leave fewer uptodate legs than quorum";
    return NULL;
  }
  for (i = 0; i < v->nr_legs; ++i)
    if ((up & (1u << i)) && !v->legs[i].local)
      pick = &v->legs[i];       /* the last: leg 0 keeps serving */
  if (pick == NULL)
    *why = "the only other uptodate leg is the local one";
  return pick;
}

/* Flush leg l and take it out of the write set, stale and held, its
 * absence to be recorded by the caller's bump.  With every write kept
 * out and the leg flushed, it holds every write the others hold: its
 * bitmap starts empty (no hot extents).  change_lock held.  Returns 0,
 * or the flush's error (nothing changed: the caller fails the leg, as
 * a failed client flush would, once change_lock is released).
 */
static int
hold_leg (struct volume *v, struct leg *l)
{
  static const struct leg_cmd flush = { .op = OP_FLUSH };
  int e = ioreq_sync_io (l, &flush);

  if (e != 0)
    return e;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    l->held = true;
    l->want_full = false;
    member_set_state (v, l, LEG_STALE, "held as a backup's source");
  }
  metaio_record_absent (v, l, true, true);
  return 0;
}

/* Let a held leg go: the monitor resyncs it. */
static void
release_leg (struct volume *v, struct leg *l)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    l->held = false;
  }
  member_wake_monitor (v);
}

/* Steps of backup_begin under change_lock, writes kept out.  A leg
 * that could not be flushed to be held is returned in *unflushed, its
 * error in *flush_err, for the caller to fail.
 */
static int
begin_locked (struct volume *v, struct backup *b, const char *base,
              const uint8_t token[16], const char **why_live,
              struct leg **unflushed, int *flush_err)
{
  int s = claim_tracker (v);

  if (s >= 0 && start_period (v, b, s, base, token) == -1)
    return -1;
  b->held = leg_to_hold (v, why_live);
  if (b->held && (*flush_err = hold_leg (v, b->held)) != 0) {
    *unflushed = b->held;
    b->held = NULL;
    *why_live = "flushing the leg to hold failed (the leg was failed)";
  }
  if (v->metadata && metaio_bump (v) == -1) {
    nbdkit_error ("backup: no uptodate leg took the new generation");
    return -1;
  }
  return 0;
}

/* An uptodate NBD leg to read live, or NULL. */
static struct leg *
live_source (struct volume *v)
{
  uint16_t up = MB_UPTODATE (membership_load (v));
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if ((up & (1u << i)) && !v->legs[i].local)
      return &v->legs[i];
  return NULL;
}

/* Free a backup's state. */
static void
free_backup (struct backup *b)
{
  if (b->have_snapshot)
    bitmap_free (&b->snapshot);
  free (b);
}

/* Begin a backup (see backup.h). */
int
backup_begin (struct volume *v, const char *base, unsigned hold_seconds,
              const void *owner, struct backup_info *info,
              char *err, size_t errlen)
{
  struct backup *b;
  struct range_hold hold;
  uint8_t token[16];
  const char *why_live = NULL;
  struct leg *src, *unflushed = NULL;
  int r, flush_err = 0;

  if (v->backup) {
    snprintf (err, errlen, "a backup is already running (token %s)",
              v->backup->token);
    return -1;
  }
  b = calloc (1, sizeof *b);
  if (b == NULL || rangelock_lock (v->rl, &hold, 0, v->size) == -1) {
    free (b);
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  b->owner = owner;
  b->tracker = -1;
  b->since = (uint64_t) time (NULL);
  b->hold = hold_seconds;
  random_bytes (token, sizeof token);
  hex16 (token, b->token);
  member_change_begin (v);
  pthread_mutex_lock (&v->change_lock);
  r = begin_locked (v, b, base, token, &why_live, &unflushed, &flush_err);
  pthread_mutex_unlock (&v->change_lock);
  member_change_end (v);
  rangelock_unlock (v->rl, &hold);
  if (unflushed)
    member_fail_leg (v, unflushed, EPOCH_ANY, "flush failed: %s",
                     strerror (flush_err));
  if (r == -1) {
    if (b->held)
      release_leg (v, b->held);
    free_backup (b);
    snprintf (err, errlen, "cannot record the backup in the metadata");
    return -1;
  }
  v->backup = b;
  v->backup_lapsed[0] = '\0';
  b->lapse_ns = now_ns () + (uint64_t) b->hold * 1000000000;
  src = b->held ? b->held : live_source (v);
  *info = (struct backup_info) {
    .source = src ? src->uri : NULL,
    .leg = b->held ? (int) b->held->index : -1,
    .point_in_time = b->held != NULL,
    .why_live = why_live,
    .changed = b->base_matched ? &b->snapshot : NULL,
    .lapses = unix_time_of (b->lapse_ns),
  };
  memcpy (info->token, b->token, sizeof info->token);
  nbdkit_debug ("backup %s begun: %s (leg %d), %s, hold %u s", b->token,
                b->held ? "point in time" : "live", info->leg,
                b->base_matched ? "incremental" : "changes unknown", b->hold);
  return 0;
}

/* Finish the running backup: done or failed. */
static void
finish (struct volume *v, bool done, const char *name)
{
  struct backup *b = v->backup;

  if (b->tracker >= 0) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    if (done) {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);
      v->sb.slots[b->tracker].flags |= SLOT_BASE;
    }
    else
      restore_period (v, b);
    if (!done && metaio_persist_bitmaps (v) == -1)
      nbdkit_error ("backup: cannot write the changed-block map");
    if (metaio_bump (v) == -1)
      nbdkit_error ("backup: no uptodate leg took the new generation");
  }
  if (b->held)
    release_leg (v, b->held);
  nbdkit_debug ("backup %s%s%s %s", b->token, name ? " " : "",
                name ? name : "", done ? "done" : "failed");
  v->backup = NULL;
  free_backup (b);
}

/* Is token the running backup's?  If not, say why in err. */
static bool
is_running (struct volume *v, const char *token, char *err, size_t errlen)
{
  if (v->backup && strcmp (v->backup->token, token) == 0)
    return true;
  if (strcmp (v->backup_lapsed, token) == 0)
    snprintf (err, errlen, "backup %s lapsed: it was not renewed in time, "
              "and ended as failed", token);
  else
    snprintf (err, errlen, "no running backup has token %.64s", token);
  return false;
}

/* End a backup (see backup.h). */
int
backup_end (struct volume *v, const char *token, bool done,
            const char *name, char *err, size_t errlen)
{
  if (!is_running (v, token, err, errlen))
    return -1;
  finish (v, done, name);
  return 0;
}

/* Renew a backup's hold (see backup.h). */
int
backup_renew (struct volume *v, const char *token, uint64_t *lapses,
              char *err, size_t errlen)
{
  struct backup *b = v->backup;

  if (!is_running (v, token, err, errlen))
    return -1;
  b->lapse_ns = now_ns () + (uint64_t) b->hold * 1000000000;
  *lapses = unix_time_of (b->lapse_ns);
  return 0;
}

/* When the running backup lapses (see backup.h). */
uint64_t
backup_lapse_ns (struct volume *v)
{
  return v->backup ? v->backup->lapse_ns : 0;
}

/* End a lapsed backup (see backup.h). */
void
backup_check_lapse (struct volume *v, uint64_t now)
{
  struct backup *b = v->backup;

  if (b == NULL || now < b->lapse_ns)
    return;
  nbdkit_error ("backup %s: not renewed for %u s, its hold lapsed: "
                "counted as failed", b->token, b->hold);
  memcpy (v->backup_lapsed, b->token, sizeof v->backup_lapsed);
  finish (v, false, NULL);
}

/* A connection went away (see backup.h). */
void
backup_abandon (struct volume *v, const void *owner)
{
  if (v->backup && v->backup->owner == owner) {
    nbdkit_error ("backup %s: the client went away before it ended: "
                  "counted as failed", v->backup->token);
    finish (v, false, NULL);
  }
}

/* Give the tracker's slot away (see backup.h): recorded free before
 * writes stop marking its bitmap (slots_release), or a crash would
 * leave the tracker, and its base, to a next backup that misses them.
 */
int
backup_yield_tracker_slot (struct volume *v)
{
  int s = tracker_slot (v);

  if (s < 0 || v->backup ||
      slots_release (v, s, "the tracker's slot given to a new leg") == -1)
    return -1;
  nbdkit_debug ("backup: slot %d given to a new leg: the next backup reads "
                "everything", s);
  return s;
}

/* For status (see backup.h). */
void
backup_get_status (struct volume *v, struct backup_status *st)
{
  struct backup *b = v->backup;
  int s;

  memset (st, 0, sizeof *st);
  if (b) {
    st->running = true;
    memcpy (st->token, b->token, sizeof st->token);
    st->leg = b->held ? (int) b->held->index : -1;
    st->point_in_time = b->held != NULL;
    st->since = b->since;
    st->hold = b->hold;
    st->lapses = unix_time_of (b->lapse_ns);
  }
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  s = tracker_slot (v);
  if (s >= 0 && (v->sb.slots[s].flags & SLOT_BASE)) {
    st->have_base = true;
    hex16 (v->sb.slots[s].uuid, st->base);
  }
  else if (b && b->tracker >= 0 && (b->saved.flags & SLOT_BASE)) {
    st->have_base = true;       /* the base until this backup is done */
    hex16 (b->saved.uuid, st->base);
  }
}
