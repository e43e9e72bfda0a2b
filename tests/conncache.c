/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-conncache-filter: a volatile write cache flushed per
 * connection, for the tests only (built with them, never installed).
 *
 *   nbdkit -U r1.sock --filter=.../nbdkit-conncache-filter.so \
 *          file file=r1.img
 *
 * It models what the NBD protocol allows a server that does not
 * advertise multi-conn: a flush (or a FUA write) on one connection need
 * not make durable what was written on another.  Writes are queued in
 * memory in arrival order, lost when the process dies (kill -9: a
 * power loss).  Reads see every queued write (the cache is coherent for
 * reads); with reads=own, a read sees the plugin and only the reading
 * connection's own queued writes, as the protocol allows too ("clients
 * must presume that separate connections can cache writes
 * independently"), and a closing connection writes its queue back.  A
 * flush on connection C writes back C's queued writes, and
 * before them every older queued write of another connection that
 * overlaps one of them (so that no block goes back in time), in queue
 * order, then flushes the plugin; a FUA write is queued, then written
 * back the same way.  Zero and trim write the whole queue back first
 * (on the safe side), then pass through.  No multi-conn, no block
 * status (all data), no cache.  Closing a connection keeps its queued
 * writes (but with reads=own).
 *
 * One mutex covers the queue; it is held while the plugin is called
 * (writes back must not interleave with new writes).  Like every
 * filter it is tied to the exact nbdkit version, and it is built
 * without the sanitizer flags (stock nbdkit replicas load it).
 */

#define UNUSED __attribute__ ((__unused__))

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

/* A queued write. */
struct entry {
  struct entry *next, *prev;
  uint64_t owner;               /* the connection that wrote it */
  uint64_t offset;
  uint32_t count;
  bool chosen;                  /* to be written back now */
  char data[];
};

/* A connection: its number, the owner of its entries. */
struct handle {
  uint64_t id;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *head, *tail;       /* oldest first */
static uint64_t last_id;
static bool reads_own;                  /* reads=own */

static int write_back (nbdkit_next *next, uint64_t owner, int *err);

/* reads=own|all. */
static int
conncache_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                  const char *key, const char *value)
{
  if (strcmp (key, "reads") != 0)
    return next (nxdata, key, value);
  if (strcmp (value, "own") != 0 && strcmp (value, "all") != 0) {
    nbdkit_error ("reads=%s: own or all", value);
    return -1;
  }
  reads_own = strcmp (value, "own") == 0;
  return 0;
}

