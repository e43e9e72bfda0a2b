/* SPDX-License-Identifier: BSD-3-Clause */
/* What a store holds: volumes, their backups, manifests; and the locks
 * that keep a delete's sweep from removing blocks a running backup
 * counts on.
 *
 * Listing backups lists volumes/ and each volume's backups/ (never the
 * blocks).  A backup's time is its manifest's modification time as the
 * server records it: the time the backup completed.
 *
 * Locks.  Neither S3 (as Swift implements it) nor WebDAV (as nginx
 * does) has a create-if-absent PUT, so a lock is an object of our own
 * name, locks/KIND-RANDOM.json, and mutual exclusion comes from order:
 * each side writes its lock first and lists the locks second, so of a
 * backup and a delete that overlap, at least one sees the other's lock
 * and backs off.  A lock is alive while it was written (by the server's
 * clock, compared with the server time of our own lock, so no two
 * clocks are compared) less than bs_lock_lifetime () seconds before
 * ours; its holder rewrites it after 2/5 of that, between any two of
 * its requests, so a crashed holder's lock expires by itself.  The
 * lifetime is BS_LOCK_LIFETIME, or for tests NBDREP_LOCK_LIFETIME
 * seconds (every process using the store must be given the same).
 *
 * Threads: as safe as the store's synchronous requests; a bs_lock
 * belongs to the thread that took it.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "random.h"
#include "internal.h"

/* Free a list of backups. */
void
bs_backups_free (struct bs_backups *l)
{
  size_t i;

  for (i = 0; i < l->n; ++i) {
    free (l->b[i].volume);
    free (l->b[i].name);
  }
  free (l->b);
  l->b = NULL;
  l->n = 0;
}

/* Add the backups of one volume to out. */
static int
add_volume_backups (struct bs_store *s, const char *volume,
                    struct bs_backups *out)
{
  CLEANUP_FREE char *prefix = bs_key_backups (volume);
  struct bs_list l = { 0 };
  size_t i;
  int r = 0;

  if (prefix == NULL || bs_list (s, prefix, false, &l) == -1) {
    bs_list_free (&l);
    return -1;
  }
  for (i = 0; r == 0 && i < l.n; ++i) {
    const char *n = l.e[i].name;
    size_t len = strlen (n);
    struct bs_backup *b;
    if (len <= 5 || strcmp (n + len - 5, ".json") != 0)
      continue;
    b = realloc (out->b, (out->n + 1) * sizeof *b);
    if (b == NULL) {
      r = -1;
      break;
    }
    out->b = b;
    b = &out->b[out->n];
    b->volume = strdup (volume);
    b->name = strndup (n, len - 5);
    b->mtime = l.e[i].mtime;
    out->n++;
    if (b->volume == NULL || b->name == NULL)
      r = -1;
  }
  bs_list_free (&l);
  if (r == -1)
    nbdkit_error ("out of memory");
  return r;
}

/* Order backups by volume, then time, then name. */
static int
compare_backups (const void *a, const void *b)
{
  const struct bs_backup *x = a, *y = b;
  int r = strcmp (x->volume, y->volume);

  if (r)
    return r;
  if (x->mtime != y->mtime)
    return x->mtime < y->mtime ? -1 : 1;
  return strcmp (x->name, y->name);
}

/* List backups. */
int
bs_list_backups (struct bs_store *s, const char *volume,
                 struct bs_backups *out)
{
  struct bs_list vols = { 0 };
  CLEANUP_FREE char *prefix = bs_key_volumes ();
  size_t i;
  int r = 0;

