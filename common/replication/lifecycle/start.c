/* SPDX-License-Identifier: BSD-3-Clause */
/* Start-up: connect the legs, elect, recover, bump the generation.
 *
 * engine_start runs before the volume serves anything (for the plugin
 * in .get_ready, so errors reach the terminal; for the filter in
 * .after_fork, the first moment the plugin underneath can be used).
 * It uses the ordinary I/O path, so it starts the pollers of the legs
 * it opens; engine_start_threads later restarts them after nbdkit has
 * forked (threads do not survive a fork, connections do).
 *
 * A leg that refuses (its TLS setup cannot work: conn.c, tls.c) stops
 * the start at once, naming it with libnbd's reason.
 *
 * With metadata=internal (section 6 of DESIGN.md): read every reachable
 * leg's superblock, waiting up to wait= for the others as long as the
 * election asks for them (start-reach.c); then either create a new
 * volume or take the winners' superblock as the volume's, recover from
 * a crash (copy the union of the winners' activity logs from one winner
 * to the others and OR it into every absent slot's bitmap), write the
 * absent bitmaps, flush every leg (init=zero's zeroes and recovery's
 * copies are durable before the empty log says nothing needs
 * recovering: FUA covers only the log itself), write an empty log, and
 * bump the generation.  The stale legs' activity-log seqs are read too,
 * so the logs they get later are newer than those of their earlier
 * life.  With metadata=none every leg must answer; leg 0 is the source
 * and the others are rebuilt fully.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "caps.h"
#include "state.h"
#include "poller.h"
#include "leg.h"
#include "ioreq.h"
#include "member.h"
#include "election.h"
#include "metaio.h"
#include "io.h"
#include "slots.h"
#include "copy.h"
#include "al.h"
#include "random.h"
#include "start-reach.h"
#include "cleanup.h"

/* Check every open leg is large enough for size bytes of data plus the
 * metadata.  Returns 0 or -1 naming the leg.
 */
static int
check_leg_sizes (struct volume *v, uint64_t needed)
{
  char name[160];
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    if (atomic_load (&l->open) && l->caps.size < needed) {
      nbdkit_error ("%s is too small: %" PRIu64 " bytes, the volume needs "
                    "%" PRIu64 " (%" PRIu64 " of data and %" PRIu64
                    " of metadata)", leg_name (l, name, sizeof name),
                    l->caps.size, needed, v->size, needed - v->size);
      return -1;
    }
  }
  return 0;
}

/* The smallest open leg. */
static struct leg *
smallest_leg (struct volume *v)
{
  struct leg *min = NULL;
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (atomic_load (&v->legs[i].open) &&
        (min == NULL || v->legs[i].caps.size < min->caps.size))
      min = &v->legs[i];
  return min;
}

/* Fix the geometry: a new volume's from the parameters and the smallest
 * leg, an existing one's from its superblock.
 */
static int
set_geometry (struct volume *v, const struct superblock *ref)
{
  char err[256];

  if (ref) {
    if (ref->chunk_size != v->cfg.chunk || ref->max_legs != v->cfg.max_legs)
      nbdkit_debug ("the volume was created with chunk=%" PRIu32
                    " max-legs=%" PRIu32 "; those are used",
                    ref->chunk_size, ref->max_legs);
    v->cfg.chunk = ref->chunk_size;
    v->cfg.max_legs = ref->max_legs;
    v->cfg.al_extent = ref->al_extent_size;
    v->cfg.al_extents = ref->al_extents;
    v->size = ref->volume_size;
  }
  else {
    struct leg *min = smallest_leg (v);
    v->size = md_max_volume_size (min->caps.size, v->cfg.chunk,
                                  v->cfg.max_legs, v->cfg.al_extent,
                                  v->cfg.al_extents);
    if (v->size == 0) {
      nbdkit_error ("%s is too small (%" PRIu64 " bytes) to hold the "
                    "metadata (chunk=%" PRIu32 ", max-legs=%u, al-extents=%u)",
                    leg_name (min, err, sizeof err), min->caps.size,
                    v->cfg.chunk, v->cfg.max_legs, v->cfg.al_extents);
      return -1;
    }
  }
  if (md_layout_init (&v->layout, v->size, v->cfg.chunk, v->cfg.max_legs,
                      v->cfg.al_extent, v->cfg.al_extents,
                      err, sizeof err) == -1) {
    nbdkit_error ("metadata geometry: %s", err);
    return -1;
  }
  return check_leg_sizes (v, v->size + v->layout.md_size);
}

