/* SPDX-License-Identifier: BSD-3-Clause */
/* A volume's life: creation, parameters, threads, negotiation, stop.
 *
 * engine_new -> engine_config ... -> engine_config_complete ->
 * engine_set_local (filter) -> engine_start (start.c) ->
 * engine_after_fork -> (requests) -> engine_stop -> engine_free.
 *
 * A clean stop leaves nothing to copy at the next start: the resyncs
 * stop after their current run (their progress is on disk), every leg
 * receiving writes is flushed and the activity log is emptied.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnbd.h>

#include "internal.h"
#include "async.h"
#include "caps.h"
#include "state.h"
#include "drain.h"
#include "poller.h"
#include "leg.h"
#include "member.h"
#include "monitor.h"
#include "judge.h"
#include "params-text.h"
#include "al.h"
#include "control.h"
#include "verify.h"
#include "cleanup.h"
#include "random.h"
#include "handoff.h"

const char *engine_config_help = CONFIG_HELP;

/* nbdkit_parse_size, in the form config_use_parsers takes. */
static int
nbdkit_size (const char *str, uint64_t *r)
{
  int64_t n = nbdkit_parse_size (str);

  if (n == -1)
    return -1;
  *r = (uint64_t) n;
  return 0;
}

/* Create an engine for one volume. */
struct volume *
engine_new (enum engine_shape shape)
{
  struct volume *v = calloc (1, sizeof *v);

  if (v == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  v->shape = shape;
  config_use_parsers (nbdkit_parse_uint64_t, nbdkit_size,
                      nbdkit_parse_bool);
  config_init (&v->cfg, shape == SHAPE_FILTER);
  member_lock_init (v);
  pthread_cond_init (&v->cond, NULL);
  pthread_cond_init (&v->monitor_cond, NULL);
  pthread_mutex_init (&v->change_lock, NULL);
  pthread_mutex_init (&v->bm_write_lock, NULL);
  pthread_mutex_init (&v->kernel_lock, NULL);
  return v;
}

/* Free an engine (stopped or never started). */
void
engine_free (struct volume *v)
{
  size_t i;

  if (v == NULL)
    return;
  for (i = 0; i < v->nr_legs; ++i) {
    free (v->legs[i].sb_buf);
    free (v->legs[i].al_buf);
    free (v->legs[i].owned_uri);
    async_free (v->legs[i].aq);
    leg_drop_own_poller (&v->legs[i]);
    drain_free (&v->legs[i]);
    pthread_mutex_destroy (&v->legs[i].conns_lock);
    pthread_mutex_destroy (&v->legs[i].life_lock);
  }
  for (i = 0; i < MAX_LEGS; ++i) {
    if (v->bitmaps[i]) {
      bitmap_free (v->bitmaps[i]);
      free (v->bitmaps[i]);
    }
    free (v->bm_seq[i]);
  }
  for (i = 0; i < NR_FILE_PARAMS; ++i)
    free (v->file_params[i]);
  al_free (v->al);
  if (v->frontend)
    v->frontend->release (v->frontend_state);
  poller_free (v->poller);
  if (v->rl)
    rangelock_free (v->rl);
  pthread_mutex_destroy (&v->lock);
  pthread_cond_destroy (&v->cond);
  pthread_cond_destroy (&v->monitor_cond);
  pthread_mutex_destroy (&v->change_lock);
  pthread_mutex_destroy (&v->bm_write_lock);
  free (v);
}

/* The parameters naming files, in the order of v->file_params. */
static const char *const file_keys[] = {
  "control", "tls-certificates", "tls-psk",
};

_Static_assert (ARRAY_SIZE (file_keys) == NR_FILE_PARAMS,
                "a slot in v->file_params for each file key");

/* One key=value (see engine.h).  The files (file_keys) are made
 * absolute here, before nbdkit forks into the background and changes
 * to "/" (a repeat is passed on as given, for config_set to refuse).
 */
int
engine_config (struct volume *v, const char *key, const char *value)
{
  char err[512];
  size_t i;
  int r;

  for (i = 0; i < NR_FILE_PARAMS; ++i)
    if (strcmp (key, file_keys[i]) == 0 && value[0] != '\0' &&
        v->file_params[i] == NULL) {
      v->file_params[i] = nbdkit_absolute_path (value);
      if (v->file_params[i] == NULL)
        return -1;
      value = v->file_params[i];
    }
  r = config_set (&v->cfg, key, value, err, sizeof err);
  if (r == -1)
    nbdkit_error ("%s", err);
  return r;
}

/* Cross-check the parameters and lay out the legs. */
int
engine_config_complete (struct volume *v)
{
  char err[512];
  size_t i, nbd = 0;

  if (config_check (&v->cfg, err, sizeof err) == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  if (v->cfg.ublk_id >= 0 && v->frontend == NULL) {
    nbdkit_error ("ublk=%d: this program has no ublk frontend",
                  v->cfg.ublk_id);
    return -1;
  }
  /* Before the fork: a path we must not take is refused on the terminal. */
  if (v->cfg.control && control_check_path (v->cfg.control) == -1)
    return -1;
  drain_check_kernel ();
  v->nr_legs = config_nr_legs (&v->cfg);
  v->metadata = v->cfg.metadata == METADATA_INTERNAL;
  v->quorum = v->cfg.quorum;
  atomic_store (&v->resync_rate, v->cfg.resync_rate);
  atomic_store (&v->resync_min_rate, v->cfg.resync_min_rate);
  atomic_store (&v->verify_rate, v->cfg.verify_rate);
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    pthread_mutex_init (&l->conns_lock, NULL);
    pthread_mutex_init (&l->life_lock, NULL);
    l->v = v;
    l->index = (unsigned) i;
    l->slot = -1;
    l->local = v->cfg.local_leg0 && i == 0;
    l->uri = l->local ? NULL : v->cfg.uris[nbd++];
    member_init_state (l, LEG_FAILED);
    if ((v->cfg.async_legs & (1u << i)) && async_make_leg (v, l) == -1)
      return -1;
  }
  return 0;
}

/* Start the sender of every asynchronous leg. */
static int
start_async_senders (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].aq && async_start (v->legs[i].aq) == -1)
      return -1;
  return 0;
}

