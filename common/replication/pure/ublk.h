/* SPDX-License-Identifier: BSD-3-Clause */
/* The built-in ublk frontend: /dev/ublkbID served straight from the
 * engine (ublk=ID, ublk-queues=N, ublk-depth=N, ublk-keep=BOOL).
 *
 * ublk.c runs it (threads, rings, the kernel's control commands and
 * user recovery; its design note is the reference); ublk-map.c holds
 * its pure decisions (the device's parameters from the engine's,
 * requests to engine calls, what to do with a device that already
 * exists), unit tested by tests/unit-ublk.c.
 */

#ifndef REPLICATE_UBLK_H
#define REPLICATE_UBLK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <linux/ublk_cmd.h>

#include "engine.h"

struct volume;
struct ublk;

/* ---- running the frontend (ublk.c) ----------------------------------- */

/* The frontend, for engine_set_frontend: the plugin and the filter
 * register it.  With ublk=ID its start creates /dev/ublkbID, or takes
 * it back from a controller that died or stopped with ublk-keep=true,
 * and serves it; its stop deletes the device, or with ublk-keep=true
 * leaves it waiting for the next controller.  Without ublk= both do
 * nothing and its status is null.
 */
extern const struct engine_frontend ublk_frontend;

/* ---- pure decisions (ublk-map.c) --------------------------------------- */

/* What the engine offers, as the device's parameters are derived. */
struct ublk_engine_limits {
  uint64_t size;                /* exported size, bytes */
  uint32_t min_block, pref_block, max_block;   /* engine_block_size */
  bool trim;                    /* engine_can_trim */
};

/* The largest request the frontend asks for (ublksrv's default too):
 * bigger ones cost buffer memory for every tag and gain little.
 */
#define UBLK_MAX_IO_BYTES (512 * 1024)

/* Fill the ADD_DEV information and the SET_PARAMS parameters of a new
 * device from the engine's limits.  Returns 0, or -1 with a message.
 */
extern int ublk_map_derive (const struct ublk_engine_limits *lim,
                        unsigned id, unsigned queues, unsigned depth,
                        uint64_t stamp,
                        struct ublksrv_ctrl_dev_info *info,
                        struct ublk_params *params,
                        char *err, size_t errlen);

/* What a request asks of the engine. */
enum ublk_call_op {
  UBLK_CALL_READ, UBLK_CALL_WRITE, UBLK_CALL_FLUSH, UBLK_CALL_TRIM,
  UBLK_CALL_ZERO,
};

struct ublk_call {
  enum ublk_call_op op;
  uint64_t offset;
  uint32_t count;               /* bytes; 0 for a flush */
  uint32_t flags;               /* ENGINE_FLAG_* */
};

/* Map one request descriptor to an engine call, for a device of
 * dev_bytes bytes.  Returns 0, or a negative errno for the kernel.
 */
extern int ublk_map_request (const struct ublksrv_io_desc *iod,
                             uint64_t dev_bytes, bool trim,
                             struct ublk_call *call);

/* The result the kernel is given for a call that returned r (0 or -1
 * with err set): bytes for reads and writes, 0 for the others, or a
 * negative errno.
 */
extern int32_t ublk_map_result (const struct ublk_call *call, int r, int err);

/* What to do with device ID as found by GET_DEV_INFO. */
enum ublk_takeover {
  UBLK_ADD,             /* no such device: add it */
  UBLK_RECOVER,         /* ours, waiting for a server: recover it */
  UBLK_WAIT,            /* ours, its server is gone but the kernel has
                           not noticed yet: ask again shortly */
  UBLK_REPLACE,         /* ours, never started: delete it and add it */
  UBLK_REFUSE,          /* not ours, or served by a running process */
};

/* What the frontend knows of an existing device. */
struct ublk_found {
  const struct ublksrv_ctrl_dev_info *info;    /* NULL: no device */
  bool server_alive;            /* info->ublksrv_pid is a live process */
  uint64_t dev_bytes;           /* from GET_PARAMS */
};

/* Decide what to do with an existing device (or none) for a volume of
 * dev_bytes bytes stamped `stamp`.  UBLK_REFUSE comes with a message.
 */
extern enum ublk_takeover ublk_map_decide (const struct ublk_found *found,
                                       uint64_t stamp, uint64_t dev_bytes,
                                       char *why, size_t len);

/* The state words of the status ("ublk": {"state": ...}). */
enum ublk_state {
  UBLK_STATE_STARTING, UBLK_STATE_RECOVERING, UBLK_STATE_LIVE,
  UBLK_STATE_STOPPING, UBLK_STATE_KEPT, UBLK_STATE_DELETED,
  UBLK_STATE_FAILED,
};
extern const char *ublk_map_state_name (enum ublk_state s);

#endif /* REPLICATE_UBLK_H */
