/* SPDX-License-Identifier: BSD-3-Clause */
/* The replication engine: what the nbdkit glue (plugin and filter) sees.
 *
 * One engine instance is one volume: N legs kept identical.  The glue
 * feeds it configuration (engine_config), starts it (engine_start,
 * engine_after_fork), forwards client requests (engine_pread ...) and
 * stops it (engine_stop).  Everything else (legs, metadata, resync,
 * control socket) lives behind this header.
 *
 * The engine uses only nbdkit_error, nbdkit_debug,
 * nbdkit_absolute_path, nbdkit_parse_size, nbdkit_parse_bool and
 * nbdkit_parse_uint64_t from nbdkit, so it links into unit tests with
 * those stubbed.  The filter's leg 0 (the plugin underneath) is
 * reached through struct local_ops, which the filter glue implements
 * on top of nbdkit's next/context API.
 *
 * Errors: every function returning int returns 0 on success and -1 on
 * failure.  Data functions set *err to the errno for the client (EIO,
 * ENOSPC, EPERM or the error every leg returned alike); they never let
 * libnbd's ENOTCONN or "invalid state" EINVAL through.
 */

#ifndef REPLICATE_ENGINE_H
#define REPLICATE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

struct volume;

/* Request flags, numerically equal to nbdkit's NBDKIT_FLAG_*. */
#define ENGINE_FLAG_MAY_TRIM  (1 << 0)
#define ENGINE_FLAG_FUA       (1 << 1)
#define ENGINE_FLAG_REQ_ONE   (1 << 2)

/* Extent types, numerically equal to NBDKIT_EXTENT_* and NBD_STATE_*. */
#define ENGINE_EXTENT_HOLE    (1 << 0)
#define ENGINE_EXTENT_ZERO    (1 << 1)

/* Called once per extent found by engine_extents or local_ops.extents;
 * returns -1 to stop early with an error.
 */
typedef int (*extent_fn) (void *opaque, uint64_t offset, uint64_t length,
                          uint32_t type);

/* The filter's leg 0: the plugin underneath, called synchronously.
 * Each data function returns 0 or -1 with *err set.  The engine calls
 * these from several threads at once; the glue serialises them when
 * the plugin's thread model requires it.
 */
struct local_ops {
  int64_t (*get_size) (void *opaque);
  int (*can_write) (void *opaque);
  int (*can_flush) (void *opaque);
  int (*can_fua) (void *opaque);        /* 1 if FUA is native */
  int (*can_zero) (void *opaque);
  int (*can_cache) (void *opaque);
  int (*can_extents) (void *opaque);
  int (*block_size) (void *opaque,
                     uint32_t *minimum, uint32_t *preferred,
                     uint32_t *maximum);
  int (*pread) (void *opaque, void *buf, uint32_t count, uint64_t offset,
                int *err);
  int (*pwrite) (void *opaque, const void *buf, uint32_t count,
                 uint64_t offset, uint32_t flags, int *err);
  int (*zero) (void *opaque, uint32_t count, uint64_t offset,
               uint32_t flags, int *err);
  int (*flush) (void *opaque, int *err);
  int (*cache) (void *opaque, uint32_t count, uint64_t offset, int *err);
  int (*extents) (void *opaque, uint32_t count, uint64_t offset,
                  uint32_t flags, extent_fn fn, void *fn_opaque, int *err);
  /* Human-readable name of the leg for status, e.g. "file (local)". */
  const char *name;
};

/* Which shape the engine serves. */
enum engine_shape {
  SHAPE_PLUGIN,          /* all legs are NBD URIs */
  SHAPE_FILTER,          /* leg 0 is local_ops, legs 1..N are NBD URIs */
};

/* Create an engine.  Returns NULL (after nbdkit_error) on failure. */
extern struct volume *engine_new (enum engine_shape shape);

/* Free an engine that was never started, or one that engine_stop has
 * stopped.
 */
extern void engine_free (struct volume *v);

/* Feed one key=value parameter.  Unknown keys are an error naming them.
 * In the filter, unknown keys return 1 so the glue can pass them to
 * the plugin underneath.
 */
extern int engine_config (struct volume *v, const char *key,
                          const char *value)
  __attribute__ ((__nonnull__ (1, 2, 3)));

/* Cross-check the configuration after the last parameter. */
extern int engine_config_complete (struct volume *v)
  __attribute__ ((__nonnull__));

/* Help text for the parameters, for --help. */
extern const char *engine_config_help;

/* A frontend the engine serves beside nbdkit's connections: the ublk
 * frontend (ublk=ID, ublk.h), which the plugin and the filter register.
 * The engine calls down into its own layers only; the frontend sits on
 * top of this header and aio.h, so the engine reaches it through these
 * functions: start last in engine_after_fork, once requests can be
 * served (0, or -1 after nbdkit_error; *state is what the frontend
 * keeps, even when it fails, and is given back to the others); stop
 * first in engine_stop, while requests can still be served; release in
 * engine_free; status for the "ublk" object of the status reply (the
 * volume's lock held; state NULL before start; a new reference).
 */
