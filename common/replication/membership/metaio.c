/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata on legs: reading and writing superblocks, bitmap pages and
 * activity logs, generation bumps.
 *
 * Superblock and activity-log writes go to copy (seq % 2) of the leg
 * they are for, with FUA; a leg has at most one of each in flight
 * (superblocks under change_lock, logs under the AL committer role).
 * Bitmap pages carry the same seq on every leg (v->bm_seq) and are
 * written under bm_write_lock, several pages at a time.
 *
 * A generation bump (metaio_bump) writes the new generation, the members
 * (the slots of the uptodate legs) and every slot's bm_gen to every
 * uptodate leg before it returns; a leg that cannot take it is failed
 * on the spot (its hot extents ORed into its bitmap) and the bump is
 * repeated without it, so the generation a write is acknowledged
 * under is always recorded on every leg it counts on.  A bump that no
 * leg takes goes back to the last recorded superblock; the generations
 * it wrote (a leg may hold one: applied, then failed) are kept in
 * v->unrecorded, standing for the recorded one, and enter the history
 * with the next recorded bump; every new counter is above all written.
 * The last uptodate leg's failure is not recorded at all.
 *
 * Changing a slot's bm_gen rewrites every page of its bitmap
 * (metaio_set_bm_gen).  It changes under bm_write_lock, under which
 * the page writer reads it, so no page is encoded while it changes
 * (a failing member's bm_gen changed under change_lock alone, while a
 * page could be encoded with it half written).  A page on disk under
 * another bm_gen than the one a superblock records reads as empty, so
 * while pages are being rewritten some of them read as empty whichever
 * of the two the superblock holds.  That is harmless only while the
 * leg owning the slot holds neither (it is then rebuilt fully at the
 * next start: election.c, rule 5), or while the activity log covers
 * every bit the old pages do not hold.  Hence the invariant: a
 * superblock records a slot's bm_gen G only if every page of the slot's
 * bitmap was written under G to every leg receiving writes, or the bits
 * those pages lack are all in the activity log.  A failing member's new
 * bm_gen (metaio_record_absent: its pages held no bits, what it misses
 * from now on is in the log until the pages are written) and
 * start-up's (pages written before the bump) are recorded at once.  A
 * full resync's target gets its new bm_gen only once its own
 * superblock holds that generation (marked inconsistent), and the
 * change is deferred (metaio_defer_bm_gen): until a bitmap write
 * (metaio_persist_bitmaps) has written every page of the slot under
 * the new bm_gen to every leg receiving writes, every superblock
 * written, by whichever writer (a bump for another leg's failure, an
 * nbdrep command, an asynchronous leg's own), records the old one;
 * the target, holding the new one, is then rebuilt fully after a
 * crash, never resumed from pages that read as empty.
 *
 * Dirty pages go to every leg receiving writes,
 * syncing legs included, so a leg that got them all once misses none.
 * A joining leg's activity-log seq is read from its disk first
 * (metaio_learn_al_seq), so the logs we write it are its newest.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "state.h"
#include "leg.h"
#include "ioreq.h"
#include "member.h"
#include "judge.h"
#include "metaio.h"
#include "al.h"
#include "random.h"
#include "cleanup.h"

/* -D replicate.bm_write_pause=MS: every batch of bitmap pages waits MS
 * milliseconds once encoded, before it is sent, holding bm_write_lock:
 * the window in which no bm_gen may change (metaio_set_bm_gen).  For
 * tests only (test-safety-bmgen-race.sh).
 */
int replicate_debug_bm_write_pause = 0;     /* exported by the .syms */

#define PAGES_IN_FLIGHT 32

/* Allocate a 4K-aligned buffer. */
static void *
alloc_block (size_t size)
{
  void *p = NULL;

  if (posix_memalign (&p, META_BLOCK, size) != 0)
    return NULL;
  memset (p, 0, size);
  return p;
}

/* Allocate the per-leg metadata buffers. */
int
metaio_alloc_leg (struct volume *v, struct leg *l)
{
  if (l->sb_buf == NULL)
    l->sb_buf = alloc_block (META_BLOCK);
  if (l->al_buf == NULL && v->layout.al_bytes > 0)
    l->al_buf = alloc_block (v->layout.al_bytes);
  if (l->sb_buf == NULL || (v->layout.al_bytes > 0 && l->al_buf == NULL)) {
    nbdkit_error ("posix_memalign: %m");
    return -1;
  }
  return 0;
}

/* Read len bytes at offset from a leg.  Returns 0 or an errno. */
static int
read_at (struct leg *l, void *buf, uint32_t len, uint64_t offset)
{
  struct leg_cmd cmd = {
    .op = OP_READ, .buf = buf, .count = len, .offset = offset,
  };
  return ioreq_sync_io (l, &cmd);
}

/* Read a leg's superblock: decode both copies, keep the newest valid. */
int
metaio_read_sb (struct leg *l, struct superblock *sb, enum meta_status *st,
              char *err, size_t errlen)
{
  CLEANUP_FREE uint8_t *buf = alloc_block (META_SB_AREA);
  struct superblock copy[2];
  enum meta_status cs[2];
  char why[2][160];
  int e, pick;

  if (buf == NULL) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  *st = META_BLANK;
  if (l->caps.size < META_SB_AREA) {
    snprintf (err, errlen, "the leg is smaller than a superblock");
    return 0;
  }
  e = read_at (l, buf, META_SB_AREA, md_sb_offset (l->caps.size, 0));
  if (e != 0) {
    snprintf (err, errlen, "reading the superblock: %s", strerror (e));
    return -1;
  }
  cs[0] = sb_decode (buf, &copy[0], why[0], sizeof why[0]);
  cs[1] = sb_decode (buf + META_BLOCK, &copy[1], why[1], sizeof why[1]);
  pick = meta_pick_copy (cs[0], copy[0].seq, cs[1], copy[1].seq);
  if (pick >= 0) {
    *sb = copy[pick];
    *st = META_OK;
    if (cs[!pick] == META_CORRUPT)
      nbdkit_debug ("leg %u: superblock copy %d ignored: %s",
                    l->index, !pick, why[!pick]);
    return 0;
  }
  *st = cs[0] == META_BLANK && cs[1] == META_BLANK ? META_BLANK
                                                   : META_CORRUPT;
  snprintf (err, errlen, "%s", cs[0] == META_CORRUPT ? why[0] : why[1]);
  return 0;
}

/* Read a leg's activity log (both copies, the newest valid wins). */
int
metaio_read_al (struct leg *l, uint32_t *extents, uint32_t *nr, uint64_t *seq,
              enum meta_status *st, char *err, size_t errlen)
{
  struct volume *v = l->v;
  uint64_t bytes = v->layout.al_bytes;
  CLEANUP_FREE uint8_t *buf = alloc_block (bytes);
  CLEANUP_FREE uint32_t *other = calloc (v->layout.al_extents,
                                         sizeof *other);
  enum meta_status cs[2];
  uint64_t sq[2] = { 0, 0 };
  uint32_t n[2] = { 0, 0 };
  char why[160];
  unsigned c;
  int pick;

  if (buf == NULL || other == NULL) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  for (c = 0; c < 2; ++c) {
    int e = read_at (l, buf, (uint32_t) bytes,
                     md_al_offset (&v->layout, l->caps.size, c));
    if (e != 0) {
      snprintf (err, errlen, "reading the activity log: %s", strerror (e));
      return -1;
    }
    cs[c] = al_decode (buf, v->layout.al_extents, v->sb.volume_uuid,
                       v->cfg.al_extent, v->layout.nr_al_extents, &sq[c],
                       c == 0 ? extents : other, &n[c], why, sizeof why);
  }
  pick = meta_pick_copy (cs[0], sq[0], cs[1], sq[1]);
  if (pick < 0) {
    snprintf (err, errlen, "%s", why);
    *st = cs[0] == META_BLANK && cs[1] == META_BLANK ? META_BLANK
                                                     : META_CORRUPT;
    return 0;
  }
  if (pick == 1)
    memcpy (extents, other, n[1] * sizeof *extents);
  *nr = n[pick];
  *seq = sq[pick];
  *st = META_OK;
  return 0;
}

/* Learn the seq of the newest valid activity log on leg l, so that the
 * logs we write to it are newer than any it holds from an earlier life
 * (the copy with the highest seq wins when it is read back after a
 * crash).  A leg whose log cannot be read keeps the seq it has.
 */
void
metaio_learn_al_seq (struct leg *l)
{
  CLEANUP_FREE uint32_t *ext = calloc (l->v->layout.al_extents, sizeof *ext);
  enum meta_status st;
  uint64_t seq;
  uint32_t nr;
  char err[256];

  if (ext == NULL || l->v->layout.al_bytes == 0 ||
      metaio_read_al (l, ext, &nr, &seq, &st, err, sizeof err) == -1 ||
      st != META_OK)
    return;
  if (seq > l->al_seq)
    l->al_seq = seq;
}

/* OR a slot's bitmap as found on legs into v->bitmaps[slot]. */
int
metaio_load_bitmap (struct volume *v, unsigned slot, uint16_t legs)
{
  CLEANUP_FREE uint8_t *buf = alloc_block (2 * META_BLOCK);
  struct gen bm_gen = v->sb.slots[slot].bm_gen;
  uint64_t words[BM_PAGE_WORDS];
  uint64_t p;
  unsigned i;

  if (buf == NULL) {
    nbdkit_error ("posix_memalign: %m");
    return -1;
  }
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    if (!(legs & (1u << i)))
      continue;
    for (p = 0; p < v->layout.bm_pages; ++p) {
      uint64_t off = md_bm_offset (&v->layout, l->caps.size, slot, p, 0);
      uint64_t seq;
      int e = read_at (l, buf, 2 * META_BLOCK, off);
      if (e != 0) {
        nbdkit_error ("leg %u: reading bitmap of slot %u: %s",
                      i, slot, strerror (e));
        return -1;
      }
      bm_page_pick (buf, v->sb.volume_uuid, slot, (uint32_t) p, bm_gen,
                    &seq, words);
      bitmap_page_or (volume_bitmap (v, slot), p, words);
      {
        /* The page writer reads and bumps bm_seq under this lock. */
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);
        if (seq > v->bm_seq[slot][p])
          v->bm_seq[slot][p] = seq;
      }
    }
  }
  return 0;
}

