/* SPDX-License-Identifier: BSD-3-Clause */
/* Pure decisions about states and errors (unit tested).
 *
 * Leg states and the volume state are the exact words of DESIGN.md
 * section 3; status, metrics and the tests rely on them.  The errno
 * rules decide which leg errors fail a leg (the leg is broken or gone)
 * and which are the client's own (a bad request every leg refuses
 * alike), and what the client may be told: nbdkit turns any errno it
 * does not know into EINVAL, so libnbd's ENOTCONN from a dead leg must
 * never get through.
 *
 * Leg moves: state_move_allowed is the transition table of DESIGN.md
 * section 3 as the engine uses it, and the only judge of a state
 * change (member_set_state asserts it).  state_membership and
 * state_absent_after_move are the membership word a set of leg states makes
 * (internal.h, MB_*), so the word is computed in one place.
 */

#include <config.h>

#include <errno.h>
#include <stddef.h>

#include "params.h"
#include "state.h"

/* The status word of a leg state. */
const char *
state_leg_name (enum leg_state s)
{
  switch (s) {
  case LEG_UPTODATE: return "uptodate";
  case LEG_SYNCING: return "syncing";
  case LEG_FAILED: return "failed";
  case LEG_STALE: return "stale";
  case LEG_REMOVED: return "removed";
  }
  return "unknown";
}

/* May a leg move from one state to another?  The moves the engine
 * makes (DESIGN.md section 3):
 *   failed   -> stale      a returning leg needs a resync (monitor)
 *   failed   -> uptodate   a returning leg holds the current generation
 *   stale    -> syncing    its resync starts receiving writes
 *   stale    -> failed     the resync could not start or gave up
 *   syncing  -> uptodate   the resync is done
 *   syncing  -> failed     an error, or the operator (nbdrep fail)
 *   syncing  -> stale      an asynchronous leg falls behind
 *                          (async-behind.c)
 *   uptodate -> failed     an error, or the operator
 *   uptodate -> stale      held out as a backup's source
 *   any      -> removed    the operator (nbdrep remove)
 * Nothing leaves removed, and staying put is no move.  The states a
 * leg starts in are set by member_init_state, not moved to.
 */
bool
state_move_allowed (enum leg_state from, enum leg_state to)
{
  switch (from) {
  case LEG_FAILED:
    return to == LEG_STALE || to == LEG_UPTODATE || to == LEG_REMOVED;
  case LEG_STALE:
    return to == LEG_SYNCING || to == LEG_FAILED || to == LEG_REMOVED;
  case LEG_SYNCING:
    return to == LEG_UPTODATE || to == LEG_FAILED || to == LEG_STALE ||
      to == LEG_REMOVED;
  case LEG_UPTODATE:
    return to == LEG_FAILED || to == LEG_STALE || to == LEG_REMOVED;
  case LEG_REMOVED:
    return false;
  }
  return false;
}

/* Does a leg in this state receive writes (uptodate or syncing)? */
bool
state_writing (enum leg_state s)
{
  return s == LEG_UPTODATE || s == LEG_SYNCING;
}

/* The membership word (epoch 0) of legs in these states, with these
 * absent slots: uptodate = the legs in LEG_UPTODATE, writing = the
 * legs in LEG_UPTODATE or LEG_SYNCING.
 */
uint64_t
state_membership (const enum leg_state *states, size_t nr_legs,
                    uint16_t absent)
{
  uint16_t up = 0, wr = 0;
  size_t i;

  for (i = 0; i < nr_legs && i < MAX_LEGS; ++i) {
    if (states[i] == LEG_UPTODATE)
      up |= 1u << i;
    if (state_writing (states[i]))
      wr |= 1u << i;
  }
  return MB_MAKE (up, wr, absent, 0);
}

/* The absent slots after a leg holding slot (-1: none) moves from one
 * state to another.  A leg that stops receiving writes makes its slot
 * absent (with metadata: its bitmap collects what it misses); one that
 * starts receiving them takes it out.  A move between failed and stale
 * changes nothing: the slot is absent or not as it was (a new member's
 * slot is not absent until its resync, whose bitmap is set in full,
 * publishes it present).  Nor does a removal take the slot out: it
 * stays the leg's on disk until a generation bump records it free,
 * and that bump may find no leg to write (slots.c, slots_release).
 */
uint16_t
state_absent_after_move (uint16_t absent, enum leg_state from, enum leg_state to,
                   int slot, bool metadata)
{
  uint16_t bit;

  if (slot < 0 || slot >= MAX_LEGS)
    return absent;
  bit = (uint16_t) (1u << slot);
  if (state_writing (to) && !state_writing (from))
    return absent & ~bit;
  if (metadata && state_writing (from) && !state_writing (to))
    return absent | bit;
  return absent;
}

/* The volume state from the number of uptodate legs, the number of
 * legs the volume should have, and the write quorum.
 */
const char *
state_volume_name (unsigned uptodate, unsigned total, unsigned quorum)
{
  if (uptodate == 0)
    return "failed";
  if (uptodate < quorum)
    return "readonly";
  if (uptodate < total)
    return "degraded";
  return "healthy";
}

/* Does a leg that returned this error have to be failed?  Media and
 * space errors, a lost connection and a timeout do; a refusal of the
 * request itself (EINVAL, EPERM, ENOTSUP ...) does not.
 */
bool
state_errno_fails_leg (int err)
{
  switch (err) {
  case EIO:
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
  case ENOTCONN:
  case ESHUTDOWN:
  case ECONNRESET:
  case ECONNREFUSED:
  case ECONNABORTED:
  case EPIPE:
  case ETIMEDOUT:
  case EBADF:
    return true;
  default:
    return false;
  }
}

/* Is this error a lost connection or a timeout (the leg is gone, not
 * merely refusing a request)?
 */
bool
state_errno_is_disconnect (int err)
{
  switch (err) {
  case ENOTCONN:
  case ESHUTDOWN:
  case ECONNRESET:
  case ECONNREFUSED:
  case ECONNABORTED:
  case EPIPE:
  case ETIMEDOUT:
  case EBADF:
    return true;
  default:
    return false;
  }
}

/* Is this error a refusal of the request itself, which the leg
 * answered without touching its data (a bad request, a read-only
 * export, an unsupported command)?  Only such an error may be common to
 * every leg of a write without failing any of them: after any other
 * error (EIO, ENOSPC, a lost connection ...) a leg may or may not have
 * applied the write.
 */
bool
state_errno_is_refusal (int err)
{
  switch (err) {
  case EINVAL:
  case EPERM:
  case EROFS:
  case ENOTSUP:
#if EOPNOTSUPP != ENOTSUP
  case EOPNOTSUPP:
#endif
    return true;
  default:
    return false;
  }
}

/* Map a leg's error to what the client is told. */
int
state_errno_for_client (int err)
{
  switch (err) {
  case 0:
    return 0;
  case ENOSPC:
  case EDQUOT:
  case EFBIG:
    return ENOSPC;
  case EPERM:
  case EROFS:
    return EPERM;
  case EINVAL:
  case ENOTSUP:
    return EINVAL;
  case ENOMEM:
    return ENOMEM;
  default:
    return EIO;
  }
}