/* Prepare the per-leg metadata buffers of every open leg. */
static int
alloc_leg_buffers (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (atomic_load (&v->legs[i].open) &&
        metaio_alloc_leg (v, &v->legs[i]) == -1)
      return -1;
  return 0;
}

/* Combine what the open legs can do into what the client is told. */
static void
negotiate (struct volume *v)
{
  const struct leg_caps *caps[MAX_LEGS];
  size_t i, n = 0;

  for (i = 0; i < v->nr_legs; ++i)
    if (atomic_load (&v->legs[i].open))
      caps[n++] = &v->legs[i].caps;
  caps_combine (caps, n, &v->caps);
}

/* Write zeroes over the data area of every leg (init=zero), in pieces
 * every leg accepts, as on the data path (io_piece_within: a leg
 * without native write-zeroes gets writes of zeroes).
 */
static int
zero_all_legs (struct volume *v)
{
  uint64_t off, step;
  size_t i;

  negotiate (v);
  step = io_piece_within (v, OP_ZERO, 64 * 1024 * 1024);
  nbdkit_debug ("init=zero: zeroing %" PRIu64 " bytes on every leg", v->size);
  for (off = 0; off < v->size; off += step) {
    uint64_t n = v->size - off < step ? v->size - off : step;
    struct leg_cmd cmd = {
      .op = OP_ZERO, .offset = off, .count = (uint32_t) n,
      .flags = ENGINE_FLAG_MAY_TRIM,
    };
    for (i = 0; i < v->nr_legs; ++i) {
      int e = ioreq_sync_io (&v->legs[i], &cmd);
      if (e != 0) {
        nbdkit_error ("init=zero: leg %zu: %s", i, strerror (e));
        return -1;
      }
    }
  }
  return 0;
}

/* Write an empty activity log to legs (both copies), once the legs
 * have flushed what start-up wrote to their data areas (init=zero's
 * zeroes, crash recovery's copies): the log's FUA makes durable only
 * the log itself, and an empty log says no extent needs recovering.
 */
static int
write_empty_log (struct volume *v, uint16_t legs)
{
  static const struct leg_cmd flush = { .op = OP_FLUSH };
  unsigned copy;
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    int e = (legs & (1u << i)) ? ioreq_sync_io (&v->legs[i], &flush) : 0;
    if (e != 0) {
      nbdkit_error ("leg %zu: flush before writing the activity log: %s",
                    i, strerror (e));
      return -1;
    }
  }
  for (copy = 0; copy < 2; ++copy)
    if (al_write_to (v->al, legs) != 0) {
      nbdkit_error ("writing the activity log failed");
      return -1;
    }
  return 0;
}

/* Create a new volume on legs whose roles the election gave. */
static int
create_volume (struct volume *v, const struct elect_result *res)
{
  struct superblock *sb = &v->sb;
  uint16_t members = 0;
  size_t i;

  if (set_geometry (v, NULL) == -1 || alloc_leg_buffers (v) == -1)
    return -1;
  memset (sb, 0, sizeof *sb);
  uuid_generate (sb->volume_uuid);
  sb->max_legs = v->cfg.max_legs;
  sb->quorum = v->quorum;
  sb->volume_size = v->size;
  sb->chunk_size = v->cfg.chunk;
  sb->al_extent_size = v->cfg.al_extent;
  sb->al_extents = v->cfg.al_extents;
  sb->ctime = (uint64_t) time (NULL);
  sb->gen.counter = 1;          /* the start-up bump makes it 2 */
  sb->gen.id = random_u64 ();
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    if (res->role[i] != ROLE_UPTODATE)
      continue;
    uuid_generate (l->uuid);
    l->slot = (int) i;
    memcpy (sb->slots[i].uuid, l->uuid, 16);
    sb->slots[i].flags = SLOT_ASSIGNED | SLOT_MEMBER;
    members |= 1u << i;
  }
  if (res->create == CREATE_ZERO && zero_all_legs (v) == -1)
    return -1;
  nbdkit_debug ("created volume of %" PRIu64 " bytes on %u leg(s)",
                v->size, (unsigned) __builtin_popcount (members));
  return 0;
}