/* Number the new connection. */
static void *
conncache_open (nbdkit_next_open *next, nbdkit_context *ctx, int readonly,
                const char *exportname, int is_tls UNUSED)
{
  struct handle *h;

  if (next (ctx, readonly, exportname) == -1)
    return NULL;
  h = calloc (1, sizeof *h);
  if (h == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  pthread_mutex_lock (&lock);
  h->id = ++last_id;
  pthread_mutex_unlock (&lock);
  return h;
}

/* With reads=own, write back the closing connection's queue (its
 * writes become visible to the others).
 */
static int
conncache_finalize (nbdkit_next *next, void *handle)
{
  struct handle *h = handle;
  int err = 0, r = 0;

  if (reads_own) {
    pthread_mutex_lock (&lock);
    r = write_back (next, h->id, &err);
    pthread_mutex_unlock (&lock);
  }
  return r;
}

/* Forget the connection (its queued writes stay, but with reads=own). */
static void
conncache_close (void *handle)
{
  free (handle);
}

/* No multi-conn, no block status. */
static int
conncache_no (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 0;
}

/* FUA is ours: a FUA write is written back with its connection's. */
static int
conncache_can_fua (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_FUA_NATIVE;
}

/* No cache requests. */
static int
conncache_can_cache (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_CACHE_NONE;
}

/* Do a and b overlap? */
static bool
overlaps (const struct entry *a, const struct entry *b)
{
  return a->offset < b->offset + b->count &&
    b->offset < a->offset + a->count;
}

/* Choose the entries of connection owner (every entry if owner is 0),
 * and every older entry that overlaps a chosen one.  lock held.
 */
static void
choose (uint64_t owner)
{
  struct entry *e, *f;

  for (e = tail; e; e = e->prev) {
    e->chosen = owner == 0 || e->owner == owner;
    for (f = e->next; f && !e->chosen; f = f->next)
      e->chosen = f->chosen && overlaps (e, f);
  }
}

/* Take e out of the queue and free it.  lock held. */
static void
unlink_entry (struct entry *e)
{
  if (e->prev)
    e->prev->next = e->next;
  else
    head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    tail = e->prev;
  free (e);
}

/* Write back what choose (owner) chooses, oldest first, then flush the
 * plugin.  lock held.
 */
static int
write_back (nbdkit_next *next, uint64_t owner, int *err)
{
  struct entry *e, *n;

  choose (owner);
  for (e = head; e; e = n) {
    n = e->next;
    if (!e->chosen)
      continue;
    if (next->pwrite (next, e->data, e->count, e->offset, 0, err) == -1)
      return -1;
    unlink_entry (e);
  }
  return next->flush (next, 0, err);
}

/* Read from the plugin, then lay the queued writes over it (with
 * reads=own, only the reading connection's).
 */
static int
conncache_pread (nbdkit_next *next, void *handle, void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  struct handle *h = handle;
  struct entry *e;
  int r;

  pthread_mutex_lock (&lock);
  r = next->pread (next, buf, count, offset, flags, err);
  for (e = head; r == 0 && e; e = e->next) {
    uint64_t from = e->offset > offset ? e->offset : offset;
    uint64_t to = e->offset + e->count < offset + count
      ? e->offset + e->count : offset + count;
    if (from < to && (!reads_own || e->owner == h->id))
      memcpy ((char *) buf + (from - offset), e->data + (from - e->offset),
              to - from);
  }
  pthread_mutex_unlock (&lock);
  return r;
}

/* Queue the write; with FUA, write back its connection's. */
static int
conncache_pwrite (nbdkit_next *next, void *handle, const void *buf,
                  uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  struct handle *h = handle;
  struct entry *e = malloc (sizeof *e + count);
  int r = 0;

  if (e == NULL) {
    *err = ENOMEM;
    return -1;
  }
  *e = (struct entry) { .owner = h->id, .offset = offset, .count = count };
  memcpy (e->data, buf, count);
  pthread_mutex_lock (&lock);
  e->prev = tail;
  if (tail)
    tail->next = e;
  else
    head = e;
  tail = e;
  if (flags & NBDKIT_FLAG_FUA)
    r = write_back (next, h->id, err);
  pthread_mutex_unlock (&lock);
  return r;
}

/* Write back this connection's queued writes. */
static int
conncache_flush (nbdkit_next *next, void *handle, uint32_t flags UNUSED,
                 int *err)
{
  struct handle *h = handle;
  int r;

  pthread_mutex_lock (&lock);
  r = write_back (next, h->id, err);
  pthread_mutex_unlock (&lock);
  return r;
}

/* Write back everything, then zero (zero: true) or trim the range. */
static int
write_back_then (nbdkit_next *next, bool zero, uint32_t count,
                 uint64_t offset, uint32_t flags, int *err)
{
  int r;

  pthread_mutex_lock (&lock);
  r = write_back (next, 0, err);
  if (r == 0)
    r = zero ? next->zero (next, count, offset, flags, err)
      : next->trim (next, count, offset, flags, err);
  pthread_mutex_unlock (&lock);
  return r;
}

/* Write back everything, then zero. */
static int
conncache_zero (nbdkit_next *next, void *handle UNUSED, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  return write_back_then (next, true, count, offset, flags, err);
}

/* Write back everything, then trim. */
static int
conncache_trim (nbdkit_next *next, void *handle UNUSED, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  return write_back_then (next, false, count, offset, flags, err);
}

static struct nbdkit_filter filter = {
  .name = "conncache",
  .longname = "volatile write cache flushed per connection (tests)",
  .config = conncache_config,
  .open = conncache_open,
  .finalize = conncache_finalize,
  .close = conncache_close,
  .can_multi_conn = conncache_no,
  .can_extents = conncache_no,
  .can_fua = conncache_can_fua,
  .can_cache = conncache_can_cache,
  .pread = conncache_pread,
  .pwrite = conncache_pwrite,
  .flush = conncache_flush,
  .zero = conncache_zero,
  .trim = conncache_trim,
};

NBDKIT_REGISTER_FILTER (filter)
