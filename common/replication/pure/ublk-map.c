/* SPDX-License-Identifier: BSD-3-Clause */
/* The ublk frontend's pure decisions (unit tested by tests/unit-ublk.c).
 *
 * Device parameters (ublk_map_derive), from engine_block_size and friends:
 *   logical block   the engine's minimum, at least 512, rounded up to a
 *                   power of two; more than 4096 is refused (ublk takes
 *                   at most a page);
 *   physical block  the preferred size rounded down to a power of two,
 *                   clamped to [logical, 4096]; also the minimum I/O and
 *                   the discard granularity;
 *   optimal I/O     the preferred size (power of two), at least physical;
 *   largest request the engine's maximum (rounded down to a power of two)
 *                   capped at UBLK_MAX_IO_BYTES: every tag owns a buffer
 *                   of that size; a maximum below 4096 is refused;
 *   size            the volume rounded down to the logical block;
 *   cache           volatile, with FUA: the legs have caches of their own
 *                   (flush and FUA are what make writes durable there),
 *                   so the kernel must send both;
 *   discard         only when the engine trims (every leg zeroes
 *                   natively); write-zeroes always; both up to the
 *                   engine's maximum block, one segment.
 *   flags           USER_RECOVERY with REISSUE (ublk.c says why), the
 *                   volume's stamp in ublksrv_flags (a field the driver
 *                   keeps for its server and returns in GET_DEV_INFO), so
 *                   a device is never taken over by another volume.
 *
 * Requests (ublk_map_request): read, write (FUA passed on), flush,
 * discard (engine_trim), write-zeroes (engine_zero, which may punch
 * holes unless the kernel said NOUNMAP); anything else, a request past
 * the end or a length the engine cannot take is refused with an errno
 * the block layer knows.
 *
 * An existing device (ublk_map_decide) is recovered only if it was made
 * with user recovery and re-issue, carries this volume's stamp (a
 * volume without metadata has none, and then only the size is
 * compared), has no live server, and has the volume's size.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"
#include "ublk.h"

/* The largest logical and physical block ublk serves (a page). */
#define UBLK_BLOCK_MAX 4096

/* Print a message into err; returns -1. */
static int
fail (char *err, size_t errlen, const char *fs, ...)
  __attribute__ ((format (printf, 3, 4)));

static int
fail (char *err, size_t errlen, const char *fs, ...)
{
  va_list args;

  va_start (args, fs);
  vsnprintf (err, errlen, fs, args);
  va_end (args);
  return -1;
}

/* The largest power of two not above x (x > 0). */
static uint32_t
pow2_floor (uint32_t x)
{
  return UINT32_C (1) << (31 - __builtin_clz (x));
}

/* The smallest power of two not below x (0 < x <= 2^31). */
static uint32_t
pow2_ceil (uint32_t x)
{
  return x <= 1 ? 1 : UINT32_C (1) << (32 - __builtin_clz (x - 1));
}

/* log2 of a power of two. */
static uint8_t
shift_of (uint32_t pow2)
{
  return (uint8_t) __builtin_ctz (pow2);
}

/* The ADD_DEV information and SET_PARAMS parameters (see the note). */
int
ublk_map_derive (const struct ublk_engine_limits *lim, unsigned id,
             unsigned queues, unsigned depth, uint64_t stamp,
             struct ublksrv_ctrl_dev_info *info, struct ublk_params *params,
             char *err, size_t errlen)
{
  uint32_t logical, physical, optimal, max_io, max_span;
  uint64_t dev_bytes;

  if (lim->min_block > UBLK_BLOCK_MAX)
    return fail (err, errlen, "the legs' minimum block size %" PRIu32
                 " is larger than %d, the most ublk serves",
                 lim->min_block, UBLK_BLOCK_MAX);
  if (lim->max_block < UBLK_BLOCK_MAX)
    return fail (err, errlen, "the legs' maximum block size %" PRIu32
                 " is smaller than %d, the least ublk needs",
                 lim->max_block, UBLK_BLOCK_MAX);
  logical = pow2_ceil (lim->min_block > 512 ? lim->min_block : 512);
  physical = lim->pref_block ? pow2_floor (lim->pref_block) : logical;
  if (physical < logical)
    physical = logical;
  if (physical > UBLK_BLOCK_MAX)
    physical = UBLK_BLOCK_MAX;
  optimal = lim->pref_block ? pow2_floor (lim->pref_block) : physical;
  if (optimal < physical)
    optimal = physical;
  max_span = pow2_floor (lim->max_block);
  max_io = max_span < UBLK_MAX_IO_BYTES ? max_span : UBLK_MAX_IO_BYTES;
  dev_bytes = lim->size / logical * logical;
  if (dev_bytes == 0)
    return fail (err, errlen, "the volume (%" PRIu64 " bytes) is smaller "
                 "than one %" PRIu32 "-byte block", lim->size, logical);

  memset (info, 0, sizeof *info);
  info->nr_hw_queues = (uint16_t) queues;
  info->queue_depth = (uint16_t) depth;
  info->max_io_buf_bytes = max_io;
  info->dev_id = id;
  info->flags = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
  info->ublksrv_flags = stamp;

  memset (params, 0, sizeof *params);
  params->len = sizeof *params;
  params->types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
  params->basic.attrs = UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
  params->basic.logical_bs_shift = shift_of (logical);
  params->basic.physical_bs_shift = shift_of (physical);
  params->basic.io_min_shift = shift_of (physical);
  params->basic.io_opt_shift = shift_of (optimal);
  params->basic.max_sectors = max_io >> 9;
  params->basic.dev_sectors = dev_bytes >> 9;
  params->discard.discard_granularity = physical;
  params->discard.max_discard_sectors = lim->trim ? max_span >> 9 : 0;
  params->discard.max_write_zeroes_sectors = max_span >> 9;
  params->discard.max_discard_segments = 1;
  return 0;
}

