/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-replicate-plugin: a replicated disk over NBD legs.
 *
 *   nbdkit -U vol.sock replicate nbd+unix:///?socket=r0.sock \
 *          nbd://b:10810 control=vol.ctl
 *
 * Thin glue: every callback hands over to the engine
 * (common/replication/engine.h).  The legs' connections belong to the
 * engine and are shared by every client connection, so there is no
 * per-connection handle, and multi-conn is advertised honestly (a flush
 * on any connection flushes every leg).
 *
 * The engine starts in .get_ready, before nbdkit forks into the
 * background, so that an unreachable leg, a split brain or a leg of
 * another volume is reported on the terminal and nbdkit exits with an
 * error; its threads start in .after_fork.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "engine.h"
#include "params.h"
#include "ublk.h"
#include "cleanup.h"

/* The volume this nbdkit serves. */
static struct volume *vol;

/* Create the engine when the plugin is loaded. */
static void
replicate_load (void)
{
  vol = engine_new (SHAPE_PLUGIN);
  if (vol)
    engine_set_frontend (vol, &ublk_frontend);
}

/* Free it when the plugin is unloaded. */
static void
replicate_unload (void)
{
  engine_free (vol);
}

/* One parameter; bare URIs arrive as replica=URI. */
static int
replicate_config (const char *key, const char *value)
{
  int r;

  if (vol == NULL)
    return -1;
  r = engine_config (vol, key, value);
  if (r == 1) {
    nbdkit_error ("unknown parameter '%s'", key);
    return -1;
  }
  return r;
}

/* Cross-check the parameters. */
static int
replicate_config_complete (void)
{
  return engine_config_complete (vol);
}

#define replicate_config_help CONFIG_HELP

/* Print one --dump-plugin line. */
static void
print_dump_line (const char *key, const char *value)
{
  printf ("replicate_%s=%s\n", key, value);
}

/* Extra --dump-plugin information. */
static void
replicate_dump_plugin (void)
{
  engine_dump (print_dump_line);
}

/* Connect to the legs, elect, recover (errors still reach stderr). */
static int
replicate_get_ready (void)
{
  return engine_start (vol);
}

/* Start the engine's threads. */
static int
replicate_after_fork (void)
{
  return engine_after_fork (vol);
}

/* A clean stop: flush, empty the activity log, disconnect. */
static void
replicate_cleanup (void)
{
  engine_stop (vol);
}

/* No per-connection state, except for the connections of a kernel
 * device (nbdrep attach), which the status counts.
 */
static void *
replicate_open (int readonly UNUSED)
{
  void *k = engine_kernel_open (vol, nbdkit_export_name ());

  return k ? k : NBDKIT_HANDLE_NOT_NEEDED;
}

/* A connection ends. */
static void
replicate_close (void *handle)
{
  if (handle != NBDKIT_HANDLE_NOT_NEEDED)
    engine_kernel_close (vol, handle);
}

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

/* The exported size. */
static int64_t
replicate_get_size (void *handle UNUSED)
{
  return engine_get_size (vol);
}

/* Block size hints. */
static int
replicate_block_size (void *handle UNUSED, uint32_t *minimum,
                      uint32_t *preferred, uint32_t *maximum)
{
  return engine_block_size (vol, minimum, preferred, maximum);
}

/* The volume's name, "nbdkit-replicate volume UUID": nbdrep attach
 * checks it before it gives a connection to the kernel.
 */
static const char *
replicate_export_description (void *handle UNUSED)
{
  char label[ENGINE_LABEL_MAX];

  if (!engine_volume_label (vol, label))
    return NULL;
  return nbdkit_strdup_intern (label);
}

/* Writable. */
static int
replicate_can_write (void *handle UNUSED)
{
  return engine_can_write (vol);
}

/* Flush fans out to every leg. */
static int
replicate_can_flush (void *handle UNUSED)
{
  return 1;
}

/* FUA: native where a leg has it, a flush of that leg where not. */
static int
replicate_can_fua (void *handle UNUSED)
{
  return NBDKIT_FUA_NATIVE;
}

/* Shared leg connections: a flush on any client connection covers them
 * all.
 */
static int
replicate_can_multi_conn (void *handle UNUSED)
{
  return 1;
}

/* Trim becomes write-zeroes that may punch holes. */
static int
replicate_can_trim (void *handle UNUSED)
{
  return engine_can_trim (vol);
}

/* Write-zeroes. */
static int
replicate_can_zero (void *handle UNUSED)
{
  return 1;
}

/* Fast zero is not advertised: one leg refusing it would leave the
 * others zeroed and itself not.
 */
static int
replicate_can_fast_zero (void *handle UNUSED)
{
  return 0;
}

/* Block status from an uptodate leg. */
static int
replicate_can_extents (void *handle UNUSED)
{
  return engine_can_extents (vol);
}

/* Cache is passed to the legs. */
static int
replicate_can_cache (void *handle UNUSED)
{
  return NBDKIT_CACHE_NATIVE;
}

/* Read. */
static int
replicate_pread (void *handle UNUSED, void *buf, uint32_t count,
                 uint64_t offset, uint32_t flags UNUSED)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_pread (vol, buf, count, offset, &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* Write. */
static int
replicate_pwrite (void *handle UNUSED, const void *buf, uint32_t count,
                  uint64_t offset, uint32_t flags)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_pwrite (vol, buf, count, offset, flags, &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* Flush. */
static int
replicate_flush (void *handle UNUSED, uint32_t flags UNUSED)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_flush (vol, &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* Trim. */
static int
replicate_trim (void *handle UNUSED, uint32_t count, uint64_t offset,
                uint32_t flags)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_trim (vol, count, offset, flags, &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* Write zeroes. */
static int
replicate_zero (void *handle UNUSED, uint32_t count, uint64_t offset,
                uint32_t flags)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_zero (vol, count, offset, flags, &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* Add one extent to nbdkit's list. */
static int
add_extent (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  return nbdkit_add_extent (opaque, offset, length, type);
}

/* Block status. */
static int
replicate_extents (void *handle UNUSED, uint32_t count, uint64_t offset,
                   uint32_t flags, struct nbdkit_extents *extents)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_extents (vol, count, offset, flags, add_extent, extents,
                      &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* Cache (prefetch). */
static int
replicate_cache (void *handle UNUSED, uint32_t count, uint64_t offset,
                 uint32_t flags UNUSED)
{
  ENGINE_CLIENT_REQUEST;
  int err;

  if (engine_cache (vol, count, offset, &err) == -1) {
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

static struct nbdkit_plugin plugin = {
  .name              = "replicate",
  .longname          = "nbdkit replicated disk",
  .version           = PACKAGE_VERSION,
  .description       = "A disk mirrored onto several NBD servers",
  .load              = replicate_load,
  .unload            = replicate_unload,
  .config            = replicate_config,
  .config_complete   = replicate_config_complete,
  .config_help       = replicate_config_help,
  .magic_config_key  = "replica",
  .dump_plugin       = replicate_dump_plugin,
  .get_ready         = replicate_get_ready,
  .after_fork        = replicate_after_fork,
  .cleanup           = replicate_cleanup,
  .open              = replicate_open,
  .close             = replicate_close,
  .get_size          = replicate_get_size,
  .block_size        = replicate_block_size,
  .export_description = replicate_export_description,
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
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)
