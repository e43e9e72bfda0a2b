/* SPDX-License-Identifier: BSD-3-Clause */
/* Metadata slots for new members: which slot a leg that owns none may
 * get once none is free.  See slots.c.
 */

#ifndef REPLICATE_SLOTS_H
#define REPLICATE_SLOTS_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

/* Is slot s orphaned: assigned, neither a member nor the tracker's,
 * held by no leg of the volume but except (may be NULL), and every leg
 * of the volume reached (one that is not may own it)?  change_lock and
 * v->lock held.
 */
extern bool slots_orphaned (struct volume *v, int s, const struct leg *except);

/* A leg of the volume whose superblock has not been read in this run,
 * or NULL.  change_lock held.
 */
extern const struct leg *slots_unreached_leg (struct volume *v);

/* The orphaned slot a new member may be given, or -1 (none, or a leg
 * not reached yet may own one).  change_lock held.
 */
extern int slots_find_orphan (struct volume *v);

/* Give the orphaned slot slots_find_orphan names to a new member: it
 * leaves the absent slots and is cleared.  Returns it, or -1.
 * change_lock held.
 */
extern int slots_recycle_orphan (struct volume *v);

/* Free slot s for good: a generation bump records it free first, then
 * it stops being absent and its entry and bitmap are cleared.  Returns
 * 0, or -1 if the bump failed (no uptodate leg: the slot is kept).
 * change_lock held.
 */
extern int slots_release (struct volume *v, int s, const char *why);

/* The leg of the volume, other than except and not removed, whose
 * leg UUID is uuid, or NULL.  v->lock held (a leg's UUID changes under
 * it).
 */
extern struct leg *slots_leg_of_uuid (struct volume *v,
                                      const struct leg *except,
                                      const uint8_t *uuid);

/* Say in buf why no slot is free for a new member (max-legs, and a leg
 * not reached yet that keeps an orphaned slot from being given).
 * change_lock held.
 */
extern void slots_explain_none (struct volume *v, char *buf, size_t len);

#endif /* REPLICATE_SLOTS_H */
