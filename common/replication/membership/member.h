/* SPDX-License-Identifier: BSD-3-Clause */
/* Membership changes: the only way a leg changes state. See member.c. */

#ifndef REPLICATE_MEMBER_H
#define REPLICATE_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Make v->lock: error-checking where assertions are compiled in, so
 * that member_lock_held can tell its owner.
 */
extern void member_lock_init (struct volume *v);

/* Does this thread hold v->lock (for assertions)? */
extern bool member_lock_held (struct volume *v);

/* Set the state a leg starts in: before it is part of the volume
 * (engine_config_complete, an added leg before nr_legs counts it) or
 * while the volume starts, before any thread but the starting one can
 * look (the election's roles).
 */
extern void member_init_state (struct leg *l, enum leg_state s);

/* Move a leg to another state: the only writer of l->state once the
 * volume runs.
 */
extern void member_set_state (struct volume *v, struct leg *l, enum leg_state to,
                           const char *why);

/* Publish a new set of absent slots (a slot that belongs to no leg
 * turning absent or present; at start, every slot the election found
 * absent), the masks computed from the legs.
 */
extern void member_set_absent (struct volume *v, uint16_t absent,
                                   const char *why);

/* Take a write ticket and the membership it is valid for. */
extern uint16_t member_enter_write (struct volume *v, uint64_t *m);

/* Give the ticket back: the absent slots' bits are set. */
extern void member_leave_write (struct volume *v, uint16_t ticket);

/* The slots of a set of legs, as a mask. */
extern uint16_t member_slot_mask_of (struct volume *v, uint16_t legs);

/* Start recording a membership change: writes completing from now on
 * wait for member_change_end before they are acknowledged.
 */
extern void member_change_begin (struct volume *v);

/* The change is recorded: let waiting writes go. */
extern void member_change_end (struct volume *v);

/* Wait until no membership change is being recorded. */
extern void member_wait_changes (struct volume *v);

/* Wake the monitor thread (a leg to reconnect or resync). */
extern void member_wake_monitor (struct volume *v);

/* Allocate the bitmap of a slot (and its page sequence numbers). */
extern int member_alloc_bitmap (struct volume *v, unsigned slot);

/* An epoch that matches any connection of a leg (operator actions). */
#define EPOCH_ANY UINT_MAX

/* Mark a writing leg failed and publish the new membership. */
extern bool member_mark_failed (struct volume *v, struct leg *l,
                                unsigned epoch, const char *reason,
                                bool *was_uptodate);

/* Fail a leg: stop using it at once and record the failure before any
 * later write is acknowledged.
 */
extern void member_fail_leg (struct volume *v, struct leg *l, unsigned epoch,
                             const char *fs, ...)
  __attribute__ ((format (printf, 4, 5)));

/* Fail a leg for the operator, unless it is uptodate and fewer than
 * keep other legs are (then false, nothing changed).
 */
extern bool member_fail_leg_keeping (struct volume *v, struct leg *l,
                                     unsigned keep, const char *reason);

#endif /* REPLICATE_MEMBER_H */
