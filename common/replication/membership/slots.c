/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata slots for new members (DESIGN.md section 5): a leg that owns
 * no slot (blank, or added back after its slot was freed) is given a
 * free one when its full resync starts (resync.c, assign_slot); when
 * none is free, the changed-block tracker's (backup.c), and then an
 * orphaned slot.
 *
 * An orphaned slot is assigned, neither a member of the generation nor
 * the tracker's, and held by no leg of the volume: the slot of a leg
 * taken off the command line, or removed before the controller ever
 * reached it (nbdrep remove frees the slot of a leg it knows, and only
 * that one).  Without recycling them, a leg lost for good after a
 * restart would keep its slot, absent and marked by every write, for
 * ever, and a volume created with max-legs equal to its legs could
 * never take the leg that replaces it.  Its leg, if it ever comes back,
 * no longer owns a slot: it is rebuilt fully as a new member instead of
 * being judged against its old generation (refused as a split brain,
 * or resynced from the bitmap).  So a slot counts as orphaned only
 * while every leg of the volume has been reached in this run (its
 * superblock read and judged: sb_read): a leg not reached yet may be
 * the slot's owner, and a leg of the volume keeps its judgement.  The
 * leg an add is examining (v->adding, not counted in nr_legs yet)
 * holds the slot it owns like any leg.  Of several orphaned slots, the
 * one absent the longest goes (the lowest bm_gen counter).
 *
 * Freeing a slot (slots_release: a removal, the tracker's or an
 * orphaned slot given away, a removed leg added back) is recorded
 * before the slot stops being tracked: until a superblock on the
 * uptodate legs says it is free, a crash leaves it its old owner's,
 * who would come back judged by it (an incremental resync from its
 * bitmap, or the tracker's changes for the next backup), so every
 * write must still mark its bitmap, and the cooler write its pages,
 * before it lets the activity log's extents go.  So the bump writes
 * the slot as free (v->slots_releasing, metaio.c) while in memory it
 * stays assigned and absent; only once that bump is recorded does it
 * leave the absent slots, its entry and bitmap cleared
 * (test-meta-slot-crash.sh; a removal: test-meta-remove-crash.sh,
 * whose leg is absent from its retirement, state.c).  If no leg can
 * take that bump (none is uptodate: the volume has failed), the slot
 * stays assigned and absent, its owner's on disk, an orphan that
 * writes keep marking: the leg, back on the command line of a later
 * start, is resynced from a bitmap that lacks nothing
 * (test-safety-remove-unrecorded.sh).
 *
 * Lock order: change_lock (the slot table, sb_read, slots_releasing)
 * -> v->lock (the legs' slots, v->adding) -> bm_write_lock (a slot's
 * entry and bitmap, as the cooler writes them).
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "member.h"
#include "metaio.h"
#include "random.h"
#include "slots.h"
#include "cleanup.h"

/* Does this thread hold change_lock (for assertions: EBUSY if anyone
 * does)?
 */
static bool
change_lock_taken (struct volume *v)
{
  return pthread_mutex_trylock (&v->change_lock) == EBUSY;
}

/* Does a leg of the volume, or the one being added, but except hold
 * slot s?  v->lock held.
 */
static bool
slot_held (struct volume *v, int s, const struct leg *except)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    const struct leg *l = &v->legs[i];
    if (l != except && atomic_load (&l->state) != LEG_REMOVED &&
        l->slot == s)
      return true;
  }
  return v->adding && v->adding != except && v->adding->slot == s;
}

/* A leg of the volume not reached in this run (see slots.h). */
const struct leg *
slots_unreached_leg (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    const struct leg *l = &v->legs[i];
    if (atomic_load (&l->state) != LEG_REMOVED && !l->sb_read)
      return l;
  }
  return NULL;
}

/* Is slot s orphaned (see slots.h)? */
bool
slots_orphaned (struct volume *v, int s, const struct leg *except)
{
  uint32_t flags = v->sb.slots[s].flags;

  assert (member_lock_held (v));
  assert (change_lock_taken (v));
  return (flags & SLOT_ASSIGNED) && !(flags & (SLOT_MEMBER | SLOT_TRACKER)) &&
    !slot_held (v, s, except) && slots_unreached_leg (v) == NULL;
}

/* The leg that carries uuid (see slots.h). */
struct leg *
slots_leg_of_uuid (struct volume *v, const struct leg *except,
                   const uint8_t *uuid)
{
  size_t i;

  assert (member_lock_held (v));
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *o = &v->legs[i];
    if (o != except && atomic_load (&o->state) != LEG_REMOVED &&
        !uuid_is_zero (o->uuid) && memcmp (o->uuid, uuid, 16) == 0)
      return o;
  }
  return NULL;
}

/* The orphaned slot absent the longest, or -1 (see slots.h). */
int
slots_find_orphan (struct volume *v)
{
  int s, best = -1;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  assert (change_lock_taken (v));
  for (s = 0; s < (int) v->cfg.max_legs; ++s)
    if (slots_orphaned (v, s, NULL) &&
        (best < 0 ||
         v->sb.slots[s].bm_gen.counter < v->sb.slots[best].bm_gen.counter))
      best = s;
  return best;
}

/* Clear slot s: its entry and its bitmap. */
static void
clear_slot (struct volume *v, int s)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->bm_write_lock);

  memset (&v->sb.slots[s], 0, sizeof v->sb.slots[s]);
  if (v->bitmaps[s])
    bitmap_clear_all (v->bitmaps[s]);
}

/* Free slot s for good (see the note and slots.h). */
int
slots_release (struct volume *v, int s, const char *why)
{
  uint16_t absent;
  int r;

  assert (change_lock_taken (v));
  v->slots_releasing |= 1u << s;
  r = metaio_bump (v);
  v->slots_releasing &= ~(1u << s);
  if (r == -1)
    return -1;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    absent = MB_ABSENT (membership_load (v));
    if (absent & (1u << s))
      member_set_absent (v, absent & ~(1u << s), why);
  }
  clear_slot (v, s);
  return 0;
}

/* Give an orphaned slot to a new member (see slots.h). */
int
slots_recycle_orphan (struct volume *v)
{
  int s = slots_find_orphan (v);
  char uuid[37];

  if (s < 0)
    return -1;
  uuid_format (v->sb.slots[s].uuid, uuid);
  if (slots_release (v, s, "an orphaned slot given to a new leg") == -1)
    return -1;
  nbdkit_debug ("slot %d (leg UUID %s, held by no leg of the volume) "
                "given to a new leg: that leg, if it comes back, is "
                "rebuilt fully", s, uuid);
  return s;
}

/* Why no slot is free (see slots.h). */
void
slots_explain_none (struct volume *v, char *buf, size_t len)
{
  const struct leg *u;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  assert (change_lock_taken (v));
  u = slots_unreached_leg (v);
  if (u == NULL)
    snprintf (buf, len, "no free metadata slot (max-legs=%u, fixed when "
              "the volume was created): remove a leg first",
              v->cfg.max_legs);
  else
    snprintf (buf, len, "no free metadata slot (max-legs=%u, fixed when "
              "the volume was created), and leg %u has not been reached "
              "since the controller started, or was refused before its "
              "superblock was read: it may own the slot of a leg gone for "
              "good (wait until it is reached, or nbdrep remove it)",
              v->cfg.max_legs, u->index);
}