/* Drop the generations of the history that are not older than the
 * superblock's own (an asynchronous or inconsistent leg may hold an
 * older generation than the volume's, and a history runs strictly
 * downwards from it).
 */
static void
keep_older_history (struct superblock *sb)
{
  uint32_t i, skip = 0;

  while (skip < sb->history_len &&
         sb->history[skip].counter >= sb->gen.counter)
    skip++;
  for (i = 0; i + skip < sb->history_len; ++i)
    sb->history[i] = sb->history[i + skip];
  for (; i < sb->history_len; ++i)
    sb->history[i] = (struct gen) { 0, 0 };
  sb->history_len -= skip;
}

/* Build leg l's superblock: the common one with its own fields. */
static void
sb_for_leg (struct volume *v, struct leg *l, struct superblock *sb)
{
  uint16_t pending = atomic_load (&v->bm_gen_pending);
  unsigned s;

  *sb = v->sb;
  /* A deferred bm_gen is not recorded before its pages are written;
   * a slot being released is recorded free before it stops being
   * tracked (slots.c).
   */
  for (s = 0; s < MAX_LEGS; ++s) {
    if (pending & (1u << s))
      sb->slots[s].bm_gen = v->bm_gen_recorded[s];
    if (v->slots_releasing & (1u << s))
      memset (&sb->slots[s], 0, sizeof sb->slots[s]);
  }
  memcpy (sb->leg_uuid, l->uuid, 16);
  sb->slot = (uint32_t) l->slot;
  sb->seq = l->sb_seq + 1;
  sb->mtime = (uint64_t) time (NULL);
  sb->flags = l->inconsistent ? SB_INCONSISTENT : 0;
  /* An inconsistent leg (a resync's target) holds its own generation,
   * older than the volume's for an incremental resync, and so does an
   * asynchronous leg (its slot's bm_gen: it may lag the volume).  The
   * history written with it must run strictly downwards from it, or the
   * decoder refuses the copy and the leg reads as its older, consistent
   * superblock (test-safety-inconsistent-marker.sh).
   */
  if (l->inconsistent || l->async) {
    sb->gen = l->gen;
    keep_older_history (sb);
  }
  if (l->async && l->rpo_time)
    sb->mtime = l->rpo_time;
}

