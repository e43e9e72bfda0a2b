/* SPDX-License-Identifier: BSD-3-Clause */
/* The status of a volume as JSON (DESIGN.md section 9).
 *
 * Field names and state words are a contract: nbdrep, the metrics and
 * users' scripts read them.  Counters are read without locks (they are
 * atomics); leg states and errors under v->lock.
 */

#include <config.h>

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"
#include "state.h"
#include "leg.h"
#include "control.h"
#include "resync.h"
#include "al.h"
#include "async.h"
#include "verify.h"
#include "backup.h"
#include "random.h"
#include "cleanup.h"

/* A string or null. */
static json_t *
string_or_null (const char *s)
{
  return s && s[0] ? json_string (s) : json_null ();
}

/* A UUID as a string, or null if it is not known. */
static json_t *
uuid_or_null (const uint8_t *u)
{
  char s[37];

  if (uuid_is_zero (u))
    return json_null ();
  uuid_format (u, s);
  return json_string (s);
}

/* A relaxed read of a counter. */
static json_int_t
counter (_Atomic uint64_t *c)
{
  return (json_int_t) atomic_load_explicit (c, memory_order_relaxed);
}

/* The "resync" object of a syncing leg, or null. */
static json_t *
resync_json (struct leg *l)
{
  struct resync_progress p;

  if (l->resync == NULL || atomic_load (&l->state) != LEG_SYNCING)
    return json_null ();
  resync_get_progress (l->resync, &p);
  return json_pack ("{s:s, s:I, s:I, s:f, s:f}",
                    "kind", p.full ? "full" : "incremental",
                    "done", (json_int_t) p.done,
                    "total", (json_int_t) p.total,
                    "rate", p.rate,
                    "eta", p.eta);
}

/* The "last_resync" object, or null. */
static json_t *
last_resync_json (const struct leg *l)
{
  if (!l->last_resync.valid)
    return json_null ();
  return json_pack ("{s:s, s:I, s:I, s:f}",
                    "kind", l->last_resync.full ? "full" : "incremental",
                    "bytes", (json_int_t) l->last_resync.bytes,
                    "zeroed", (json_int_t) l->last_resync.zeroed,
                    "seconds", l->last_resync.seconds);
}

/* The state word of an asynchronous leg (DESIGN.md section 14). */
static const char *
async_state_name (struct leg *l)
{
  switch (atomic_load (&l->state)) {
  case LEG_SYNCING:
    return l->resync || l->inconsistent ? "catching-up" : "replicating";
  case LEG_STALE:
    return "behind";
  default:
    return "failed";
  }
}

/* The "async" object of an asynchronous leg, or null.  v->lock held.
 * While the leg is behind or catching up, what its bitmap says it
 * lacks counts in its lag, and it is not consistent.
 */
static json_t *
async_json (struct volume *v, struct leg *l)
{
  struct async_status st;
  struct bitmap *b;
  const char *state;
  uint64_t lag;

  if (l->aq == NULL)
    return json_null ();
  async_get_status (l->aq, &st);
  state = async_state_name (l);
  lag = st.lag_bytes;
  if (strcmp (state, "replicating") != 0 && l->slot >= 0 &&
      (b = volume_bitmap (v, (unsigned) l->slot)) != NULL)
    lag += bitmap_count (b) * (uint64_t) v->cfg.chunk;
  return json_pack ("{s:s, s:I, s:f, s:I, s:I, s:s, s:b, s:I}",
                    "state", state,
                    "lag_bytes", (json_int_t) lag,
                    "lag_seconds", st.lag_seconds,
                    "buffer_used", (json_int_t) st.buffer_used,
                    "buffer_size", (json_int_t) v->cfg.async_buffer,
                    "full", async_full_name (v->cfg.async_full),
                    "consistent", !l->inconsistent &&
                                  strcmp (state, "failed") != 0,
                    "pull_aheads", (json_int_t) st.pull_aheads);
}

/* Average latency of a leg's requests in microseconds. */
static double
latency_us (struct leg *l)
{
  uint64_t n = atomic_load_explicit (&l->stats.latency_count,
                                     memory_order_relaxed);
  uint64_t sum = atomic_load_explicit (&l->stats.latency_us_sum,
                                       memory_order_relaxed);
  return n ? (double) sum / (double) n : 0;
}

/* A leg's latency histogram: bucket upper bounds (microseconds) and
 * counts (not cumulative; the last count is above the last bound).
 */