/* One request descriptor to an engine call (see the note). */
int
ublk_map_request (const struct ublksrv_io_desc *iod, uint64_t dev_bytes,
                  bool trim, struct ublk_call *call)
{
  /* The UBLK_IO_F_* bits are defined where they sit in op_flags (from
   * bit 8), so they are tested there, not in ublksrv_get_flags ().
   */
  uint32_t flags = iod->op_flags;
  uint64_t bytes = (uint64_t) iod->nr_sectors << 9;
  uint64_t limit = INT32_MAX;

  memset (call, 0, sizeof *call);
  switch (ublksrv_get_op (iod)) {
  case UBLK_IO_OP_FLUSH:
    call->op = UBLK_CALL_FLUSH;
    return 0;
  case UBLK_IO_OP_READ:
    call->op = UBLK_CALL_READ;
    break;
  case UBLK_IO_OP_WRITE:
    call->op = UBLK_CALL_WRITE;
    break;
  case UBLK_IO_OP_DISCARD:
    if (!trim)
      return -EOPNOTSUPP;
    call->op = UBLK_CALL_TRIM;
    limit = UINT32_MAX;
    break;
  case UBLK_IO_OP_WRITE_ZEROES:
    call->op = UBLK_CALL_ZERO;
    if (!(flags & UBLK_IO_F_NOUNMAP))
      call->flags |= ENGINE_FLAG_MAY_TRIM;
    limit = UINT32_MAX;
    break;
  default:
    return -EOPNOTSUPP;
  }
  if (call->op != UBLK_CALL_READ && (flags & UBLK_IO_F_FUA))
    call->flags |= ENGINE_FLAG_FUA;
  if (bytes == 0 || bytes > limit)
    return -EINVAL;
  if (iod->start_sector > dev_bytes >> 9 ||
      (iod->start_sector << 9) + bytes > dev_bytes)
    return -EINVAL;
  call->offset = iod->start_sector << 9;
  call->count = (uint32_t) bytes;
  return 0;
}

/* The result for the kernel (see ublk.h). */
int32_t
ublk_map_result (const struct ublk_call *call, int r, int err)
{
  if (r == -1)
    return -(err > 0 ? err : EIO);
  if (call->op == UBLK_CALL_READ || call->op == UBLK_CALL_WRITE)
    return (int32_t) call->count;
  return 0;
}

/* What to do with an existing device (see the note). */
enum ublk_takeover
ublk_map_decide (const struct ublk_found *found, uint64_t stamp,
             uint64_t dev_bytes, char *why, size_t len)
{
  const struct ublksrv_ctrl_dev_info *info = found->info;
  const uint64_t recovery = UBLK_F_USER_RECOVERY |
    UBLK_F_USER_RECOVERY_REISSUE;

  if (info == NULL)
    return UBLK_ADD;
  if ((info->flags & recovery) != recovery) {
    fail (why, len, "exists without user recovery and re-issue: it was "
          "not made by a replicate controller");
    return UBLK_REFUSE;
  }
  if (stamp != 0 && info->ublksrv_flags != 0 &&
      info->ublksrv_flags != stamp) {
    fail (why, len, "belongs to another volume (stamp %016" PRIx64
          ", this volume's is %016" PRIx64 ")",
          (uint64_t) info->ublksrv_flags, stamp);
    return UBLK_REFUSE;
  }
  switch (info->state) {
  case UBLK_S_DEV_DEAD:
    return UBLK_REPLACE;
  case UBLK_S_DEV_LIVE:
    if (found->server_alive) {
      fail (why, len, "is served by process %" PRId32,
            info->ublksrv_pid);
      return UBLK_REFUSE;
    }
    return UBLK_WAIT;
  case UBLK_S_DEV_QUIESCED:
    if (found->dev_bytes != dev_bytes) {
      fail (why, len, "has %" PRIu64 " bytes, the volume %" PRIu64,
            found->dev_bytes, dev_bytes);
      return UBLK_REFUSE;
    }
    return UBLK_RECOVER;
  default:
    fail (why, len, "is in a state this controller does not know (%u)",
          (unsigned) info->state);
    return UBLK_REFUSE;
  }
}

/* The state words of the status. */
const char *
ublk_map_state_name (enum ublk_state s)
{
  static const char *const names[] = {
    [UBLK_STATE_STARTING] = "starting",
    [UBLK_STATE_RECOVERING] = "recovering",
    [UBLK_STATE_LIVE] = "live",
    [UBLK_STATE_STOPPING] = "stopping",
    [UBLK_STATE_KEPT] = "kept",
    [UBLK_STATE_DELETED] = "deleted",
    [UBLK_STATE_FAILED] = "failed",
  };

  return (unsigned) s < sizeof names / sizeof names[0] ? names[s] : "?";
}
