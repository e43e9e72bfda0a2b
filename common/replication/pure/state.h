/* SPDX-License-Identifier: BSD-3-Clause */
/* Leg and volume state names and the pure decisions about them. See
 * state.c.
 */

#ifndef REPLICATE_STATE_H
#define REPLICATE_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum leg_state {
  LEG_UPTODATE,
  LEG_SYNCING,
  LEG_FAILED,
  LEG_STALE,
  LEG_REMOVED,
};

/* The membership word (internal.h says what it is). */
#define MB_UPTODATE(m)  ((uint16_t) ((m) & 0xffff))
#define MB_WRITING(m)   ((uint16_t) (((m) >> 16) & 0xffff))
#define MB_ABSENT(m)    ((uint16_t) (((m) >> 32) & 0xffff))
#define MB_EPOCH(m)     ((uint16_t) ((m) >> 48))
#define MB_MAKE(up, wr, ab, ep) \
  ((uint64_t) (up) | ((uint64_t) (wr) << 16) | \
   ((uint64_t) (ab) << 32) | ((uint64_t) (uint16_t) (ep) << 48))

/* The status word of a leg state. */
extern const char *state_leg_name (enum leg_state s);

/* The volume state from the number of uptodate legs, the number of legs
 * the volume should have, and the write quorum.
 */
extern const char *state_volume_name (unsigned uptodate, unsigned total,
                                      unsigned quorum);

/* Does a leg that returned this error have to be failed? */
extern bool state_errno_fails_leg (int err);

/* Is this error a lost connection or a timeout (the leg is gone, not
 * merely refusing a request)?
 */
extern bool state_errno_is_disconnect (int err);

/* Is this error a refusal of the request itself, which the leg answered
 * without touching its data (a bad request, a read-only export, an
 * unsupported command)?
 */
extern bool state_errno_is_refusal (int err);

/* Map a leg's error to what the client is told. */
extern int state_errno_for_client (int err);

/* May a leg move from one state to another? */
extern bool state_move_allowed (enum leg_state from, enum leg_state to);

/* Does a leg in this state receive writes (uptodate or syncing)? */
extern bool state_writing (enum leg_state s);

/* The membership word (epoch 0) of legs in these states, with these
 * absent slots: uptodate = the legs in LEG_UPTODATE, writing = the legs
 * in LEG_UPTODATE or LEG_SYNCING.
 */
extern uint64_t state_membership (const enum leg_state *states,
                                    size_t nr_legs, uint16_t absent);

/* The absent slots after a leg holding slot (-1: none) moves from one
 * state to another.
 */
extern uint16_t state_absent_after_move (uint16_t absent, enum leg_state from,
                                   enum leg_state to, int slot,
                                   bool metadata);

#endif /* REPLICATE_STATE_H */