static json_t *
latency_hist_json (struct leg *l)
{
  json_t *bounds = json_array (), *counts = json_array ();
  unsigned b;

  for (b = 0; b < LATENCY_BUCKETS; ++b)
    json_array_append_new (bounds, json_integer (latency_bounds_us[b]));
  for (b = 0; b <= LATENCY_BUCKETS; ++b)
    json_array_append_new (counts,
                           json_integer (counter (&l->stats.latency_hist[b])));
  return json_pack ("{s:o, s:o, s:I, s:I}", "bounds_us", bounds,
                    "counts", counts,
                    "sum_us", counter (&l->stats.latency_us_sum),
                    "count", counter (&l->stats.latency_count));
}

/* The running backup (backup.c), or null. */
static json_t *
backup_json (const struct backup_status *b)
{
  if (!b->running)
    return json_null ();
  return json_pack ("{s:s, s:o, s:s, s:I, s:I, s:I}", "token", b->token,
                    "leg", b->leg >= 0 ? json_integer (b->leg) : json_null (),
                    "consistency", b->point_in_time ? "point-in-time" : "live",
                    "since", (json_int_t) b->since,
                    "hold", (json_int_t) b->hold,
                    "lapses", (json_int_t) b->lapses);
}

/* How many connections a leg has now (conns_lock: a reconnect may be
 * adding them).
 */
static unsigned
leg_nr_conns (struct leg *l)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);
  return l->nr_conns;
}

/* One leg.  v->lock held. */
static json_t *
leg_json (struct volume *v, struct leg *l)
{
  char name[160];
  json_t *j;

  j = json_pack ("{s:i, s:o, s:o, s:s, s:o, s:o}",
                 "index", (int) l->index,
                 "uri", l->local ? json_string (leg_name (l, name,
                                                          sizeof name))
                                 : json_string (l->uri),
                 "uuid", uuid_or_null (l->uuid),
                 "state", state_leg_name (atomic_load (&l->state)),
                 "resync", resync_json (l),
                 "last_resync", last_resync_json (l));
  json_object_set_new (j, "reads", json_integer (counter (&l->stats.reads)));
  json_object_set_new (j, "writes", json_integer (counter (&l->stats.writes)));
  json_object_set_new (j, "errors", json_integer (counter (&l->stats.errors)));
  json_object_set_new (j, "last_error", string_or_null (l->last_error));
  json_object_set_new (j, "hold", l->held ? json_string ("backup")
                                          : json_null ());
  json_object_set_new (j, "slot", l->slot >= 0 ? json_integer (l->slot)
                                               : json_null ());
  json_object_set_new (j, "local", json_boolean (l->local));
  json_object_set_new (j, "connections", json_integer (leg_nr_conns (l)));
  json_object_set_new (j, "inflight",
                       json_integer (atomic_load (&l->inflight)));
  json_object_set_new (j, "zeroes", json_integer (counter (&l->stats.zeroes)));
  json_object_set_new (j, "flushes",
                       json_integer (counter (&l->stats.flushes)));
  json_object_set_new (j, "bytes_read",
                       json_integer (counter (&l->stats.bytes_read)));
  json_object_set_new (j, "bytes_written",
                       json_integer (counter (&l->stats.bytes_written)));
  json_object_set_new (j, "latency_us", json_real (latency_us (l)));
  json_object_set_new (j, "latency", latency_hist_json (l));
  json_object_set_new (j, "size", json_integer ((json_int_t)
                                               atomic_load (&l->shown_size)));
  json_object_set_new (j, "async", async_json (v, l));
  return j;
}

/* Uptodate legs the volume should have: the synchronous ones not
 * removed (an asynchronous leg is never uptodate).
 */
static unsigned
expected_legs (struct volume *v)
{
  unsigned n = 0;
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (atomic_load (&v->legs[i].state) != LEG_REMOVED && !v->legs[i].async)
      n++;
  return n;
}

/* The volume's generation counter (a bump changes it under
 * change_lock, which must be taken before v->lock).
 */
static uint64_t
generation_now (struct volume *v)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  return v->sb.gen.counter;
}

#define KERNEL_EXPORT_PREFIX "nbdrep-attach:"