/* Take the reference leg's superblock as the volume's and the other
 * legs' identities from theirs.
 */
static int
adopt_volume (struct volume *v, const struct elect_input *in,
              const struct elect_result *res)
{
  size_t i;

  if (set_geometry (v, &in->legs[res->reference].sb) == -1 ||
      alloc_leg_buffers (v) == -1)
    return -1;
  v->sb = in->legs[res->reference].sb;
  if (v->cfg.quorum_given && v->cfg.quorum != v->sb.quorum) {
    nbdkit_debug ("quorum changed from %" PRIu32 " to %u (recorded with "
                  "the new generation)", v->sb.quorum, v->cfg.quorum);
    v->sb.quorum = v->cfg.quorum;
  }
  v->quorum = v->sb.quorum;
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    const struct superblock *sb = &in->legs[i].sb;
    if (!in->legs[i].reachable || in->legs[i].status != META_OK)
      continue;
    l->sb_seq = sb->seq;
    l->gen = sb->gen;
    l->inconsistent = (sb->flags & SB_INCONSISTENT) != 0;
    if (sb->slot < v->sb.max_legs &&
        (v->sb.slots[sb->slot].flags & SLOT_ASSIGNED) &&
        memcmp (v->sb.slots[sb->slot].uuid, sb->leg_uuid, 16) == 0) {
      memcpy (l->uuid, sb->leg_uuid, 16);
      l->slot = (int) sb->slot;
    }
  }
  return 0;
}

/* The slots of the uptodate legs. */
static uint16_t
winner_slots (struct volume *v, uint16_t winners)
{
  return member_slot_mask_of (v, winners);
}

/* Every assigned slot whose leg is not a winner is absent: allocate its
 * bitmap; load it if it was already absent, or start a new absence at
 * the reference generation if it was a member.
 */
static int
prepare_absent_slots (struct volume *v, uint16_t winners, uint16_t *absent)
{
  uint16_t present = winner_slots (v, winners);
  unsigned s;

  *absent = 0;
  for (s = 0; s < v->sb.max_legs; ++s) {
    struct sb_slot *slot = &v->sb.slots[s];
    if (!(slot->flags & SLOT_ASSIGNED) || (present & (1u << s)))
      continue;
    if (member_alloc_bitmap (v, s) == -1)
      return -1;
    *absent |= 1u << s;
    if (slot->flags & SLOT_MEMBER) {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);
      metaio_set_bm_gen (v, s, v->sb.gen);
      slot->flags &= ~SLOT_MEMBER;
    }
    else if (metaio_load_bitmap (v, s, winners) == -1)
      return -1;
  }
  return 0;
}

/* Read the union of the winners' activity logs into a list.  Returns
 * the number of extents, or -1.
 */
static int64_t
union_of_logs (struct volume *v, uint16_t winners, uint32_t *out)
{
  CLEANUP_FREE uint8_t *seen = calloc (v->layout.nr_al_extents, 1);
  CLEANUP_FREE uint32_t *ext = calloc (v->layout.al_extents, sizeof *ext);
  uint64_t seq, maxseq = 0, n = 0;
  uint32_t nr, j;
  char err[256];
  size_t i;

  if (seen == NULL || ext == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    enum meta_status st;
    if (!(winners & (1u << i)))
      continue;
    if (metaio_read_al (l, ext, &nr, &seq, &st, err, sizeof err) == -1) {
      nbdkit_error ("leg %zu: %s", i, err);
      return -1;
    }
    if (st != META_OK) {
      /* No valid log: every extent may hold a torn write. */
      nbdkit_error ("leg %zu: activity log unreadable (%s): recovering the "
                    "whole volume", i, err);
      memset (seen, 1, v->layout.nr_al_extents);
      continue;
    }
    l->al_seq = seq;
    if (seq > maxseq)
      maxseq = seq;
    for (j = 0; j < nr; ++j)
      seen[ext[j]] = 1;
  }
  for (j = 0; j < v->layout.nr_al_extents; ++j)
    if (seen[j])
      out[n++] = j;
  return (int64_t) n;
}