/* Encode leg l's superblock, with the next seq, into buf (META_BLOCK
 * bytes), for a write the caller makes without change_lock (an
 * asynchronous leg's, async-sender.c).  change_lock held.  Returns the seq.
 */
uint64_t
metaio_encode_sb (struct volume *v, struct leg *l, uint8_t *buf)
{
  struct superblock sb;

  sb_for_leg (v, l, &sb);
  sb_encode (&sb, buf);
  return sb.seq;
}

/* Write superblocks to legs.  Returns the legs that failed, with their
 * errors in errs (if not NULL).
 */
uint16_t
metaio_write_sb (struct volume *v, uint16_t legs, int *errs)
{
  struct superblock sb;
  struct ioreq r;
  uint16_t failed = 0;
  unsigned i;

  ioreq_init (&r, v);
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    struct leg_cmd cmd = {
      .op = OP_WRITE, .buf = l->sb_buf, .count = META_BLOCK,
      .flags = ENGINE_FLAG_FUA,
    };
    if (!(legs & (1u << i)))
      continue;
    sb_for_leg (v, l, &sb);
    sb_encode (&sb, l->sb_buf);
    cmd.offset = md_sb_offset (l->caps.size, sb.seq % 2);
    ioreq_submit (&r, l, &cmd);
  }
  ioreq_wait_fua (&r);
  for (i = 0; i < v->nr_legs; ++i) {
    int e = (legs & (1u << i)) ? ioreq_leg_error (&r, i) : 0;
    if (errs)
      errs[i] = e;
    if (!(legs & (1u << i)))
      continue;
    if (e != 0)
      failed |= 1u << i;
    else
      atomic_store (&v->legs[i].sb_acked, ++v->legs[i].sb_seq);
  }
  ioreq_destroy (&r);
  return failed;
}

