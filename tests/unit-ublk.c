/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the ublk frontend's pure decisions
 * (common/replication/pure/ublk-map.c).
 *
 * derive_cases: the engine's limits -> the device's parameters (block
 * shifts, request and discard limits, size, flags), or the message.
 * map_cases: a request descriptor -> the engine call, or the errno.
 * result_cases: an engine return -> the result the kernel is given.
 * decide_cases: what GET_DEV_INFO found -> add, recover, wait, replace
 * or refuse (with the reason).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"
#include "ublk.h"
#include "unit.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])
#define KiB 1024u
#define MiB (1024u * 1024u)
#define RECOVERY (UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE)
/* A flag newer kernels add to every device (not in the 6.1 header). */
#define UBLK_F_CMD_IOCTL_ENCODE_6_4 (UINT64_C (1) << 6)

struct derive_case {
  struct ublk_engine_limits lim;
  const char *error;            /* NULL: success with the fields below */
  unsigned logical_shift, physical_shift, opt_shift;
  uint32_t max_io, max_sectors;
  uint64_t dev_sectors;
  uint32_t granularity, max_discard, max_zeroes;
};

/* A row whose limits are refused with message msg. */
#define DERIVE_ERROR(size, min, pref, max, msg) \
  { { size, min, pref, max, true }, msg, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

static const struct derive_case derive_cases[] = {
  /* What caps.c gives for nbdkit file legs: min 1, pref 4096, 32M. */
  { { 256 * MiB, 1, 4096, 32 * MiB, true }, NULL,
    9, 12, 12, 512 * KiB, 1024, 256 * MiB / 512, 4096, 65536, 65536 },
  /* No trim: no discard, write-zeroes still. */
  { { 256 * MiB, 1, 4096, 32 * MiB, false }, NULL,
    9, 12, 12, 512 * KiB, 1024, 256 * MiB / 512, 4096, 0, 65536 },
  /* A 4096-byte minimum becomes the logical block. */
  { { 64 * MiB, 4096, 4096, 1 * MiB, true }, NULL,
    12, 12, 12, 512 * KiB, 1024, 64 * MiB / 512, 4096, 2048, 2048 },
  /* Odd minimum rounds up; the size rounds down to it. */
  { { 10 * 1000 * 1000, 1000, 4096, 32 * MiB, true }, NULL,
    10, 12, 12, 512 * KiB, 1024, 9999360 / 512, 4096, 65536, 65536 },
  /* A big preferred size: physical stays a page, optimal follows. */
  { { 256 * MiB, 512, 65536, 32 * MiB, true }, NULL,
    9, 12, 16, 512 * KiB, 1024, 256 * MiB / 512, 4096, 65536, 65536 },
  /* A small maximum caps requests, discards and zeroes. */
  { { 256 * MiB, 1, 4096, 64 * KiB, true }, NULL,
    9, 12, 12, 64 * KiB, 128, 256 * MiB / 512, 4096, 128, 128 },
  /* A maximum that is not a power of two is rounded down. */
  { { 256 * MiB, 1, 4096, 100 * KiB, true }, NULL,
    9, 12, 12, 64 * KiB, 128, 256 * MiB / 512, 4096, 128, 128 },
  /* Preferred smaller than the minimum: physical is the logical. */
  { { 256 * MiB, 2048, 1024, 32 * MiB, true }, NULL,
    11, 11, 11, 512 * KiB, 1024, 256 * MiB / 512, 2048, 65536, 65536 },
  /* Refusals. */
  DERIVE_ERROR (256 * MiB, 8192, 8192, 32 * MiB,
                "minimum block size 8192 is larger than 4096"),
  DERIVE_ERROR (256 * MiB, 1, 2048, 2048,
                "maximum block size 2048 is smaller than 4096"),
  DERIVE_ERROR (100, 512, 4096, 32 * MiB,
                "the volume (100 bytes) is smaller than one 512-byte block"),
};

/* Check one derive case. */
static void
check_derive (size_t row, const struct derive_case *t)
{
  struct ublksrv_ctrl_dev_info info;
  struct ublk_params p;
  char err[256] = "";
  int r = ublk_map_derive (&t->lim, 7, 2, 64, 0x1122334455667788, &info, &p,
                       err, sizeof err);

  if (t->error) {
    CHECKF (r == -1 && strstr (err, t->error) != NULL,
            "derive row %zu: got %d '%s', expected '%s'", row, r, err,
            t->error);
    return;
  }
  CHECKF (r == 0, "derive row %zu: failed: %s", row, err);
  if (r != 0)
    return;
  CHECKF (info.dev_id == 7 && info.nr_hw_queues == 2 &&
          info.queue_depth == 64, "derive row %zu: id/queues/depth", row);
  CHECKF (info.flags == RECOVERY, "derive row %zu: flags %" PRIx64, row,
          (uint64_t) info.flags);
  CHECKF (info.ublksrv_flags == 0x1122334455667788,
          "derive row %zu: stamp", row);
  CHECKF (info.max_io_buf_bytes == t->max_io,
          "derive row %zu: max_io %" PRIu32, row, info.max_io_buf_bytes);
  CHECKF (p.len == sizeof p &&
          p.types == (UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD),
          "derive row %zu: len/types", row);
  CHECKF (p.basic.attrs == (UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA),
          "derive row %zu: attrs %" PRIx32, row, p.basic.attrs);
  CHECKF (p.basic.logical_bs_shift == t->logical_shift,
          "derive row %zu: logical shift %u", row,
          p.basic.logical_bs_shift);
  CHECKF (p.basic.physical_bs_shift == t->physical_shift &&
          p.basic.io_min_shift == t->physical_shift,
          "derive row %zu: physical shift %u, io_min %u", row,
          p.basic.physical_bs_shift, p.basic.io_min_shift);
  CHECKF (p.basic.io_opt_shift == t->opt_shift,
          "derive row %zu: opt shift %u", row, p.basic.io_opt_shift);
  CHECKF (p.basic.max_sectors == t->max_sectors,
          "derive row %zu: max_sectors %" PRIu32, row, p.basic.max_sectors);
  CHECKF (p.basic.dev_sectors == t->dev_sectors,
          "derive row %zu: dev_sectors %" PRIu64, row,
          (uint64_t) p.basic.dev_sectors);
  CHECKF (p.discard.discard_granularity == t->granularity &&
          p.discard.max_discard_segments == 1 &&
          p.discard.discard_alignment == 0,
          "derive row %zu: discard granularity %" PRIu32, row,
          p.discard.discard_granularity);
  CHECKF (p.discard.max_discard_sectors == t->max_discard,
          "derive row %zu: max_discard %" PRIu32, row,
          p.discard.max_discard_sectors);
  CHECKF (p.discard.max_write_zeroes_sectors == t->max_zeroes,
          "derive row %zu: max_zeroes %" PRIu32, row,
          p.discard.max_write_zeroes_sectors);
}

#define DEV (64 * MiB)

struct map_case {
  uint32_t op_flags;            /* op | UBLK_IO_F_* (bits 8 and up) */
  uint64_t sector;
  uint32_t sectors;
  bool trim;
  int ret;                      /* 0 or -errno */
  enum ublk_call_op op;
  uint64_t offset;
  uint32_t count, flags;
};

/* A request refused with errno -ret. */
#define MAP_ERROR(op_flags, sector, sectors, trim, ret) \
  { op_flags, sector, sectors, trim, ret, UBLK_CALL_READ, 0, 0, 0 }

static const struct map_case map_cases[] = {
  { UBLK_IO_OP_READ, 0, 8, true, 0, UBLK_CALL_READ, 0, 4096, 0 },
  { UBLK_IO_OP_READ | UBLK_IO_F_FUA, 8, 1, true,
    0, UBLK_CALL_READ, 4096, 512, 0 },
  { UBLK_IO_OP_WRITE, 16, 1024, true, 0, UBLK_CALL_WRITE, 8192, 512 * KiB, 0 },
  { UBLK_IO_OP_WRITE | UBLK_IO_F_FUA, 0, 8, true,
    0, UBLK_CALL_WRITE, 0, 4096, ENGINE_FLAG_FUA },
  { UBLK_IO_OP_WRITE | UBLK_IO_F_META | UBLK_IO_F_FAILFAST_DEV, 0, 8,
    true, 0, UBLK_CALL_WRITE, 0, 4096, 0 },
  { UBLK_IO_OP_FLUSH, 0, 0, true, 0, UBLK_CALL_FLUSH, 0, 0, 0 },
  { UBLK_IO_OP_DISCARD, 2048, 2048, true,
    0, UBLK_CALL_TRIM, MiB, MiB, 0 },
  MAP_ERROR (UBLK_IO_OP_DISCARD, 2048, 2048, false, -EOPNOTSUPP),
  { UBLK_IO_OP_WRITE_ZEROES, 0, 65536, false,
    0, UBLK_CALL_ZERO, 0, 32 * MiB, ENGINE_FLAG_MAY_TRIM },
  { UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_NOUNMAP, 0, 8, true,
    0, UBLK_CALL_ZERO, 0, 4096, 0 },
  { UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_NOUNMAP | UBLK_IO_F_FUA, 0, 8,
    true, 0, UBLK_CALL_ZERO, 0, 4096, ENGINE_FLAG_FUA },
  /* The last sector, and past the end. */
  { UBLK_IO_OP_WRITE, DEV / 512 - 1, 1, true,
    0, UBLK_CALL_WRITE, DEV - 512, 512, 0 },
  MAP_ERROR (UBLK_IO_OP_WRITE, DEV / 512 - 1, 2, true, -EINVAL),
  MAP_ERROR (UBLK_IO_OP_READ, DEV / 512, 1, true, -EINVAL),
  MAP_ERROR (UBLK_IO_OP_READ, UINT64_MAX / 256, 1, true, -EINVAL),
  /* Empty, and longer than the engine takes. */
  MAP_ERROR (UBLK_IO_OP_READ, 0, 0, true, -EINVAL),
  MAP_ERROR (UBLK_IO_OP_WRITE, 0, UINT32_MAX, true, -EINVAL),
  /* Operations the engine has not. */
  MAP_ERROR (UBLK_IO_OP_WRITE_SAME, 0, 8, true, -EOPNOTSUPP),
  MAP_ERROR (99, 0, 8, true, -EOPNOTSUPP),
};

/* Check one map case. */
static void
check_map (size_t row, const struct map_case *t)
{
  struct ublksrv_io_desc iod = {
    .op_flags = t->op_flags, .nr_sectors = t->sectors,
    .start_sector = t->sector,
  };
  struct ublk_call call;
  int r = ublk_map_request (&iod, DEV, t->trim, &call);

  CHECKF (r == t->ret, "map row %zu: returned %d, expected %d", row, r,
          t->ret);
  if (r != 0 || t->ret != 0)
    return;
  CHECKF (call.op == t->op && call.offset == t->offset &&
          call.count == t->count && call.flags == t->flags,
          "map row %zu: op %d offset %" PRIu64 " count %" PRIu32
          " flags %" PRIu32, row, (int) call.op, call.offset, call.count,
          call.flags);
}

struct result_case {
  enum ublk_call_op op;
  uint32_t count;
  int r, err;
  int32_t expect;
};

static const struct result_case result_cases[] = {
  { UBLK_CALL_READ, 4096, 0, 0, 4096 },
  { UBLK_CALL_WRITE, 512 * KiB, 0, 0, 512 * KiB },
  { UBLK_CALL_FLUSH, 0, 0, 0, 0 },
  { UBLK_CALL_TRIM, MiB, 0, 0, 0 },
  { UBLK_CALL_ZERO, MiB, 0, 0, 0 },
  { UBLK_CALL_WRITE, 4096, -1, EIO, -EIO },
  { UBLK_CALL_WRITE, 4096, -1, ENOSPC, -ENOSPC },
  { UBLK_CALL_READ, 4096, -1, EPERM, -EPERM },
  { UBLK_CALL_FLUSH, 0, -1, 0, -EIO },
};

/* Check one result case. */
static void
check_result (size_t row, const struct result_case *t)
{
  struct ublk_call call = { .op = t->op, .count = t->count };
  int32_t r = ublk_map_result (&call, t->r, t->err);

  CHECKF (r == t->expect, "result row %zu: %" PRId32 ", expected %" PRId32,
          row, r, t->expect);
}

#define STAMP UINT64_C (0xabcdef0123456789)
#define SIZE (256 * MiB)

struct decide_case {
  bool exists;
  uint16_t state;
  uint64_t flags, stamp;
  bool alive;
  uint64_t dev_bytes;
  uint64_t our_stamp;
  enum ublk_takeover expect;
  const char *why;              /* substring of the refusal */
};

static const struct decide_case decide_cases[] = {
  { false, 0, 0, 0, false, 0, STAMP, UBLK_ADD, NULL },
  /* Ours, waiting for a server. */
  { true, UBLK_S_DEV_QUIESCED, RECOVERY | UBLK_F_CMD_IOCTL_ENCODE_6_4, STAMP,
    false, SIZE, STAMP, UBLK_RECOVER, NULL },
  /* Its pid was reused by another process: still no server. */
  { true, UBLK_S_DEV_QUIESCED, RECOVERY, STAMP, true, SIZE, STAMP,
    UBLK_RECOVER, NULL },
  { true, UBLK_S_DEV_LIVE, RECOVERY, STAMP, false, SIZE, STAMP, UBLK_WAIT,
    NULL },
  { true, UBLK_S_DEV_DEAD, RECOVERY, STAMP, false, 0, STAMP, UBLK_REPLACE,
    NULL },
  /* Without metadata (stamp 0), only the size is compared. */
  { true, UBLK_S_DEV_QUIESCED, RECOVERY, 0, false, SIZE, STAMP,
    UBLK_RECOVER, NULL },
  { true, UBLK_S_DEV_QUIESCED, RECOVERY, STAMP, false, SIZE, 0,
    UBLK_RECOVER, NULL },
  /* Refusals. */
  { true, UBLK_S_DEV_LIVE, RECOVERY, STAMP, true, SIZE, STAMP, UBLK_REFUSE,
    "is served by process" },
  { true, UBLK_S_DEV_QUIESCED, RECOVERY, STAMP + 1, false, SIZE, STAMP,
    UBLK_REFUSE, "belongs to another volume" },
  { true, UBLK_S_DEV_DEAD, RECOVERY, STAMP + 1, false, SIZE, STAMP,
    UBLK_REFUSE, "belongs to another volume" },
  { true, UBLK_S_DEV_QUIESCED, RECOVERY, STAMP, false, SIZE / 2, STAMP,
    UBLK_REFUSE, "has 134217728 bytes, the volume 268435456" },
  { true, UBLK_S_DEV_QUIESCED, UBLK_F_USER_RECOVERY, STAMP, false, SIZE,
    STAMP, UBLK_REFUSE, "without user recovery and re-issue" },
  { true, UBLK_S_DEV_LIVE, 0, 0, true, SIZE, STAMP, UBLK_REFUSE,
    "not made by a replicate controller" },
  { true, 7, RECOVERY, STAMP, false, SIZE, STAMP, UBLK_REFUSE,
    "does not know (7)" },
};

/* Check one decide case. */
static void
check_decide (size_t row, const struct decide_case *t)
{
  struct ublksrv_ctrl_dev_info info = {
    .state = t->state, .flags = t->flags, .ublksrv_flags = t->stamp,
    .ublksrv_pid = 1234,
  };
  struct ublk_found found = {
    .info = t->exists ? &info : NULL,
    .server_alive = t->alive,
    .dev_bytes = t->dev_bytes,
  };
  char why[256] = "";
  enum ublk_takeover d = ublk_map_decide (&found, t->our_stamp, SIZE, why,
                                      sizeof why);

  CHECKF (d == t->expect, "decide row %zu: %d, expected %d (%s)", row,
          (int) d, (int) t->expect, why);
  if (t->why)
    CHECKF (strstr (why, t->why) != NULL, "decide row %zu: '%s', expected "
            "'%s'", row, why, t->why);
}

/* Every state has its word. */
static void
check_state_names (void)
{
  static const char *const words[] = {
    "starting", "recovering", "live", "stopping", "kept", "deleted",
    "failed",
  };
  size_t i;

  for (i = 0; i < ARRAY_SIZE (words); i++)
    CHECKF (strcmp (ublk_map_state_name ((enum ublk_state) i), words[i]) == 0,
            "state %zu is '%s'", i, ublk_map_state_name ((enum ublk_state) i));
  CHECK (strcmp (ublk_map_state_name ((enum ublk_state) 99), "?") == 0);
}

/* Run every table. */
int
main (void)
{
  size_t i;

  for (i = 0; i < ARRAY_SIZE (derive_cases); i++)
    check_derive (i, &derive_cases[i]);
  for (i = 0; i < ARRAY_SIZE (map_cases); i++)
    check_map (i, &map_cases[i]);
  for (i = 0; i < ARRAY_SIZE (result_cases); i++)
    check_result (i, &result_cases[i]);
  for (i = 0; i < ARRAY_SIZE (decide_cases); i++)
    check_decide (i, &decide_cases[i]);
  check_state_names ();
  return unit_exit ("unit-ublk");
}