  out->b = NULL;
  out->n = 0;
  if (volume)
    r = add_volume_backups (s, volume, out);
  else if (prefix == NULL || bs_list (s, prefix, false, &vols) == -1)
    r = -1;
  for (i = 0; r == 0 && i < vols.n; ++i) {
    char *name = vols.e[i].name;
    size_t len = strlen (name);
    if (len < 2 || name[len - 1] != '/')
      continue;
    name[len - 1] = '\0';
    if (bs_valid_name (name))
      r = add_volume_backups (s, name, out);
  }
  bs_list_free (&vols);
  if (r == -1) {
    bs_backups_free (out);
    return -1;
  }
  if (out->n > 1)
    qsort (out->b, out->n, sizeof *out->b, compare_backups);
  return 0;
}

/* Load a manifest. */
struct bs_manifest *
bs_load_manifest (struct bs_store *s, const char *volume, const char *name)
{
  CLEANUP_FREE char *key = bs_key_manifest (volume, name);
  CLEANUP_FREE char *what = NULL;
  struct bs_buf body = { 0 };
  struct bs_manifest *m = NULL;
  enum bs_result r;

  if (key == NULL ||
      asprintf (&what, "%s/%s", bs_store_target (s), key) == -1) {
    what = NULL;
    nbdkit_error ("out of memory");
    return NULL;
  }
  r = bs_get (s, key, &body);
  if (r == BS_NOT_FOUND)
    nbdkit_error ("%s: no backup %s of volume %s in %s", what, name,
                  volume, bs_store_target (s));
  if (r == BS_OK) {
    m = bs_manifest_decode (body.data, body.len, what);
    if (m && (strcmp (m->name, name) != 0 ||
              strcmp (m->volume, volume) != 0)) {
      nbdkit_error ("%s: the manifest names backup %s of volume %s", what,
                    m->name, m->volume);
      bs_manifest_free (m);
      m = NULL;
    }
  }
  bs_buf_free (&body);
  return m;
}

/* Find the volume of a backup. */
char *
bs_find_volume (struct bs_store *s, const char *name, const char *volume)
{
  struct bs_backups l;
  const char *found = NULL;
  char *r = NULL;
  size_t i, n = 0;

  if (volume)
    return strdup (volume);
  if (bs_list_backups (s, NULL, &l) == -1)
    return NULL;
  for (i = 0; i < l.n; ++i)
    if (strcmp (l.b[i].name, name) == 0) {
      if (found && strcmp (found, l.b[i].volume) != 0)
        n++;
      else if (!found)
        n = 1;
      found = l.b[i].volume;
    }
  if (n == 0)
    nbdkit_error ("%s: no backup named %s", bs_store_target (s), name);
  else if (n > 1)
    nbdkit_error ("%s: backups of %zu volumes are named %s: say which "
                  "volume", bs_store_target (s), n, name);
  else if ((r = strdup (found)) == NULL)
    nbdkit_error ("out of memory");
  bs_backups_free (&l);
  return r;
}

/* ---- locks ------------------------------------------------------- */

struct bs_lock {
  struct bs_store *s;
  char *key;                    /* volumes/V/locks/KIND-ID.json */
  char *body;
  double written;               /* monotonic time of the last write */
};

/* Free a lock (not its object). */
static void
lock_free (struct bs_lock *l)
{
  free (l->key);
  free (l->body);
  free (l);
}

/* Write the lock object. */
static int
lock_write (struct bs_lock *l)
{
  if (bs_put (l->s, l->key, l->body, strlen (l->body)) != BS_OK)
    return -1;
  l->written = bs_now ();
  return 0;
}

/* How long a lock not rewritten stays alive, in seconds:
 * BS_LOCK_LIFETIME, or NBDREP_LOCK_LIFETIME (2 to BS_LOCK_LIFETIME),
 * which lets a test see a lock expire.
 */
unsigned
bs_lock_lifetime (void)
{
  const char *env = getenv ("NBDREP_LOCK_LIFETIME");
  char *end;
  unsigned long n;

  if (env == NULL || *env == '\0')
    return BS_LOCK_LIFETIME;
  n = strtoul (env, &end, 10);
  return *end == '\0' && n >= 2 && n <= BS_LOCK_LIFETIME
    ? (unsigned) n : BS_LOCK_LIFETIME;
}