/* A connection of a kernel device opens (see engine.h). */
void *
engine_kernel_open (struct volume *v, const char *export_name)
{
  const size_t plen = strlen (KERNEL_EXPORT_PREFIX);
  struct kernel_client *k, *slot = NULL;
  const char *device;
  size_t i;

  if (export_name == NULL ||
      strncmp (export_name, KERNEL_EXPORT_PREFIX, plen) != 0)
    return NULL;
  device = export_name + plen;
  if (*device == '\0' || strlen (device) >= sizeof v->kernel[0].device)
    return NULL;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->kernel_lock);
  for (i = 0; i < sizeof v->kernel / sizeof v->kernel[0]; ++i) {
    k = &v->kernel[i];
    if (k->connections > 0 && strcmp (k->device, device) == 0) {
      k->connections++;
      return k;
    }
    if (k->connections == 0 && slot == NULL)
      slot = k;
  }
  if (slot != NULL) {
    strcpy (slot->device, device);
    slot->connections = 1;
  }
  return slot;
}

/* A connection of a kernel device ends (see engine.h). */
void
engine_kernel_close (struct volume *v, void *handle)
{
  struct kernel_client *k = handle;

  if (k == NULL)
    return;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->kernel_lock);
  k->connections--;
}

/* The "kernel" array: the kernel devices connected now. */
static json_t *
kernel_json (struct volume *v)
{
  json_t *a = json_array ();
  size_t i;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->kernel_lock);
  for (i = 0; i < sizeof v->kernel / sizeof v->kernel[0]; ++i)
    if (v->kernel[i].connections > 0)
      json_array_append_new (a, json_pack ("{s:s, s:i}",
                                           "device", v->kernel[i].device,
                                           "connections",
                                           (int) v->kernel[i].connections));
  return a;
}

/* The "volume" object, with generation gen.  v->lock held. */
static json_t *
volume_json (struct volume *v, const struct backup_status *b, uint64_t gen)
{
  unsigned up = (unsigned) __builtin_popcount (MB_UPTODATE (membership_load (v)));
  json_t *j;

  j = json_pack ("{s:o, s:I, s:s, s:I, s:i}",
                 "uuid", v->metadata ? uuid_or_null (v->sb.volume_uuid)
                                     : json_null (),
                 "size", (json_int_t) v->size,
                 "state", state_volume_name (up, expected_legs (v), v->quorum),
                 "generation", (json_int_t) gen,
                 "quorum", (int) v->quorum);
  json_object_set_new (j, "metadata",
                       json_string (v->metadata ? "internal" : "none"));
  json_object_set_new (j, "chunk", json_integer (v->cfg.chunk));
  json_object_set_new (j, "read", json_string (read_policy_name (v->cfg.read)));
  json_object_set_new (j, "uptodate", json_integer (up));
  json_object_set_new (j, "legs", json_integer ((json_int_t) v->nr_legs));
  if (v->al)
    json_object_set_new (j, "activity_log",
                         json_pack ("{s:I, s:i, s:I}",
                                    "hot", (json_int_t) al_nr_hot (v->al),
                                    "capacity", (int) v->cfg.al_extents,
                                    "writes",
                                    (json_int_t) al_commits (v->al)));
  json_object_set_new (j, "resync_rate",
                       json_integer ((json_int_t) atomic_load (&v->resync_rate)));
  json_object_set_new (j, "resync_min_rate",
                       json_integer ((json_int_t)
                                     atomic_load (&v->resync_min_rate)));
  json_object_set_new (j, "verify_rate",
                       json_integer ((json_int_t)
                                     atomic_load (&v->verify_rate)));
  json_object_set_new (j, "verify", verify_json (v));
  json_object_set_new (j, "ublk",
                       v->frontend ? v->frontend->status (v, v->frontend_state)
                                   : json_null ());
  json_object_set_new (j, "kernel", kernel_json (v));
  json_object_set_new (j, "backup", backup_json (b));
  json_object_set_new (j, "backup_base", b->have_base ? json_string (b->base)
                                                     : json_null ());
  return j;
}

/* The whole status reply. */
json_t *
status_json (struct volume *v)
{
  json_t *legs = json_array ();
  json_t *vol;
  struct backup_status b;
  uint64_t gen;
  size_t i;

  backup_get_status (v, &b);    /* takes change_lock: before v->lock */
  gen = generation_now (v);     /* likewise */
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  vol = volume_json (v, &b, gen);
  for (i = 0; i < v->nr_legs; ++i)
    json_array_append_new (legs, leg_json (v, &v->legs[i]));
  return json_pack ("{s:b, s:o, s:o}", "ok", 1, "volume", vol, "legs", legs);
}