/* Start slot s's bitmap counting from generation g (see metaio.h):
 * every page is rewritten, also those whose bits do not change, since
 * a page on disk under another bm_gen reads as empty.  Recorded by the
 * next superblock write (a deferred change is dropped).  bm_write_lock
 * held: the page writer reads bm_gen under it (encode_page).
 */
void
metaio_set_bm_gen (struct volume *v, unsigned s, struct gen g)
{
  assert (pthread_mutex_trylock (&v->bm_write_lock) == EBUSY);
  v->sb.slots[s].bm_gen = g;
  atomic_fetch_and (&v->bm_gen_pending, (uint16_t) ~(1u << s));
  if (volume_bitmap (v, s) != NULL)
    bitmap_mark_all_dirty (volume_bitmap (v, s));
}

/* Start slot s's bitmap counting from generation g, recorded in
 * superblocks only once every page is written under it (see the design
 * note and metaio.h).  change_lock held.
 */
void
metaio_defer_bm_gen (struct volume *v, unsigned s, struct gen g)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);

  /* A change still deferred leaves the recorded bm_gen as it is. */
  if (!(atomic_load (&v->bm_gen_pending) & (1u << s)))
    v->bm_gen_recorded[s] = v->sb.slots[s].bm_gen;
  v->sb.slots[s].bm_gen = g;
  atomic_fetch_or (&v->bm_gen_pending, (uint16_t) (1u << s));
  if (volume_bitmap (v, s) != NULL)
    bitmap_mark_all_dirty (volume_bitmap (v, s));
}

