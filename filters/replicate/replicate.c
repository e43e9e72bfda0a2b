/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-replicate-filter: mirror the plugin underneath onto NBD legs.
 *
 *   nbdkit -U vol.sock --filter=replicate file /dev/sdb \
 *          replica=nbd://b:10810 control=vol.ctl
 *
 * Leg 0 is the plugin underneath ("local"), called synchronously
 * through one shared context opened in .after_fork (nbdkit's context
 * API); legs 1..N are NBD URIs.  The shared context is the engine's
 * own: client connections do not open the plugin (.open does not call
 * next), so there is one leg 0, shared like the NBD legs' connections,
 * and multi-conn holds.  If nbdkit's thread model is stricter than
 * parallel (the plugin asked for it), every call to the plugin is
 * serialised here, since the engine calls it from several threads.
 *
 * The engine starts in .after_fork: the plugin cannot be used earlier.
 * Start-up errors therefore reach syslog when nbdkit forks into the
 * background; run with -f (or --run) to see them on the terminal.
 * A filter must be built against the exact nbdkit that loads it.
 */

#include <config.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "engine.h"
#include "params.h"
#include "ublk.h"
#include "cleanup.h"

/* The volume. */
static struct volume *vol;

/* Leg 0: the engine's own context into the plugin. */
static nbdkit_next *leg0;

/* Serialises calls into the plugin if its thread model requires it. */
static pthread_mutex_t leg0_lock = PTHREAD_MUTEX_INITIALIZER;
static bool leg0_serialize;

/* Create the engine when the filter is loaded. */
static void
replicate_load (void)
{
  vol = engine_new (SHAPE_FILTER);
  if (vol)
    engine_set_frontend (vol, &ublk_frontend);
}

/* Free it when the filter is unloaded. */
static void
replicate_unload (void)
{
  engine_free (vol);
}

/* One parameter: ours, or the plugin's. */
static int
replicate_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                  const char *key, const char *value)
{
  int r;

  if (vol == NULL)
    return -1;
  r = engine_config (vol, key, value);
  if (r == 1)
    return next (nxdata, key, value);
  return r;
}

/* Cross-check our parameters, then the plugin's. */
static int
replicate_config_complete (nbdkit_next_config_complete *next,
                           nbdkit_backend *nxdata)
{
  if (engine_config_complete (vol) == -1)
    return -1;
  return next (nxdata);
}

#define replicate_config_help CONFIG_HELP

/* Note whether calls into the plugin must be serialised. */
static int
replicate_get_ready (int thread_model)
{
  leg0_serialize = thread_model != NBDKIT_THREAD_MODEL_PARALLEL;
  return 0;
}

/* Take the plugin lock when needed. */
static void
leg0_enter (void)
{
  if (leg0_serialize)
    pthread_mutex_lock (&leg0_lock);
}

/* Release it. */
static void
leg0_leave (void)
{
  if (leg0_serialize)
    pthread_mutex_unlock (&leg0_lock);
}

/* local_ops: the plugin's size. */
static int64_t
local_get_size (void *o)
{
  nbdkit_next *n = o;
  int64_t r;

  leg0_enter ();
  r = n->get_size (n);
  leg0_leave ();
  return r;
}

/* local_ops: can the plugin write? */
static int
local_can_write (void *o)
{
  nbdkit_next *n = o;
  return n->can_write (n);
}

/* local_ops: can it flush? */
static int
local_can_flush (void *o)
{
  nbdkit_next *n = o;
  return n->can_flush (n);
}

/* local_ops: FUA (nbdkit emulates it when the plugin says EMULATE). */
static int
local_can_fua (void *o)
{
  nbdkit_next *n = o;
  return n->can_fua (n) != NBDKIT_FUA_NONE;
}

/* local_ops: native write-zeroes only. */
static int
local_can_zero (void *o)
{
  nbdkit_next *n = o;
  return n->can_zero (n) == NBDKIT_ZERO_NATIVE;
}

/* local_ops: cache. */
static int
local_can_cache (void *o)
{
  nbdkit_next *n = o;
  return n->can_cache (n) != NBDKIT_CACHE_NONE;
}

/* local_ops: block status. */
static int
local_can_extents (void *o)
{
  nbdkit_next *n = o;
  return n->can_extents (n);
}

/* local_ops: block size hints. */
static int
local_block_size (void *o, uint32_t *minimum, uint32_t *preferred,
                  uint32_t *maximum)
{
  nbdkit_next *n = o;
  return n->block_size (n, minimum, preferred, maximum);
}

/* local_ops: read. */
static int
local_pread (void *o, void *buf, uint32_t count, uint64_t offset, int *err)
{
  nbdkit_next *n = o;
  int r;

  leg0_enter ();
  r = n->pread (n, buf, count, offset, 0, err);
  leg0_leave ();
  return r;
}

