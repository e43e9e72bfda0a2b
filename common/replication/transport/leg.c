/* SPDX-License-Identifier: BSD-3-Clause */
/* A leg: one replica, reached over NBD (a set of libnbd connections)
 * or, in the filter, the plugin underneath (local_ops).
 *
 * The issue window: a worker that wants to send a command to a leg
 * calls leg_enter, which increments `users` and then checks `open`;
 * leg_close clears `open` and then waits for `users` to drop to zero
 * (sequentially consistent atomics on both sides, so either the worker
 * sees the leg closed or leg_close sees the worker).  After that no new
 * command can reach the handles, and once every connection's inflight
 * count is zero (callbacks have all run) the handles can be closed.
 * A failed leg is reconnected only after this, so no late reply can
 * land in a buffer nbdkit has reused.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libnbd.h>

#include "internal.h"
#include "leg.h"
#include "caps.h"
#include "conn.h"
#include "poller.h"
#include "cleanup.h"

/* -D replicate.leg_open_pause=MS: opening an NBD leg waits MS
 * milliseconds once its capabilities are read from the first
 * connection, the window in which status must not read them.  For
 * tests only (test-status-reconnect.sh).
 */
int replicate_debug_leg_open_pause = 0;     /* exported by the .syms */

/* A name for messages: "leg 1 (nbd+unix:///?socket=/r1.sock)". */
const char *
leg_name (const struct leg *l, char *buf, size_t len)
{
  if (l->local)
    snprintf (buf, len, "leg %u (local %s)", l->index,
              l->v->local_ops->name);
  else
    snprintf (buf, len, "leg %u (%s)", l->index, l->uri);
  return buf;
}

/* Remember the last error of a leg for status.  Takes v->lock. */
void
leg_set_error (struct leg *l, const char *fs, ...)
{
  va_list ap;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->v->lock);

  va_start (ap, fs);
  vsnprintf (l->last_error, sizeof l->last_error, fs, ap);
  va_end (ap);
}

/* A block size reported by libnbd, 0 when unknown. */
static uint32_t
block_size_of (struct nbd_handle *nbd, int which)
{
  int64_t r = nbd_get_block_size (nbd, which);
  return r > 0 && r <= UINT32_MAX ? (uint32_t) r : 0;
}

/* Read what an NBD leg's server can do from its first connection. */
static int
read_nbd_caps (struct leg *l, struct nbd_handle *nbd, char *err,
               size_t errlen)
{
  struct leg_caps *c = &l->caps;
  int64_t size = nbd_get_size (nbd);

  if (size < 0) {
    snprintf (err, errlen, "%s", nbd_get_error ());
    return -1;
  }
  c->size = (uint64_t) size;
  c->can_write = nbd_is_read_only (nbd) == 0;
  c->can_flush = nbd_can_flush (nbd) == 1;
  c->can_fua = nbd_can_fua (nbd) == 1;
  c->can_zero = nbd_can_zero (nbd) == 1;
  c->can_cache = nbd_can_cache (nbd) == 1;
  c->can_extents =
    nbd_can_meta_context (nbd, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
  c->can_multi_conn = nbd_can_multi_conn (nbd) == 1;
  c->min_block = block_size_of (nbd, LIBNBD_SIZE_MINIMUM);
  c->pref_block = block_size_of (nbd, LIBNBD_SIZE_PREFERRED);
  c->max_block = block_size_of (nbd, LIBNBD_SIZE_MAXIMUM);
  return 0;
}

/* Read what the local leg (the plugin underneath) can do. */
static int
read_local_caps (struct leg *l, char *err, size_t errlen)
{
  const struct local_ops *ops = l->v->local_ops;
  void *o = l->v->local_opaque;
  struct leg_caps *c = &l->caps;
  int64_t size = ops->get_size (o);

  if (size < 0) {
    snprintf (err, errlen, "cannot get the size of the plugin");
    return -1;
  }
  c->size = (uint64_t) size;
  c->can_write = ops->can_write (o) == 1;
  c->can_flush = ops->can_flush (o) == 1;
  c->can_fua = ops->can_fua (o) == 1;
  c->can_zero = ops->can_zero (o) == 1;
  c->can_cache = ops->can_cache (o) == 1;
  c->can_extents = ops->can_extents (o) == 1;
  c->can_multi_conn = true;
  if (ops->block_size (o, &c->min_block, &c->pref_block,
                       &c->max_block) == -1) {
    snprintf (err, errlen, "cannot get the block size of the plugin");
    return -1;
  }
  return 0;
}

/* Connect the first connection, retrying until wait seconds have
 * passed (a replica may still be starting), but not after a refusal.
 */
static struct conn *
connect_first (struct leg *l, double wait, bool *refused,
               char *err, size_t errlen)
{
  uint64_t deadline = now_ns () + (uint64_t) (wait * 1e9);
  struct conn *c;

  for (;;) {
    double remaining = ((double) deadline - (double) now_ns ()) / 1e9;
    double attempt = l->v->cfg.timeout;

    if (remaining > 0 && remaining < attempt)
      attempt = remaining;
    c = conn_connect (l, attempt, refused, err, errlen);
    if (c != NULL || *refused || now_ns () >= deadline)
      return c;
    nanosleep (&(struct timespec) { .tv_nsec = 200000000 }, NULL);
  }
}

/* Add a connection to the leg's set. */
static void
add_conn (struct leg *l, struct conn *c)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);
  l->conns[l->nr_conns++] = c;
}