/* Record that leg l no longer receives writes (see metaio.h). */
void
metaio_record_absent (struct volume *v, struct leg *l, bool was_uptodate,
                    bool flushed)
{
  struct sb_slot *s;

  if (l->slot < 0 || volume_bitmap (v, (unsigned) l->slot) == NULL)
    return;
  s = &v->sb.slots[l->slot];
  if (!flushed)
    al_or_hot_into (v->al, volume_bitmap (v, (unsigned) l->slot));
  if (was_uptodate) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);
    /* Atomic: write_bitmaps reads the flags without change_lock. */
    __atomic_fetch_and (&s->flags, ~(uint32_t) SLOT_MEMBER, __ATOMIC_RELAXED);
    metaio_set_bm_gen (v, (unsigned) l->slot, l->gen);
  }
}

/* Set the member flags from the uptodate legs. */
static void
set_members (struct volume *v, uint16_t uptodate)
{
  uint16_t slots = member_slot_mask_of (v, uptodate);
  unsigned s;

  /* Atomic: write_bitmaps reads the flags without change_lock. */
  for (s = 0; s < v->sb.max_legs; ++s) {
    if (slots & (1u << s))
      __atomic_fetch_or (&v->sb.slots[s].flags, SLOT_MEMBER,
                         __ATOMIC_RELAXED);
    else
      __atomic_fetch_and (&v->sb.slots[s].flags, ~(uint32_t) SLOT_MEMBER,
                          __ATOMIC_RELAXED);
  }
}

/* Mark the legs a bump could not reach failed (change_lock held). */
static void
fail_unreached (struct volume *v, uint16_t failed, const int *errs)
{
  char reason[128];
  unsigned i;

  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    bool was_uptodate;
    if (!(failed & (1u << i)))
      continue;
    snprintf (reason, sizeof reason, "superblock write failed: %s",
              strerror (errs[i]));
    if (member_mark_failed (v, l, EPOCH_ANY, reason, &was_uptodate)) {
      leg_shutdown (l);
      metaio_record_absent (v, l, was_uptodate, false);
    }
  }
}

/* Is g a generation a failed bump wrote since v->sb.gen was recorded
 * (change_lock held)?
 */
bool
metaio_gen_unrecorded (const struct volume *v, struct gen g)
{
  unsigned i;

  for (i = 0; i < v->nr_unrecorded; ++i)
    if (gen_equal (v->unrecorded[i], g))
      return true;
  return false;
}

/* The next generation: its counter above every one ever written, also
 * by bumps no leg confirmed (two generations with one counter would be
 * a split brain at the next start).
 */
static struct gen
next_gen (struct volume *v)
{
  uint64_t c = v->sb.gen.counter > v->max_counter ? v->sb.gen.counter
                                                  : v->max_counter;

  v->max_counter = c + 1;
  return (struct gen) { c + 1, random_u64 () };
}

/* Make next the generation: the current one and then the unrecorded
 * ones go onto the history (their counters lie between the two, in the
 * order they were written, so the history stays strictly decreasing),
 * so that a leg holding one of them is known from now on.
 */
static void
push_generations (struct volume *v, struct gen next)
{
  unsigned i;

  for (i = 0; i < v->nr_unrecorded; ++i)
    sb_push_gen (&v->sb, v->unrecorded[i]);
  v->nr_unrecorded = 0;
  sb_push_gen (&v->sb, next);
}

/* A bump that no leg took: go back to the superblock last recorded; the
 * generations written since (a leg may hold one: its write applied,
 * then failed) are unrecorded, standing for the recorded one until the
 * next bump that a leg takes puts them into the history.
 */
static void
restore_recorded (struct volume *v, const struct superblock *recorded,
                  const struct gen *unrecorded, unsigned nr)
{
  unsigned skip = nr > MAX_UNRECORDED ? nr - MAX_UNRECORDED : 0;

  v->sb = *recorded;
  v->nr_unrecorded = nr - skip;         /* the newest, in order */
  memcpy (v->unrecorded, unrecorded + skip,
          v->nr_unrecorded * sizeof *unrecorded);
}

/* Bump the generation (change_lock held).  If in the end no leg could
 * take a new generation, the volume's superblock goes back to the last
 * one some leg holds, with what the caller noted before the bump (the
 * absence of the leg whose failure it records): the legs failed here
 * were the last uptodate ones, so a leg that returns with that
 * generation (or one this bump wrote to it, see restore_recorded) is
 * uptodate again if it is a member of it (it holds the newest data
 * there is), and the leg whose failure could not be recorded is not.
 * The writes that waited for this bump are EIO (judge_acknowledge: the
 * legs they counted on have failed).
 */