/* local_ops: write. */
static int
local_pwrite (void *o, const void *buf, uint32_t count, uint64_t offset,
              uint32_t flags, int *err)
{
  nbdkit_next *n = o;
  int r;

  leg0_enter ();
  r = n->pwrite (n, buf, count, offset, flags & NBDKIT_FLAG_FUA, err);
  leg0_leave ();
  return r;
}

/* local_ops: write zeroes. */
static int
local_zero (void *o, uint32_t count, uint64_t offset, uint32_t flags,
            int *err)
{
  nbdkit_next *n = o;
  int r;

  leg0_enter ();
  r = n->zero (n, count, offset,
               flags & (NBDKIT_FLAG_FUA | NBDKIT_FLAG_MAY_TRIM), err);
  leg0_leave ();
  return r;
}

/* local_ops: flush. */
static int
local_flush (void *o, int *err)
{
  nbdkit_next *n = o;
  int r;

  leg0_enter ();
  r = n->flush (n, 0, err);
  leg0_leave ();
  return r;
}

/* local_ops: cache. */
static int
local_cache (void *o, uint32_t count, uint64_t offset, int *err)
{
  nbdkit_next *n = o;
  int r;

  leg0_enter ();
  r = n->cache (n, count, offset, 0, err);
  leg0_leave ();
  return r;
}

/* local_ops: block status, passed to fn one extent at a time. */
static int
local_extents (void *o, uint32_t count, uint64_t offset, uint32_t flags,
               extent_fn fn, void *fn_opaque, int *err)
{
  nbdkit_next *n = o;
  struct nbdkit_extents *e = nbdkit_extents_new (offset, n->get_size (n));
  size_t i;
  int r;

  if (e == NULL) {
    *err = ENOMEM;
    return -1;
  }
  leg0_enter ();
  r = n->extents (n, count, offset, flags & NBDKIT_FLAG_REQ_ONE, e, err);
  leg0_leave ();
  for (i = 0; r == 0 && i < nbdkit_extents_count (e); ++i) {
    struct nbdkit_extent x = nbdkit_get_extent (e, i);
    if (fn (fn_opaque, x.offset, x.length, x.type) == -1) {
      *err = EIO;
      r = -1;
    }
  }
  nbdkit_extents_free (e);
  return r;
}

static const struct local_ops local_ops = {
  .get_size = local_get_size,
  .can_write = local_can_write,
  .can_flush = local_can_flush,
  .can_fua = local_can_fua,
  .can_zero = local_can_zero,
  .can_cache = local_can_cache,
  .can_extents = local_can_extents,
  .block_size = local_block_size,
  .pread = local_pread,
  .pwrite = local_pwrite,
  .zero = local_zero,
  .flush = local_flush,
  .cache = local_cache,
  .extents = local_extents,
  .name = "plugin",
};

/* Open leg 0, start the engine and its threads. */
static int
replicate_after_fork (nbdkit_backend *backend)
{
  leg0 = nbdkit_next_context_open (backend, 0, "", 1);
  if (leg0 == NULL) {
    nbdkit_error ("cannot open the plugin underneath");
    return -1;
  }
  if (leg0->prepare (leg0) == -1) {
    nbdkit_next_context_close (leg0);
    leg0 = NULL;
    return -1;
  }
  engine_set_local (vol, &local_ops, leg0);
  if (engine_start (vol) == -1)
    return -1;
  return engine_after_fork (vol);
}

/* A clean stop, then close leg 0. */
static void
replicate_cleanup (nbdkit_backend *backend UNUSED)
{
  engine_stop (vol);
  if (leg0) {
    leg0->finalize (leg0);
    nbdkit_next_context_close (leg0);
    leg0 = NULL;
  }
}

/* The handle of every connection but a kernel device's. */
static int plain_handle;

/* Client connections do not open the plugin: leg 0 is the engine's.
 * So every connection callback nbdkit may call must be ours (nbdkit
 * would pass them to a NULL next).  The connections of a kernel
 * device (nbdrep attach) are counted for the status.
 */
static void *
replicate_open (nbdkit_next_open *next UNUSED, nbdkit_context *context UNUSED,
                int readonly UNUSED, const char *exportname,
                int is_tls UNUSED)
{
  void *k = engine_kernel_open (vol, exportname);

  return k ? k : &plain_handle;
}

/* A connection ends. */
static void
replicate_close (void *handle)
{
  if (handle != &plain_handle)
    engine_kernel_close (vol, handle);
}

/* The exported size. */
static int64_t
replicate_get_size (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return engine_get_size (vol);
}

/* Block size hints. */
static int
replicate_block_size (nbdkit_next *next UNUSED, void *handle UNUSED,
                      uint32_t *minimum, uint32_t *preferred,
                      uint32_t *maximum)
{
  return engine_block_size (vol, minimum, preferred, maximum);
}

