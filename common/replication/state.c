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
 */

#include <config.h>

#include <errno.h>

#include "internal.h"

/* The status word of a leg state. */
const char *
leg_state_name (enum leg_state s)
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

/* The volume state from the number of uptodate legs, the number of
 * legs the volume should have, and the write quorum.
 */
const char *
volume_state_name (unsigned uptodate, unsigned total, unsigned quorum)
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
errno_fails_leg (int err)
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
errno_is_disconnect (int err)
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
errno_is_refusal (int err)
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
errno_for_client (int err)
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