int
metaio_bump (struct volume *v)
{
  struct superblock recorded = v->sb;
  struct gen tried[MAX_UNRECORDED + MAX_LEGS];
  unsigned nr_tried = v->nr_unrecorded;
  int errs[MAX_LEGS];

  memcpy (tried, v->unrecorded, nr_tried * sizeof *tried);
  for (;;) {
    uint16_t up = MB_UPTODATE (membership_load (v)), failed;
    struct gen next;
    unsigned i;

    if (up == 0) {
      restore_recorded (v, &recorded, tried, nr_tried);
      return -1;
    }
    next = next_gen (v);
    push_generations (v, next);
    set_members (v, up);
    failed = metaio_write_sb (v, up, errs);
    for (i = 0; i < v->nr_legs; ++i)
      if ((up & ~failed) & (1u << i))
        v->legs[i].gen = next;
    if (up & ~failed) {
      recorded = v->sb;
      nr_tried = 0;
    }
    else if (nr_tried < sizeof tried / sizeof tried[0])
      tried[nr_tried++] = next;
    if (failed == 0) {
      nbdkit_debug ("generation %" PRIu64 " recorded", next.counter);
      return 0;
    }
    fail_unreached (v, failed, errs);
  }
}

/* Record a failed leg (see metaio.h).  The last uptodate leg's
 * failure is not recorded: no write can be acknowledged without it, so
 * it stays a member of the generation it holds, the newest there is,
 * and is uptodate again when it returns.
 */
void
metaio_record_failure (struct volume *v, struct leg *l, bool was_uptodate)
{
  if (!v->metadata)
    return;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  if (was_uptodate && MB_UPTODATE (membership_load (v)) == 0) {
    nbdkit_error ("leg %u was the last uptodate leg: the volume has failed",
                  l->index);
    return;
  }
  metaio_record_absent (v, l, was_uptodate, false);
  if (metaio_bump (v) == -1)
    nbdkit_error ("no uptodate leg left to record the failure of leg %u",
                  l->index);
}

/* Encode page p of slot s (taking its dirty mark) with a fresh seq into
 * buf.  bm_write_lock held.
 */
static void
encode_page (struct volume *v, unsigned s, uint64_t p, uint8_t *buf)
{
  uint64_t words[BM_PAGE_WORDS];

  bitmap_page_take_dirty (volume_bitmap (v, s), p);
  bitmap_page_get (volume_bitmap (v, s), p, words);
  v->bm_seq[s][p]++;
  bm_page_encode (buf, v->bm_seq[s][p], v->sb.volume_uuid, s, (uint32_t) p,
                  v->sb.slots[s].bm_gen, words);
}

/* One batch of page writes: pages (slot, page) to legs.  Returns the
 * legs that failed.  bm_write_lock held.
 */
static uint16_t
write_pages (struct volume *v, uint16_t legs, size_t n,
             const unsigned *slots, const uint64_t *pages, uint8_t *bufs)
{
  struct ioreq r[PAGES_IN_FLIGHT];
  uint16_t failed = 0;
  size_t k;
  unsigned i;

  for (k = 0; k < n; ++k)
    encode_page (v, slots[k], pages[k], bufs + k * META_BLOCK);
  debug_pause (replicate_debug_bm_write_pause, "bitmap write",
               "with its pages encoded", "bm_write_pause");
  for (k = 0; k < n; ++k) {
    uint8_t *buf = bufs + k * META_BLOCK;
    ioreq_init (&r[k], v);
    for (i = 0; i < v->nr_legs; ++i) {
      struct leg *l = &v->legs[i];
      struct leg_cmd cmd = {
        .op = OP_WRITE, .buf = buf, .count = META_BLOCK,
        .flags = ENGINE_FLAG_FUA,
      };
      /* Only legs in legs: another's caps change as it reconnects. */
      if (!(legs & (1u << i)))
        continue;
      cmd.offset = md_bm_offset (&v->layout, l->caps.size, slots[k],
                                 pages[k], v->bm_seq[slots[k]][pages[k]] % 2);
      ioreq_submit (&r[k], l, &cmd);
    }
  }
  for (k = 0; k < n; ++k) {
    ioreq_wait_fua (&r[k]);
    for (i = 0; i < v->nr_legs; ++i)
      if ((legs & (1u << i)) && ioreq_leg_error (&r[k], i) != 0)
        failed |= 1u << i;
    ioreq_destroy (&r[k]);
  }
  return failed;
}

