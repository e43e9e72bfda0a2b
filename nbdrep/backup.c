/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep backup CTL TARGET: back a running volume up to a store.
 *
 * The steps, on one control connection kept open throughout (the
 * controller ends a backup whose connection closes):
 *
 *  1. status: the volume's UUID (the store groups backups by it);
 *  2. the store: a lock against deletes, and the newest backup of the
 *     volume there, whose controller token is the base we give;
 *  3. backup-begin {"base"}: the source to read (a leg held out of the
 *     volume after a flush, for a point-in-time copy, or a live leg),
 *     and the ranges written since the base, or null;
 *  4. read: the blocks overlapping the changed ranges when the
 *     controller gave them for our base (the other blocks keep the
 *     base's hashes), else every block; every KEEPALIVE_SECONDS
 *     meanwhile, backup-renew, which also tells us that the controller
 *     still runs the backup (it ends one whose hold was not renewed
 *     for as long as its begin said: 120 s by default);
 *  5. each block read is hashed; an all-zero block is recorded and not
 *     stored; a block whose hash the store has (the base's map, this
 *     run, or a HEAD that finds it; --full trusts no base) is not sent
 *     again; the others are compressed and PUT;
 *  6. backup-end "done" once every block is stored: the controller
 *     confirms it held the source until then (if it did not, the copy
 *     may mix two points in time: backup-end fails, and so does the
 *     backup), and records the base;
 *  7. the manifest, last and whole (bs_put_atomic): without it the
 *     backup does not exist.  If it cannot be written after step 6,
 *     the controller's base has moved on and the next backup reads
 *     everything, which is safe.
 *
 * Any failure ends the backup with backup-end "failed" and writes no
 * manifest; blocks already stored stay (the next backup reuses them,
 * or backup-delete's sweep removes them).
 *
 * Threads: readers (backup-read.c, one libnbd connection each) read,
 * hash and compress, and hand jobs over a bounded queue to the main
 * thread (its transfers: backup-send.c),
 * which owns the curl multi handle (HEADs and PUTs in flight), the
 * manifest, the progress display and the control connection.  The
 * hash set of blocks known to be stored or on their way is shared
 * under the lock, so that identical blocks are sent once.  The lock
 * guards the queue, the reader count, the failure flag, the rate cap
 * and the hash set; it is never held while waiting for I/O, and
 * bs_multi_wakeup (thread-safe) is called after it is dropped.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <libnbd.h>

#include "cleanup.h"
#include "backupstore.h"
#include "nbdrep.h"
#include "backup-int.h"

#define NR_READERS 2
#define KEEPALIVE_SECONDS 5.0   /* renewing the hold, the store's lock */

struct backup_opts {
  const char *name;
  uint64_t rate;                /* bytes/s read, 0 = unlimited */
  uint32_t block_size;
  const char *source;
  bool full;
  struct tls_params tls;        /* for the source (--tls options) */
};

/* The progress of the backup as an item of progress.c. */
static void
progress_of (const struct backup *b, const char *name, double started,
             struct progress_item *it)
{
  double elapsed = bs_now () - started;

  memset (it, 0, sizeof *it);
  snprintf (it->kind, sizeof it->kind, "backup");
  snprintf (it->label, sizeof it->label, "backup %s", name);
  it->done = b->done_bytes;
  it->total = b->total_bytes;
  it->rate = elapsed > 0 ? (double) b->done_bytes / elapsed : 0;
  it->eta = it->rate > 0
    ? (double) (b->total_bytes - b->done_bytes) / it->rate : -1;
}

/* Show the progress: a bar on a terminal, else a plain line. */
static void
show_progress (const struct backup *b, const char *name, double started,
               struct screen *scr, bool tty)
{
  struct progress_item it;
  char lines[1][256];

  progress_of (b, name, started, &it);
  if (tty) {
    progress_format_bar (&it, lines[0], sizeof lines[0]);
    screen_draw (scr, stdout, lines, 1);
  }
  else {
    progress_print_line (stdout, &it);
    fflush (stdout);
  }
}

/* Renew the controller's hold on this backup (backup-renew), which
 * also checks that the connection is alive and that the controller
 * still runs this backup.
 */
static int
renew_hold (struct ctl *c, const char *token)
{
  json_t *req = json_pack ("{s:s, s:s}", "cmd", "backup-renew",
                           "token", token);
  json_t *reply = ctl_request (c, req);

  json_decref (req);
  if (reply == NULL) {
    nbdrep_error ("the controller no longer holds this backup (token %s)",
                  token);
    return -1;
  }
  json_decref (reply);
  return 0;
}

/* Start the readers and run transfers until done or failed. */
static int
run_transfers (struct backup *b, struct ctl *c, const char *token,
               struct bs_lock *lock, const char *name)
{
  pthread_t threads[NR_READERS];
  unsigned n = b->nr_todo < NR_READERS ? (unsigned) b->nr_todo : NR_READERS;
  bool tty = isatty (STDOUT_FILENO), finished = false;
  double started = bs_now (), last_show = 0, last_check = started;
  struct screen scr = { 0 };
  unsigned i;

  for (i = 0; i < n; ++i) {
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
      b->readers_running++;
    }
    if (pthread_create (&threads[i], NULL, backup_reader, b) != 0) {
      nbdrep_error ("pthread_create: %m");
      {
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
        b->readers_running--;
      }
      backup_set_failed (b);
      n = i;
      break;
    }
  }
  while (!backup_has_failed (b) && !(finished = backup_take_jobs (b))) {
    double now;
    if (bs_multi_run (b->multi, 200) == -1)
      backup_set_failed (b);
    now = bs_now ();
    if (now - last_show >= (tty ? 0.25 : 1.0)) {
      show_progress (b, name, started, &scr, tty);
      last_show = now;
    }
    if (now - last_check >= KEEPALIVE_SECONDS) {
      if (renew_hold (c, token) == -1 || bs_lock_refresh (lock) == -1)
        backup_set_failed (b);
      last_check = now;
    }
  }
  for (i = 0; i < n; ++i)
    pthread_join (threads[i], NULL);
  if (finished)
    show_progress (b, name, started, &scr, tty);
  return finished ? 0 : -1;
}

/* ---- planning ---------------------------------------------------- */

/* Mark the blocks overlapping the changed ranges in need[]; -1 if the
 * list is not what the protocol says.
 */
static int
mark_changed (const json_t *changed, const struct bs_manifest *m,
              bool *need)
{
  const json_t *range;
  size_t i;

  json_array_foreach (changed, i, range) {
    json_t *o = json_array_get (range, 0), *l = json_array_get (range, 1);
    uint64_t off, len, first, last;
    if (!json_is_integer (o) || !json_is_integer (l) ||
        json_integer_value (o) < 0 || json_integer_value (l) <= 0) {
      nbdrep_error ("backup-begin: \"changed\" entry %zu is not "
                    "[OFFSET, LENGTH]", i);
      return -1;
    }
    off = (uint64_t) json_integer_value (o);
    len = (uint64_t) json_integer_value (l);
    if (off >= m->size)
      continue;
    if (len > m->size - off)
      len = m->size - off;
    first = off / m->block_size;
    last = (off + len - 1) / m->block_size;
    while (first <= last)
      need[first++] = true;
  }
  return 0;
}

/* Decide which blocks to read: those changed since the base (the
 * others keep the base's entries), or all.  Sets b->todo; returns
 * whether the backup is incremental.
 */
static int
plan_reads (struct backup *b, const struct bs_manifest *base,
            const json_t *changed, bool *incremental)
{
  struct bs_manifest *m = b->m;
  CLEANUP_FREE bool *need = calloc (m->nr_blocks ? m->nr_blocks : 1, 1);
  uint64_t i;

  b->todo = malloc ((m->nr_blocks ? m->nr_blocks : 1) * sizeof *b->todo);
  if (need == NULL || b->todo == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  *incremental = base && json_is_array (changed) &&
    base->size == m->size && base->block_size == m->block_size;
  if (*incremental) {
    if (mark_changed (changed, m, need) == -1)
      return -1;
    memcpy (m->hashes, base->hashes, m->nr_blocks * sizeof *m->hashes);
    memcpy (m->zero, base->zero, m->nr_blocks);
  }
  else
    memset (need, 1, m->nr_blocks);
  b->nr_todo = 0;
  b->total_bytes = 0;
  for (i = 0; i < m->nr_blocks; ++i)
    if (need[i]) {
      b->todo[b->nr_todo++] = i;
      b->total_bytes += bs_manifest_block_len (m, i);
    }
  return 0;
}

/* Add the base's blocks to the known set (they are in the store). */
static int
know_base (struct backup *b, const struct bs_manifest *base)
{
  uint64_t i;

  for (i = 0; base && i < base->nr_blocks; ++i)
    if (!base->zero[i] && bs_hashset_add (b->known, base->hashes[i]) == -1) {
      nbdrep_error ("out of memory");
      return -1;
    }
  return 0;
}

/* ---- the command ------------------------------------------------- */

/* What the controller said in its backup-begin reply. */
struct begin {
  json_t *reply;
  const char *token, *source, *consistency, *why_live;
  int64_t leg;                  /* -1: none held */
  uint64_t size;
  const json_t *changed;
};

/* Send backup-begin and check its reply. */
static int
begin_backup (struct ctl *c, const char *base, struct begin *bg)
{
  json_t *req = json_pack ("{s:s, s:o}", "cmd", "backup-begin", "base",
                           base ? json_string (base) : json_null ());

  bg->reply = ctl_request (c, req);
  json_decref (req);
  if (bg->reply == NULL)
    return -1;
  bg->token = jstr (bg->reply, "token");
  bg->source = jstr (bg->reply, "source");
  bg->consistency = jstr (bg->reply, "consistency");
  bg->why_live = jstr (bg->reply, "why_live");
  bg->leg = jint (bg->reply, "leg", -1);
  bg->size = jcount (bg->reply, "size");
  bg->changed = json_object_get (bg->reply, "changed");
  if (bg->token == NULL || bg->consistency == NULL) {
    nbdrep_error ("backup-begin: the reply has no \"token\" or "
                  "\"consistency\"");
    return -1;
  }
  return 0;
}

/* Send backup-end. */
static int
end_backup (struct ctl *c, const char *token, bool done, const char *name)
{
  json_t *req = json_pack ("{s:s, s:s, s:s, s:s}", "cmd", "backup-end",
                           "token", token, "result", done ? "done" : "failed",
                           "name", name);
  json_t *reply = ctl_request (c, req);

  json_decref (req);
  json_decref (reply);
  return reply ? 0 : -1;
}

/* Say what consistency the user gets. */
static void
say_consistency (const struct begin *bg, const char *source)
{
  if (strcmp (bg->consistency, "point-in-time") == 0)
    printf ("consistency: point-in-time: leg %" PRId64 " is held out of the "
            "volume and read as it was at the flush\n", bg->leg);
  else
    fprintf (stderr, "nbdrep: warning: consistency: live (%s): %s is read "
             "while the volume is written, so the backup is crash-consistent "
             "only if the filesystem on it is frozen (fsfreeze) until the "
             "backup ends\n", bg->why_live ? bg->why_live
             : "no leg can be held out", source);
}

/* The newest backup of volume in the store, or NULL (none, or it cannot
 * be read: then there is no base, which only costs reading everything).
 */
static struct bs_manifest *
newest_backup (struct bs_store *s, const char *volume)
{
  struct bs_backups l;
  struct bs_manifest *m = NULL;

  if (bs_list_backups (s, volume, &l) == -1)
    return NULL;
  if (l.n > 0) {
    m = bs_load_manifest (s, volume, l.b[l.n - 1].name);
    if (m == NULL)
      fprintf (stderr, "nbdrep: warning: the newest backup %s cannot be "
               "used as a base: reading every block\n", l.b[l.n - 1].name);
  }
  bs_backups_free (&l);
  return m;
}

/* Write the manifest, so that it appears whole or not at all. */
static int
write_manifest (struct backup *b)
{
  CLEANUP_FREE char *text = bs_manifest_encode (b->m);
  CLEANUP_FREE char *key = bs_key_manifest (b->m->volume, b->m->name);

  if (key == NULL)
    nbdrep_error ("out of memory");
  if (text == NULL || key == NULL)
    return -1;
  return bs_put_atomic (b->store, key, text, strlen (text)) == BS_OK
    ? 0 : -1;
}

/* Print what the backup did. */
static void
print_summary (const struct backup *b, const char *base, double seconds)
{
  const struct bs_counts *c = &b->counts;
  const struct bs_manifest *m = b->m;

  printf ("backup %s of volume %s complete in %s: %s\n", m->name, m->volume,
          bs_store_target (b->store), human_duration (seconds).s);
  printf ("  %s: %" PRIu64 " of %" PRIu64 " blocks read (%s, %s)\n",
          m->incremental ? "incremental" : "full read", c->read_blocks,
          m->nr_blocks, human_size (b->total_bytes).s,
          human_rate (seconds > 0 ? (double) b->total_bytes / seconds
                      : 0).s);
  if (m->incremental)
    printf ("  base: %s\n", base);
  printf ("  uploaded: %" PRIu64 " blocks, %s compressed (%s)\n",
          c->uploaded_blocks, human_size (c->uploaded_bytes).s,
          human_rate (seconds > 0 ? (double) c->uploaded_bytes / seconds
                      : 0).s);
  printf ("  already stored: %" PRIu64 " blocks; all zero: %" PRIu64
          " blocks\n", c->existing_blocks, c->zero_blocks);
}

/* Count the zero blocks of the finished map. */
static void
count_zero (struct backup *b)
{
  uint64_t i;

  b->counts.zero_blocks = 0;
  for (i = 0; i < b->m->nr_blocks; ++i)
    b->counts.zero_blocks += b->m->zero[i];
}

/* The backup itself, once begun; returns 0 when every block is stored. */
static int
backup_blocks (struct backup *b, const struct backup_opts *o,
               const struct bs_manifest *base, const struct begin *bg,
               struct ctl *c, struct bs_lock *lock)
{
  bool incremental;

  if (know_base (b, base) == -1)
    return -1;
  if (plan_reads (b, base, bg->changed, &incremental) == -1)
    return -1;
  b->m->incremental = incremental;
  if (incremental)
    printf ("incremental: %" PRIu64 " of %" PRIu64 " blocks changed since "
            "%s\n", b->nr_todo, b->m->nr_blocks, base->name);
  else
    printf ("reading every block (%s)\n",
            o->full ? "--full" : base == NULL ? "no earlier backup"
            : bg->changed == NULL || json_is_null (bg->changed)
            ? "the controller did not track the changes since the base"
            : "the block size or the volume size changed");
  fflush (stdout);
  b->multi = bs_multi_new (b->store);
  if (b->multi == NULL)
    return -1;
  return run_transfers (b, c, bg->token, lock, o->name);
}

/* Set up the backup state. */
static int
backup_init (struct backup *b, struct bs_store *store, const char *volume,
             const struct backup_opts *o, uint64_t size)
{
  memset (b, 0, sizeof *b);
  pthread_mutex_init (&b->lock, NULL);
  pthread_cond_init (&b->cond, NULL);
  b->store = store;
  b->tls = &o->tls;
  b->rate = o->rate;
  b->max_live = 2 * bs_store_connections (store);
  b->known = bs_hashset_new ();
  b->m = bs_manifest_new (o->name, volume, size, o->block_size);
  if (b->known == NULL || b->m == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Free the backup state. */
static void
backup_fini (struct backup *b)
{
  struct job *j;

  bs_multi_free (b->multi);
  while ((j = b->live) != NULL) {
    b->live = j->next;
    job_free (j);
  }
  while ((j = b->queue) != NULL) {
    b->queue = j->next;
    job_free (j);
  }
  bs_hashset_free (b->known);
  bs_manifest_free (b->m);
  free (b->todo);
  pthread_mutex_destroy (&b->lock);
  pthread_cond_destroy (&b->cond);
}

/* The source to read: the controller's, else --source; NULL (message
 * printed) if there is none, or if it is not the volume the status
 * described.
 */
static const char *
choose_source (const struct begin *bg, const struct backup_opts *o,
               uint64_t size)
{
  if (bg->size != size) {
    nbdrep_error ("backup-begin: size %" PRIu64 ", the status said %" PRIu64,
                  bg->size, size);
    return NULL;
  }
  if (bg->source) {
    if (o->source)
      fprintf (stderr, "nbdrep: --source ignored: the controller gave %s\n",
               bg->source);
    return bg->source;
  }
  if (o->source)
    return o->source;
  nbdrep_error ("the controller has no NBD leg to read from (one uptodate "
                "leg, and it is the filter's local leg): give --source "
                "with the controller's own export, e.g. --source "
                "nbd+unix:///?socket=/run/vol.sock (consistency: live)");
  return NULL;
}

/* Record in the manifest what backup-begin said: the controller's
 * token, the consistency and the source read.
 */
static int
record_begin (struct backup *b, const struct begin *bg)
{
  struct bs_manifest *m = b->m;
  int r;

  m->created = time (NULL);
  m->token = strdup (bg->token);
  m->consistency = strdup (bg->consistency);
  if (bg->leg >= 0)
    r = asprintf (&m->source, "leg %" PRId64 " %s", bg->leg, b->source);
  else
    r = asprintf (&m->source, "%s", b->source);
  if (r == -1)
    m->source = NULL;
  if (m->token == NULL || m->consistency == NULL || m->source == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Read and store the blocks of a begun backup; 0 when all are stored. */
static int
run_begun (struct backup *b, struct ctl *c, const struct backup_opts *o,
           const struct bs_manifest *base, const struct begin *bg,
           struct bs_lock *lock)
{
  b->source = choose_source (bg, o, b->m->size);
  if (b->source == NULL || record_begin (b, bg) == -1)
    return -1;
  say_consistency (bg, b->source);
  return backup_blocks (b, o, o->full ? NULL : base, bg, c, lock);
}

/* Complete the manifest of a backup whose blocks are all stored, and
 * write it: the backup exists from then on.
 */
static int
finish_manifest (struct backup *b, const struct bs_manifest *base)
{
  count_zero (b);
  b->m->counts = b->counts;
  b->m->completed = time (NULL);
  if (b->m->incremental && (b->m->base = strdup (base->name)) == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  return write_manifest (b);
}

/* Begin, run and end the backup, then write its manifest; the exit
 * status.
 */
static int
run_session (struct backup *b, struct ctl *c, const struct backup_opts *o,
             const struct bs_manifest *base, struct bs_lock *lock)
{
  struct begin bg = { 0 };
  CLEANUP_FREE char *id = NULL;
  double started = bs_now ();
  int r;

  if (asprintf (&id, "%s#%s", bs_store_target (b->store), o->name) == -1) {
    id = NULL;
    nbdrep_error ("out of memory");
    return EXIT_ERROR;
  }
  if (begin_backup (c, o->full || base == NULL ? NULL : base->token,
                    &bg) == -1) {
    json_decref (bg.reply);
    return EXIT_ERROR;
  }
  r = run_begun (b, c, o, base, &bg, lock);
  if (end_backup (c, bg.token, r == 0, id) == -1)
    r = -1;
  if (r == 0)
    r = finish_manifest (b, base);
  if (r == 0)
    print_summary (b, base ? base->name : NULL, bs_now () - started);
  else
    nbdrep_error ("backup %s failed: no manifest was written, so it does "
                  "not exist", o->name);
  json_decref (bg.reply);
  return r == 0 ? EXIT_OK : EXIT_ERROR;
}

/* Check that the name is free. */
static int
name_is_free (struct bs_store *s, const char *volume, const char *name)
{
  CLEANUP_FREE char *key = bs_key_manifest (volume, name);
  enum bs_result r;

  if (key == NULL)
    return -1;
  r = bs_head (s, key);
  if (r == BS_OK)
    nbdrep_error ("%s: volume %s has a backup named %s already",
                  bs_store_target (s), volume, name);
  return r == BS_NOT_FOUND ? 0 : -1;
}

/* The volume's UUID and size from the controller's status. */
static int
volume_identity (struct ctl *c, char **uuid, uint64_t *size)
{
  json_t *status = ctl_status (c);
  const char *u;

  if (status == NULL)
    return -1;
  u = jstr (jobj (status, "volume"), "uuid");
  *size = jcount (jobj (status, "volume"), "size");
  *uuid = u ? strdup (u) : NULL;
  json_decref (status);
  if (u == NULL) {
    nbdrep_error ("the volume has no UUID (metadata=none): backups are kept "
                  "by volume UUID, so a volume without metadata cannot be "
                  "backed up");
    return -1;
  }
  if (!bs_valid_name (*uuid)) {
    nbdrep_error ("the volume's UUID %s cannot name a directory", *uuid);
    return -1;
  }
  return 0;
}

/* Run a whole backup; the exit status. */
static int
do_backup (const char *ctl_path, struct bs_store *store,
           const struct backup_opts *o)
{
  struct ctl *c = ctl_open (ctl_path);
  CLEANUP_FREE char *volume = NULL;
  struct bs_manifest *base = NULL;
  struct bs_lock *lock = NULL;
  struct backup b;
  uint64_t size;
  int r = EXIT_ERROR;

  if (c == NULL)
    return EXIT_ERROR;
  if (volume_identity (c, &volume, &size) == -1 ||
      name_is_free (store, volume, o->name) == -1 ||
      (lock = bs_lock_take (store, volume, "backup")) == NULL) {
    ctl_close (c);
    return EXIT_ERROR;
  }
  base = newest_backup (store, volume);
  if (backup_init (&b, store, volume, o, size) == 0)
    r = run_session (&b, c, o, base, lock);
  backup_fini (&b);
  bs_manifest_free (base);
  bs_lock_release (lock);
  ctl_close (c);
  return r;
}

/* A default name: the UTC time, 20261129T225000Z. */
static void
default_name (char *buf, size_t len)
{
  time_t now = time (NULL);
  struct tm tm;

  gmtime_r (&now, &tm);
  strftime (buf, len, "%Y%m%dT%H%M%SZ", &tm);
}

/* Parse the options of backup; returns the index of CTL. */
static int
parse_backup_options (const struct subcommand *cmd, int argc, char **argv,
                      struct backup_opts *o)
{
  static const struct option longopts[] = {
    { "name", required_argument, NULL, 'n' },
    { "rate", required_argument, NULL, 'r' },
    { "block-size", required_argument, NULL, 'b' },
    { "source", required_argument, NULL, 's' },
    { "full", no_argument, NULL, 'f' },
    TLS_LONG_OPTIONS,
    COMMON_LONG_OPTIONS
  };
  uint64_t bs;
  int opt;

  config_tls_init (&o->tls);
  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    if (tls_option (cmd, opt, optarg, &o->tls))
      continue;
    switch (opt) {
    case 'n':
      if (!bs_valid_name (optarg))
        usage_error (cmd, "--name '%s': use letters, digits, '.', '_' and "
                     "'-' (not first), at most 128", optarg);
      o->name = optarg;
      break;
    case 'r':
      o->rate = parse_size_arg (cmd, "--rate", optarg);
      break;
    case 'b':
      bs = parse_size_arg (cmd, "--block-size", optarg);
      if (bs < BS_MIN_BLOCK || bs > BS_MAX_BLOCK || (bs & (bs - 1)))
        usage_error (cmd, "--block-size '%s' is not a power of two from "
                     "4K to 64M", optarg);
      o->block_size = (uint32_t) bs;
      break;
    case 's':
      o->source = optarg;
      break;
    case 'f':
      o->full = true;
      break;
    default:
      other_option (cmd, opt);
    }
  }
  need_operands (cmd, optind + partition_operands (argc, argv, optind),
                 argv, optind, 2, 2);
  return optind;
}

/* nbdrep backup. */
static int
run_backup (const struct subcommand *cmd, int argc, char **argv)
{
  struct backup_opts o = { .block_size = BS_DEFAULT_BLOCK };
  char name[32];
  struct bs_store *store;
  int i = parse_backup_options (cmd, argc, argv, &o), r;

  if (o.name == NULL) {
    default_name (name, sizeof name);
    o.name = name;
  }
  store = open_store (argv[i + 1], argc - i - 2, argv + i + 2);
  if (store == NULL)
    return EXIT_ERROR;
  r = do_backup (argv[i], store, &o);
  bs_store_close (store);
  return r;
}

const struct subcommand cmd_backup = {
  .name = "backup",
  .run = run_backup,
  .synopsis = "CTL TARGET [KEY=VALUE...] [--name=NAME] [--rate=SIZE] "
              "[--block-size=SIZE] [--source=URI] [--full] [--tls=MODE] "
              "[--tls-certificates=DIR] [--tls-verify=BOOL] "
              "[--tls-username=NAME] [--tls-psk=FILE]",
  .summary = "Back the volume up to an S3 or WebDAV store.",
  .description =
  "TARGET is s3://BUCKET[/PREFIX] or http(s)://HOST[/PATH] (WebDAV);\n"
  "KEY=VALUE are store options (see nbdrep(1), STORES).  With two or\n"
  "more uptodate legs the controller holds one out of the volume after\n"
  "a flush and the backup is point-in-time; otherwise it is live (freeze\n"
  "the filesystem).  Only the blocks changed since the newest backup of\n"
  "the volume in TARGET are read when the controller tracked them;\n"
  "blocks the store has are not sent again.  The manifest is written\n"
  "last: a backup that fails leaves none.\n",
  .options =
  "  --name=NAME       The backup's name (default: the UTC time,\n"
  "                    20261129T225000Z).\n"
  "  --rate=SIZE       Read at most SIZE bytes per second (0 = no cap).\n"
  "  --block-size=SIZE Block size, a power of two from 4K to 64M\n"
  "                    (default 2M; a change makes the next backup read\n"
  "                    everything).\n"
  "  --source=URI      What to read when the controller has no NBD leg\n"
  "                    to give (its own export).\n"
  "  --full            Read every block and check every one against the\n"
  "                    store (no trust in the previous backup).\n"
  TLS_OPTIONS_HELP,
};