/* The volume's name, "nbdkit-replicate volume UUID" (the plugin's
 * description is not consulted: it is only leg 0).  nbdrep attach
 * checks it before it gives a connection to the kernel.
 */
static const char *
replicate_export_description (nbdkit_next *next UNUSED,
                              void *handle UNUSED)
{
  char label[ENGINE_LABEL_MAX];

  if (!engine_volume_label (vol, label))
    return NULL;
  return nbdkit_strdup_intern (label);
}

/* Not rotational: the legs are whatever they are, reads spread. */
static int
replicate_is_rotational (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 0;
}

/* Writable. */
static int
replicate_can_write (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return engine_can_write (vol);
}

/* Flush fans out to every leg. */
static int
replicate_can_flush (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 1;
}

/* FUA handled per leg by the engine. */
static int
replicate_can_fua (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_FUA_NATIVE;
}

/* Shared legs: multi-conn holds. */
static int
replicate_can_multi_conn (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 1;
}

/* Trim becomes write-zeroes that may punch holes. */
static int
replicate_can_trim (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return engine_can_trim (vol);
}

/* Write-zeroes. */
static int
replicate_can_zero (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_ZERO_NATIVE;
}

/* No fast zero (see the plugin). */
static int
replicate_can_fast_zero (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 0;
}

/* Block status. */
static int
replicate_can_extents (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return engine_can_extents (vol);
}

/* Cache is passed to the legs. */
static int
replicate_can_cache (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_CACHE_NATIVE;
}

/* Read. */
static int
replicate_pread (nbdkit_next *next UNUSED, void *handle UNUSED, void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags UNUSED,
                 int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_pread (vol, buf, count, offset, err);
}

/* Write. */
static int
replicate_pwrite (nbdkit_next *next UNUSED, void *handle UNUSED,
                  const void *buf, uint32_t count, uint64_t offset,
                  uint32_t flags, int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_pwrite (vol, buf, count, offset, flags, err);
}

/* Flush. */
static int
replicate_flush (nbdkit_next *next UNUSED, void *handle UNUSED,
                 uint32_t flags UNUSED, int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_flush (vol, err);
}

/* Trim. */
static int
replicate_trim (nbdkit_next *next UNUSED, void *handle UNUSED,
                uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_trim (vol, count, offset, flags, err);
}

/* Write zeroes. */
static int
replicate_zero (nbdkit_next *next UNUSED, void *handle UNUSED,
                uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_zero (vol, count, offset, flags, err);
}

/* Add one extent to nbdkit's list. */
static int
add_extent (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  return nbdkit_add_extent (opaque, offset, length, type);
}

/* Block status. */
static int
replicate_extents (nbdkit_next *next UNUSED, void *handle UNUSED,
                   uint32_t count, uint64_t offset, uint32_t flags,
                   struct nbdkit_extents *extents, int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_extents (vol, count, offset, flags, add_extent, extents,
                         err);
}

/* Cache. */
static int
replicate_cache (nbdkit_next *next UNUSED, void *handle UNUSED,
                 uint32_t count, uint64_t offset, uint32_t flags UNUSED,
                 int *err)
{
  ENGINE_CLIENT_REQUEST;
  return engine_cache (vol, count, offset, err);
}

static struct nbdkit_filter filter = {
  .name              = "replicate",
  .longname          = "nbdkit replicate filter",
  .load              = replicate_load,
  .unload            = replicate_unload,
  .config            = replicate_config,
  .config_complete   = replicate_config_complete,
  .config_help       = replicate_config_help,
  .get_ready         = replicate_get_ready,
  .after_fork        = replicate_after_fork,
  .cleanup           = replicate_cleanup,
  .open              = replicate_open,
  .close             = replicate_close,
  .get_size          = replicate_get_size,
  .export_description = replicate_export_description,
  .block_size        = replicate_block_size,
  .is_rotational     = replicate_is_rotational,
  .can_write         = replicate_can_write,
  .can_flush         = replicate_can_flush,
  .can_fua           = replicate_can_fua,
  .can_multi_conn    = replicate_can_multi_conn,
  .can_trim          = replicate_can_trim,
  .can_zero          = replicate_can_zero,
  .can_fast_zero     = replicate_can_fast_zero,
  .can_extents       = replicate_can_extents,
  .can_cache         = replicate_can_cache,
  .pread             = replicate_pread,
  .pwrite            = replicate_pwrite,
  .flush             = replicate_flush,
  .trim              = replicate_trim,
  .zero              = replicate_zero,
  .extents           = replicate_extents,
  .cache             = replicate_cache,
};

NBDKIT_REGISTER_FILTER (filter)