/* Open the connections of an NBD leg. */
static int
open_nbd (struct leg *l, double wait, bool *refused, char *err,
          size_t errlen)
{
  unsigned want = l->v->cfg.connections;
  struct conn *c;

  c = connect_first (l, wait, refused, err, errlen);
  if (c == NULL)
    return -1;
  add_conn (l, c);
  if (read_nbd_caps (l, c->nbd, err, errlen) == -1)
    goto fail;
  debug_pause (replicate_debug_leg_open_pause, "leg open",
               "with its capabilities read", "leg_open_pause");
  if (!l->caps.can_multi_conn)
    want = 1;
  while (l->nr_conns < want) {
    c = conn_connect (l, l->v->cfg.timeout, refused, err, errlen);
    if (c == NULL)
      goto fail;
    add_conn (l, c);
  }
  return 0;

 fail:
  leg_close (l);
  return -1;
}

/* Connect to a leg and learn its capabilities, waiting up to wait
 * seconds for it to answer.  On success the leg is open (workers may
 * enter it once its pollers run).  On failure *refused tells a TLS
 * setup that cannot work (conn_connect) from a leg that may answer
 * later.
 */
int
leg_open (struct leg *l, double wait, bool *refused, char *err,
          size_t errlen)
{
  int r;

  *refused = false;
  memset (&l->caps, 0, sizeof l->caps);
  r = l->local ? read_local_caps (l, err, errlen)
               : open_nbd (l, wait, refused, err, errlen);
  atomic_store (&l->shown_size, l->caps.size);
  if (r == -1)
    return -1;
  atomic_fetch_add (&l->epoch, 1);
  if (!l->caps.can_write) {
    snprintf (err, errlen, "the leg is read-only");
    leg_close (l);
    return -1;
  }
  /* The metadata is written in records of META_BLOCK bytes at
   * META_BLOCK-aligned distances from the leg's end: a server that
   * refuses smaller requests cannot hold it.
   */
  if (l->v->metadata && l->caps.min_block > META_BLOCK) {
    snprintf (err, errlen, "its minimum block size %" PRIu32 " is above "
              "%d, the size of the metadata records written to every leg "
              "(serve it with a minimum of at most %d)", l->caps.min_block,
              META_BLOCK, META_BLOCK);
    leg_close (l);
    return -1;
  }
  atomic_store (&l->open, true);
  return 0;
}

/* Hand every connection to the leg's poller. */
int
leg_attach (struct leg *l)
{
  unsigned i;

  for (i = 0; i < l->nr_conns; ++i)
    if (l->conns[i]->poller == NULL &&
        poller_attach (l->conns[i], leg_poller (l)) == -1)
      return -1;
  return 0;
}

/* The poller that drives the leg's connections. */
struct poller *
leg_poller (const struct leg *l)
{
  return l->own_poller ? l->own_poller : l->v->poller;
}

/* Move every connection attached elsewhere to the leg's poller.  No
 * command may be in flight on the leg.
 */
static int
rehome_conns (struct leg *l)
{
  unsigned i;

  for (i = 0; i < l->nr_conns; ++i) {
    struct conn *c = l->conns[i];

    assert (atomic_load (&c->inflight) == 0);
    if (c->poller == NULL || c->poller == leg_poller (l))
      continue;
    poller_detach (c);
    if (poller_attach (c, leg_poller (l)) == -1)
      return -1;
  }
  return 0;
}

/* Give the leg a poller of its own (see leg.h). */
int
leg_own_poller (struct leg *l)
{
  assert (l->own_poller == NULL);
  l->own_poller = poller_new_own ();
  if (l->own_poller == NULL)
    return -1;
  return rehome_conns (l);
}

/* Back to the volume's poller (see leg.h). */
int
leg_drop_own_poller (struct leg *l)
{
  struct poller *p = l->own_poller;
  int r;

  if (p == NULL)
    return 0;
  l->own_poller = NULL;
  r = rehome_conns (l);
  poller_stop (p);
  poller_free (p);
  return r;
}