/* The server time of our lock in a listing, or 0. */
static time_t
own_time (const struct bs_list *locks, const char *own)
{
  size_t i;

  for (i = 0; i < locks->n; ++i)
    if (strcmp (locks->e[i].name, own) == 0)
      return locks->e[i].mtime;
  return 0;
}

/* Is there a live lock of kind other in the listing?  Names it in
 * *which.
 */
static bool
live_lock (const struct bs_list *locks, const char *other, time_t ours,
           const struct bs_entry **which)
{
  size_t i, len = strlen (other);

  for (i = 0; i < locks->n; ++i) {
    const struct bs_entry *e = &locks->e[i];
    if (strncmp (e->name, other, len) != 0 || e->name[len] != '-')
      continue;
    if (ours == 0 || e->mtime == 0 ||
        e->mtime + (time_t) bs_lock_lifetime () >= ours) {
      *which = e;
      return true;
    }
  }
  return false;
}

/* A new lock of kind on volume, not written yet. */
static struct bs_lock *
lock_new (struct bs_store *s, const char *prefix, const char *kind)
{
  struct bs_lock *l = calloc (1, sizeof *l);
  char host[256] = "?";

  if (l == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  l->s = s;
  gethostname (host, sizeof host - 1);
  if (asprintf (&l->key, "%s%s-%016" PRIx64 ".json", prefix, kind,
                random_u64 ()) == -1)
    l->key = NULL;
  else if (asprintf (&l->body, "{\"kind\":\"%s\",\"host\":\"%s\","
                     "\"pid\":%ld}\n", kind, host, (long) getpid ()) == -1)
    l->body = NULL;
  if (l->key == NULL || l->body == NULL) {
    nbdkit_error ("out of memory");
    lock_free (l);
    return NULL;
  }
  return l;
}

/* Say which lock of kind other is in the way. */
static void
report_busy (struct bs_store *s, const char *volume, const char *prefix,
             const char *other, const struct bs_entry *e)
{
  char when[32] = "?";
  struct tm tm;

  if (e->mtime && gmtime_r (&e->mtime, &tm))
    strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  nbdkit_error ("volume %s in %s: a %s is running (lock %s%s written at "
                "%s; a lock not rewritten for %u s is ignored)", volume,
                bs_store_target (s), other, prefix, e->name, when,
                bs_lock_lifetime ());
}

/* Take a lock. */
struct bs_lock *
bs_lock_take (struct bs_store *s, const char *volume, const char *kind)
{
  const char *other = strcmp (kind, "backup") == 0 ? "delete" : "backup";
  CLEANUP_FREE char *prefix = bs_key_locks (volume);
  struct bs_list locks = { 0 };
  const struct bs_entry *e = NULL;
  struct bs_lock *l;
  bool busy;

  if (prefix == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  if ((l = lock_new (s, prefix, kind)) == NULL)
    return NULL;
  if (lock_write (l) == -1) {
    lock_free (l);
    return NULL;
  }
  if (bs_list (s, prefix, false, &locks) == -1) {
    bs_list_free (&locks);
    bs_lock_release (l);
    return NULL;
  }
  busy = live_lock (&locks, other,
                    own_time (&locks, l->key + strlen (prefix)), &e);
  if (busy)
    report_busy (s, volume, prefix, other, e);
  bs_list_free (&locks);
  if (busy) {
    bs_lock_release (l);
    return NULL;
  }
  return l;
}

/* Rewrite the lock when due. */
int
bs_lock_refresh (struct bs_lock *l)
{
  if (bs_now () - l->written < bs_lock_lifetime () * 0.4)
    return 0;
  return lock_write (l);
}

/* Remove and free the lock. */
void
bs_lock_release (struct bs_lock *l)
{
  if (l == NULL)
    return;
  bs_delete (l->s, l->key);
  lock_free (l);
}