/* Stop the senders, each after flushing what it can within timeout=. */
static void
stop_async_senders (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].aq)
      async_stop (v->legs[i].aq, v->cfg.timeout);
}

/* The filter's leg 0. */
void
engine_set_local (struct volume *v, const struct local_ops *ops,
                  void *opaque)
{
  v->local_ops = ops;
  v->local_opaque = opaque;
}

/* The volume's UUID (see engine.h). */
bool
engine_volume_uuid (struct volume *v, uint8_t uuid[16])
{
  if (!v->metadata)
    return false;
  memcpy (uuid, v->sb.volume_uuid, 16);
  return true;
}

/* The export description naming the volume (see engine.h). */
bool
engine_volume_label (struct volume *v, char label[ENGINE_LABEL_MAX])
{
  char uuid[37];

  if (!v->metadata)
    return false;
  uuid_format (v->sb.volume_uuid, uuid);
  snprintf (label, ENGINE_LABEL_MAX, "nbdkit-replicate volume %s", uuid);
  return true;
}

/* Register the frontend (see engine.h). */
void
engine_set_frontend (struct volume *v, const struct engine_frontend *f)
{
  v->frontend = f;
}

/* Start the frontend and keep what it returns (status reads it). */
static int
start_frontend (struct volume *v)
{
  void *state = NULL;
  int r = v->frontend->start (v, &state);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  v->frontend_state = state;
  return r;
}

/* Start every thread of a started volume. */
int
engine_after_fork (struct volume *v)
{
  if (legs_start_pollers (v) == -1)
    return -1;
  if (start_async_senders (v) == -1)
    return -1;
  if (v->al && al_start (v->al) == -1)
    return -1;
  if (monitor_start (v) == -1)
    return -1;
  if (v->cfg.control && control_start (v) == -1)
    return -1;
  if (handoff_start (v, engine_stop) == -1)
    return -1;
  v->threads_running = true;
  /* Last: the device is served once the engine is. */
  return v->frontend ? start_frontend (v) : 0;
}

/* Empty the activity log for a clean stop: flush and cool until nothing
 * is hot (a few passes at most; give up if legs keep failing).
 */
static void
drain_activity_log (struct volume *v)
{
  int pass;

  for (pass = 0; pass < 10 && al_nr_hot (v->al) > 0; ++pass)
    al_cool (v->al);
  if (al_nr_hot (v->al) > 0)
    nbdkit_error ("clean stop: %" PRIu64 " activity-log extent(s) could "
                  "not be emptied; the next start will resync them",
                  al_nr_hot (v->al));
}

/* Stop the volume (see the design note). */
void
engine_stop (struct volume *v)
{
  size_t i;
  int err;

  handoff_stop ();
  /* First: no request may come after the activity log is emptied. */
  if (v->frontend)
    v->frontend->stop (v->frontend_state);
  if (v->cfg.control)
    control_stop (v);
  verify_shutdown (v);
  monitor_stop (v);
  async_cut_epochs (v);
  stop_async_senders (v);
  if (v->al) {
    al_stop (v->al);
    if (v->threads_running)
      drain_activity_log (v);
  }
  else if (v->threads_running)
    judge_flush_legs (v, volume_sync_legs (v, MB_WRITING (membership_load (v))),
                      &err);
  for (i = 0; i < v->nr_legs; ++i)
    leg_close (&v->legs[i]);
  legs_stop_pollers (v);
  v->threads_running = false;
}

/* The exported size. */
int64_t
engine_get_size (struct volume *v)
{
  return (int64_t) v->size;
}

/* Writes are accepted (they fail with EIO below quorum). */
int
engine_can_write (struct volume *v UNUSED)
{
  return 1;
}

/* Trim only if every leg zeroes natively (see caps.c). */
int
engine_can_trim (struct volume *v)
{
  return v->caps.trim;
}

/* Block status is always answered. */
int
engine_can_extents (struct volume *v UNUSED)
{
  return 1;
}

/* The legs' combined block sizes (see caps.c). */
int
engine_block_size (struct volume *v, uint32_t *minimum, uint32_t *preferred,
                   uint32_t *maximum)
{
  caps_block_size (&v->caps, minimum, preferred, maximum);
  return 0;
}

/* Extra --dump-plugin lines. */
void
engine_dump (void (*print) (const char *key, const char *value))
{
  struct nbd_handle *nbd = nbd_create ();
  char n[32];

  if (nbd) {
    print ("libnbd_version", nbd_get_version (nbd));
    print ("libnbd_tls", nbd_supports_tls (nbd) ? "1" : "0");
    nbd_close (nbd);
  }
  snprintf (n, sizeof n, "%d", MAX_LEGS);
  print ("max_legs", n);
  snprintf (n, sizeof n, "%d", META_VERSION);
  print ("metadata_version", n);
}