/* Start the threads of the volume's poller and of the legs' own. */
int
legs_start_pollers (struct volume *v)
{
  size_t i;

  if (poller_start (v->poller) == -1)
    return -1;
  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].own_poller && poller_start (v->legs[i].own_poller) == -1)
      return -1;
  return 0;
}

/* Stop them. */
void
legs_stop_pollers (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].own_poller)
      poller_stop (v->legs[i].own_poller);
  if (v->poller)
    poller_stop (v->poller);
}

/* Enter the issue window.  Returns false if the leg is closed. */
bool
leg_enter (struct leg *l)
{
  atomic_fetch_add (&l->users, 1);
  if (atomic_load (&l->open))
    return true;
  atomic_fetch_sub (&l->users, 1);
  return false;
}

/* Leave the issue window. */
void
leg_leave (struct leg *l)
{
  atomic_fetch_sub (&l->users, 1);
}

/* Requests a connection takes before the next one is used: nbdkit
 * serves 16 requests of a connection at once by default (-t 16).
 */
#define MAX_BACKOFF 30          /* seconds between reconnections, at most */
#define CONN_SATURATION 16

/* The connection for the next request: the first one that is not
 * saturated, else the least busy.  Filling connections in order keeps
 * requests together (the server and our poller handle them in batches)
 * and adds connections only under load, instead of spreading a few
 * requests thinly over many connections and waking a server thread for
 * each.  Only inside the issue window.
 */
struct conn *
leg_pick_conn (struct leg *l)
{
  struct conn *best = NULL;
  unsigned best_n = UINT_MAX, i;

  for (i = 0; i < l->nr_conns; ++i) {
    unsigned n = atomic_load_explicit (&l->conns[i]->inflight,
                                       memory_order_relaxed);
    if (n < CONN_SATURATION)
      return l->conns[i];
    if (n < best_n) {
      best = l->conns[i];
      best_n = n;
    }
  }
  return best;
}

/* Stop sending to a leg and abort what is in flight: every pending
 * command completes soon with an error.  Any thread, any number of
 * times.
 */
void
leg_shutdown (struct leg *l)
{
  unsigned i;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);

  atomic_store (&l->open, false);
  for (i = 0; i < l->nr_conns; ++i)
    conn_shutdown (l->conns[i]);
}

/* Sleep a millisecond while waiting for other threads to let go. */
static void
pause_1ms (void)
{
  nanosleep (&(struct timespec) { .tv_nsec = 1000000 }, NULL);
}

/* Does any connection of the leg have commands in flight? */
static bool
leg_busy (struct leg *l)
{
  unsigned i;

  for (i = 0; i < l->nr_conns; ++i)
    if (atomic_load (&l->conns[i]->inflight) > 0)
      return true;
  return false;
}

/* Close a leg's connections once nobody can use them any more: wait
 * for the issue window to empty and for every callback to have run
 * (aborting the connections if commands are still in flight).
 */
void
leg_close (struct leg *l)
{
  unsigned i;

  atomic_store (&l->open, false);
  while (atomic_load (&l->users) > 0)
    pause_1ms ();
  if (leg_busy (l))
    leg_shutdown (l);
  for (i = 0; i < l->nr_conns; ++i)
    while (atomic_load (&l->conns[i]->inflight) > 0)
      pause_1ms ();
  while (l->nr_conns > 0) {
    struct conn *c;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);
      c = l->conns[--l->nr_conns];
    }
    conn_close (c);
  }
}

/* Close a leg that works, as leg_close does, but only once the
 * commands in flight have been answered, for up to GRACE seconds:
 * nbdrep remove.  No new command enters meanwhile (l->open is false),
 * so the server answers what it has and is then told goodbye.  Cutting
 * the connections while it still has several answers to send would
 * make nbdkit before 1.33.10 abort (raw_send_socket), taking the
 * removed leg's server down with the leg.  A server that answers
 * nothing within GRACE is cut off as leg_close does.
 */
void
leg_close_answered (struct leg *l, double grace)
{
  uint64_t deadline = now_ns () + (uint64_t) (grace * 1e9);

  atomic_store (&l->open, false);
  while ((atomic_load (&l->users) > 0 || leg_busy (l)) &&
         now_ns () < deadline)
    pause_1ms ();
  leg_close (l);
}

/* Schedule the next reconnection attempt of a failed leg, doubling
 * the delay.  v->lock held.
 */
void
leg_back_off_locked (struct leg *l)
{
  l->backoff = l->backoff == 0 ? 1
    : l->backoff * 2 > MAX_BACKOFF ? MAX_BACKOFF : l->backoff * 2;
  l->next_attempt_ns = now_ns () + (uint64_t) l->backoff * 1000000000;
}