/* Crash recovery: make the winners equal over the extents of their
 * logs, copying from one winner; OR those extents into every absent
 * slot's bitmap.
 */
static int
recover_logs (struct volume *v, uint16_t winners, uint16_t absent)
{
  CLEANUP_FREE uint32_t *ext = calloc (v->layout.nr_al_extents, sizeof *ext);
  CLEANUP_FREE void *buf = NULL;
  struct endpoint src = { 0 }, dst[MAX_LEGS];
  size_t nr_dst = 0, i;
  uint64_t per = v->cfg.al_extent / v->cfg.chunk, bytes = 0;
  int64_t n, k;
  unsigned s;

  if (ext == NULL || posix_memalign (&buf, 4096, COPY_MAX) != 0) {
    nbdkit_error ("out of memory");
    return -1;
  }
  n = union_of_logs (v, winners, ext);
  if (n <= 0)
    return (int) n;
  for (i = 0; i < v->nr_legs; ++i)
    if (winners & (1u << i)) {
      if (src.leg == NULL)
        src.leg = &v->legs[i];
      else
        dst[nr_dst++] = (struct endpoint) { .leg = &v->legs[i] };
    }
  for (k = 0; k < n; ++k) {
    uint64_t start = (uint64_t) ext[k] * v->cfg.al_extent;
    uint64_t end = start + v->cfg.al_extent;
    for (s = 0; s < MAX_LEGS; ++s)
      if ((absent & (1u << s)) && v->bitmaps[s])
        bitmap_set_range (v->bitmaps[s], ext[k] * per, (ext[k] + 1) * per - 1);
    if (end > v->size)
      end = v->size;
    for (; nr_dst > 0 && start < end; start += COPY_MAX) {
      uint32_t len = end - start < COPY_MAX ? end - start : COPY_MAX;
      struct copy_result cr = { 0 };
      if (copy_range (v, &src, dst, nr_dst, start, len, buf, &cr) == -1) {
        nbdkit_error ("crash recovery: copying extent %" PRIu32 " failed: %s",
                      ext[k], strerror (cr.err));
        return -1;
      }
      bytes += len;
    }
  }
  nbdkit_debug ("crash recovery: %" PRId64 " activity-log extent(s), %"
                PRIu64 " bytes made equal on %zu leg(s)", n, bytes,
                nr_dst + 1);
  return 0;
}

/* The winners' log seqs are read with their logs (union_of_logs); a
 * stale leg's are read here, so that the logs it gets once it receives
 * writes are newer than those of its earlier life.
 */
static void
learn_stale_al_seqs (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (atomic_load (&v->legs[i].state) == LEG_STALE)
      metaio_learn_al_seq (&v->legs[i]);
}

/* Set leg states from the election's roles; returns the winners.
 * These are the states the legs start in (member_init_state), not moves:
 * nothing but this thread looks at the legs yet, and the word is
 * published once for all of them, with the absent slots the
 * superblock names (member_set_absent).
 */
static uint16_t
apply_roles (struct volume *v, const struct elect_result *res)
{
  uint16_t winners = 0;
  char name[160];
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    switch (res->role[i]) {
    case ROLE_UPTODATE:
      member_init_state (l, LEG_UPTODATE);
      winners |= 1u << i;
      break;
    case ROLE_INCREMENTAL:
    case ROLE_FULL:
      member_init_state (l, LEG_STALE);
      l->want_full = res->role[i] == ROLE_FULL;
      nbdkit_debug ("%s is stale: %s resync", leg_name (l, name, sizeof name),
                    l->want_full ? "full" : "incremental");
      break;
    case ROLE_MISSING:
      member_init_state (l, LEG_FAILED);
      break;
    }
  }
  return winners;
}

/* Every slot a configured leg holds gets its bitmap now, so that
 * failing it later (under locks, on the write path) allocates nothing.
 */
static int
alloc_leg_bitmaps (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].slot >= 0 &&
        member_alloc_bitmap (v, (unsigned) v->legs[i].slot) == -1)
      return -1;
  return 0;
}