/* Write pages of slots with bitmaps to legs: only the dirty ones, or
 * all; every page of a slot whose bm_gen change is deferred.  With
 * persist_m (metaio_persist_bitmaps) the legs are those receiving
 * writes, looked at under bm_write_lock (their membership word in
 * *persist_m): a leg joining later got every page under the new bm_gen
 * (metaio_write_all_bitmaps, which waits for this lock) or was among
 * them; if every write succeeded, the deferred changes are recorded
 * from now on (a slot with no pages to write, unassigned or without a
 * bitmap, has nothing to wait for).  Returns the legs that failed.
 */
static uint16_t
write_bitmaps (struct volume *v, uint16_t legs, bool all, uint64_t *persist_m)
{
  CLEANUP_FREE uint8_t *bufs = alloc_block (PAGES_IN_FLIGHT * META_BLOCK);
  unsigned slots[PAGES_IN_FLIGHT];
  uint64_t pages[PAGES_IN_FLIGHT];
  uint16_t failed = 0, pending;
  size_t n = 0;
  unsigned s;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);

  if (persist_m) {
    *persist_m = membership_load (v);
    legs = volume_sync_legs (v, MB_WRITING (*persist_m));
  }
  if (bufs == NULL)
    return legs;
  /* Deferred changes are made under this lock: none starts meanwhile. */
  pending = atomic_load (&v->bm_gen_pending);
  for (s = 0; s < MAX_LEGS; ++s) {
    bool every = all || (pending & (1u << s));
    uint64_t p;
    if (volume_bitmap (v, s) == NULL ||
        !(__atomic_load_n (&v->sb.slots[s].flags, __ATOMIC_RELAXED) &
          SLOT_ASSIGNED))
      continue;
    for (p = every ? 0 : bitmap_next_dirty_page (volume_bitmap (v, s), 0);
         p < v->layout.bm_pages;
         p = every ? p + 1
                   : bitmap_next_dirty_page (volume_bitmap (v, s), p + 1)) {
      slots[n] = s;
      pages[n] = p;
      if (++n == PAGES_IN_FLIGHT) {
        failed |= write_pages (v, legs & ~failed, n, slots, pages, bufs);
        n = 0;
      }
    }
  }
  if (n > 0)
    failed |= write_pages (v, legs & ~failed, n, slots, pages, bufs);
  if (persist_m && failed == 0 && (MB_UPTODATE (*persist_m) & legs) != 0)
    atomic_fetch_and (&v->bm_gen_pending, (uint16_t) ~pending);
  return failed;
}

/* Write the dirty bitmap pages to every synchronous leg receiving
 * writes: the uptodate legs and the syncing ones, so that a leg
 * finishing its resync, which got every page once
 * (metaio_write_all_bitmaps), misses none written after that.  An
 * asynchronous leg gets none: it is never a source, and a failover to
 * it rebuilds the others fully.  Returns 0 if an uptodate leg took them.
 */
int
metaio_persist_bitmaps (struct volume *v)
{
  uint64_t m;
  uint16_t failed;
  unsigned i;

  if (!v->metadata)
    return 0;
  failed = write_bitmaps (v, 0, false, &m);
  for (i = 0; i < v->nr_legs; ++i)
    if (failed & (1u << i))
      member_fail_leg (v, &v->legs[i], EPOCH_ANY, "bitmap write failed");
  return (MB_UPTODATE (m) & ~failed) ? 0 : -1;
}

/* Write every bitmap page to legs (a joining leg). */
uint16_t
metaio_write_all_bitmaps (struct volume *v, uint16_t legs)
{
  return write_bitmaps (v, legs, true, NULL);
}