struct json_t;
struct engine_frontend {
  int (*start) (struct volume *v, void **state);
  void (*stop) (void *state);
  void (*release) (void *state);
  struct json_t *(*status) (struct volume *v, void *state);
};

/* Register the frontend.  Must be called before engine_after_fork. */
extern void engine_set_frontend (struct volume *v,
                                 const struct engine_frontend *f)
  __attribute__ ((__nonnull__));

/* Set the filter's leg 0.  Must be called before engine_start. */
extern void engine_set_local (struct volume *v, const struct local_ops *ops,
                              void *opaque)
  __attribute__ ((__nonnull__ (1, 2)));

/* Connect to every leg (waiting up to wait=), read their metadata,
 * elect the newest legs, recover from a crash, bump the generation.
 * Afterwards the volume can serve requests once engine_after_fork has
 * run.  It may run before nbdkit forks into the background: it leaves
 * no thread behind.
 */
extern int engine_start (struct volume *v)
  __attribute__ ((__nonnull__));

/* Start the engine's threads: connection pollers, the monitor
 * (reconnect, resync), the activity-log flusher and the control
 * socket.
 */
extern int engine_after_fork (struct volume *v)
  __attribute__ ((__nonnull__));

/* Stop everything: finish resyncs' current step, flush every leg,
 * empty the activity log (a clean stop), close connections, join
 * threads.
 */
extern void engine_stop (struct volume *v)
  __attribute__ ((__nonnull__));

/* Bracket every request of an NBD client: the shapes' data callbacks
 * open them with ENGINE_CLIENT_REQUEST (the ublk frontend's requests do
 * not pass here).  At a planned stop with clients connected, a request
 * that begins after the stop has started waits for the end of the
 * process, unanswered (handoff.c).
 */
extern int engine_client_begin (void);
extern void engine_client_end (int *unused);
#define ENGINE_CLIENT_REQUEST                                           \
  __attribute__ ((cleanup (engine_client_end), unused))                 \
  int engine_client_request_ = engine_client_begin ()

/* The volume's UUID in uuid; false without metadata (metadata=none). */
extern bool engine_volume_uuid (struct volume *v, uint8_t uuid[16])
  __attribute__ ((__nonnull__));

/* The export description that names the volume to NBD clients,
 * "nbdkit-replicate volume UUID": nbdrep attach checks it on every
 * connection before it hands the connection to the kernel.  False
 * without metadata (no UUID, no description).
 */
#define ENGINE_LABEL_MAX 64
extern bool engine_volume_label (struct volume *v,
                                 char label[ENGINE_LABEL_MAX])
  __attribute__ ((__nonnull__));

/* An NBD client connection that names itself as a connection of a
 * kernel device: export name "nbdrep-attach:DEVICE" (nbdrep attach).
 * The status counts them per device ("kernel").  engine_kernel_open
 * returns the handle to give engine_kernel_close when the connection
 * ends, or NULL if the name is not such a name.
 */
extern void *engine_kernel_open (struct volume *v, const char *export_name)
  __attribute__ ((__nonnull__ (1)));
extern void engine_kernel_close (struct volume *v, void *handle)
  __attribute__ ((__nonnull__ (1)));

/* What the client may be told at negotiation. */
extern int64_t engine_get_size (struct volume *v)
  __attribute__ ((__nonnull__));
extern int engine_can_write (struct volume *v)
  __attribute__ ((__nonnull__));
extern int engine_can_trim (struct volume *v)
  __attribute__ ((__nonnull__));
extern int engine_can_extents (struct volume *v)
  __attribute__ ((__nonnull__));
extern int engine_block_size (struct volume *v, uint32_t *minimum,
                              uint32_t *preferred, uint32_t *maximum)
  __attribute__ ((__nonnull__));

/* Data path. */
extern int engine_pread (struct volume *v, void *buf, uint32_t count,
                         uint64_t offset, int *err)
  __attribute__ ((__nonnull__));
extern int engine_pwrite (struct volume *v, const void *buf, uint32_t count,
                          uint64_t offset, uint32_t flags, int *err)
  __attribute__ ((__nonnull__));
extern int engine_zero (struct volume *v, uint32_t count, uint64_t offset,
                        uint32_t flags, int *err)
  __attribute__ ((__nonnull__ (1, 5)));
extern int engine_trim (struct volume *v, uint32_t count, uint64_t offset,
                        uint32_t flags, int *err)
  __attribute__ ((__nonnull__ (1, 5)));
extern int engine_flush (struct volume *v, int *err)
  __attribute__ ((__nonnull__));
extern int engine_cache (struct volume *v, uint32_t count, uint64_t offset,
                         int *err)
  __attribute__ ((__nonnull__ (1, 4)));
extern int engine_extents (struct volume *v, uint32_t count, uint64_t offset,
                           uint32_t flags, extent_fn fn, void *opaque,
                           int *err)
  __attribute__ ((__nonnull__ (1, 5, 7)));

/* Extra lines for --dump-plugin, written with the given printer. */
extern void engine_dump (void (*print) (const char *key, const char *value))
  __attribute__ ((__nonnull__));

#endif /* REPLICATE_ENGINE_H */