/* Read back every uptodate leg's superblock: each must carry its own
 * leg's UUID.  Two URIs reaching one storage show up here (each wrote
 * its own superblock, the last write won), also on a new volume.
 */
static int
check_identities (struct volume *v, uint16_t legs)
{
  struct superblock sb;
  enum meta_status st;
  char err[256], a[160], b[160];
  const struct leg *o;
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    if (!(legs & (1u << i)))
      continue;
    if (metaio_read_sb (l, &sb, &st, err, sizeof err) == -1 || st != META_OK) {
      nbdkit_error ("%s: cannot read back its superblock: %s",
                    leg_name (l, a, sizeof a), err);
      return -1;
    }
    if (memcmp (sb.leg_uuid, l->uuid, 16) == 0)
      continue;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      o = slots_leg_of_uuid (v, l, sb.leg_uuid);
    }
    if (o)
      nbdkit_error ("%s and %s are the same storage reached by two URIs: "
                    "remove one of them", leg_name (l, a, sizeof a),
                    leg_name (o, b, sizeof b));
    else
      nbdkit_error ("%s: its superblock changed under us",
                    leg_name (l, a, sizeof a));
    return -1;
  }
  return 0;
}

/* Start with metadata=internal. */
static int
start_with_metadata (struct volume *v)
{
  struct elect_input in;
  struct elect_result res;
  uint16_t winners, absent = 0;

  if (start_open_and_elect (v, &in, &res) == -1)
    return -1;
  winners = apply_roles (v, &res);
  if (res.outcome == ELECT_CREATE) {
    if (create_volume (v, &res) == -1)
      return -1;
  }
  else if (adopt_volume (v, &in, &res) == -1)
    return -1;

  v->al = al_new (v);
  if (v->al == NULL || alloc_leg_bitmaps (v) == -1)
    return -1;
  negotiate (v);                /* crash recovery's largest request */
  learn_stale_al_seqs (v);
  if (res.outcome == ELECT_EXISTING &&
      (prepare_absent_slots (v, winners, &absent) == -1 ||
       recover_logs (v, winners, absent) == -1))
    return -1;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    member_set_absent (v, absent, "started");
  }
  if (metaio_persist_bitmaps (v) == -1 || write_empty_log (v, winners) == -1)
    return -1;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    if (metaio_bump (v) == -1) {
      nbdkit_error ("cannot record the new generation on any leg");
      return -1;
    }
  }
  if (check_identities (v, winners) == -1)
    return -1;
  nbdkit_debug ("volume %s generation %" PRIu64, res.outcome == ELECT_CREATE
                ? "created at" : "started at", v->sb.gen.counter);
  return 0;
}

/* Start with metadata=none: every leg must answer; leg 0 is the source. */
static int
start_without_metadata (struct volume *v)
{
  size_t i;

  if (start_open_all (v) == -1)
    return -1;
  v->size = smallest_leg (v)->caps.size & ~(uint64_t) 4095;
  for (i = 0; i < v->nr_legs; ++i) {
    v->legs[i].slot = (int) i;
    member_init_state (&v->legs[i], i == 0 ? LEG_UPTODATE : LEG_STALE);
    v->legs[i].want_full = true;
  }
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  member_set_absent (v, 0, "started without metadata");
  return 0;
}

/* Granules of the range lock: many buckets keep unrelated writes apart. */
#define RANGELOCK_BUCKETS 1024

/* Create the range lock once the chunk size is final. */
static int
init_rangelock (struct volume *v)
{
  v->rl = rangelock_new (v->cfg.chunk, RANGELOCK_BUCKETS);
  if (v->rl == NULL) {
    nbdkit_error ("rangelock: %m");
    return -1;
  }
  return 0;
}

/* Start the volume (see the design note).  No thread is left running:
 * the poller runs only while this works.
 */
int
engine_start (struct volume *v)
{
  int r;

  v->poller = poller_new (v->cfg.sched == SCHED_MODE_AUTO);
  if (v->poller == NULL || legs_start_pollers (v) == -1)
    return -1;
  r = v->metadata ? start_with_metadata (v) : start_without_metadata (v);
  if (r == 0)
    r = init_rangelock (v);
  if (r == 0) {
    negotiate (v);
    v->started = true;
  }
  legs_stop_pollers (v);
  return r;
}
