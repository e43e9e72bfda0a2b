/* SPDX-License-Identifier: BSD-3-Clause */
/* The store's side of backups: nbdrep backups, backup-delete,
 * backup-verify, and opening a store from the command line.
 *
 * backups lists every backup in a store (or of one volume), reading
 * each manifest, never the blocks.  backup-delete removes a backup's
 * manifest first (from then on the backup does not exist, whatever
 * happens next), then marks every block the remaining manifests of the
 * volume name and sweeps the others; it holds the volume's delete lock
 * so no backup runs meanwhile, and sweeps nothing if any manifest
 * cannot be read.  backup-verify fetches every distinct block of a
 * backup, decompresses it and checks its hash, naming each object that
 * is missing or damaged; it exits 3 if any is.
 *
 * One thread: the sweep's DELETEs and the verify's GETs run on one
 * curl multi, at most twice `connections` queued at a time.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cleanup.h"
#include "backupstore.h"
#include "nbdrep.h"

/* The --help line of --volume in backup-delete and backup-verify. */
#define VOLUME_OPTION_HELP \
  "  --volume=UUID     The volume, if backups of several volumes have\n" \
  "                    that name.\n"

/* Options the three commands share. */
struct store_opts {
  const char *volume;
  bool json;
};

/* Move the store options among the operands argv[first..argc) after
 * the others, keeping both in order; returns how many operands are not
 * store options.
 */
int
partition_operands (int argc, char **argv, int first)
{
  int n = 0, i, j;

  for (i = first; i < argc; ++i)
    if (!bs_is_option (argv[i])) {
      char *a = argv[i];
      for (j = i; j > first + n; --j)
        argv[j] = argv[j - 1];
      argv[first + n++] = a;
    }
  return n;
}

/* Open the store named on the command line (the options are store
 * options: partition_operands put them there).
 */
struct bs_store *
open_store (const char *target, int nopts, char **opts)
{
  struct bs_store *s = bs_store_new (target, (size_t) nopts, opts);

  if (s && bs_store_check (s) == -1) {
    bs_store_close (s);
    return NULL;
  }
  return s;
}

/* Parse the options of backups, backup-delete and backup-verify;
 * returns the index of the first operand.
 */
static int
parse_store_options (const struct subcommand *cmd, int argc, char **argv,
                     int min, struct store_opts *o, bool json)
{
  static const struct option longopts[] = {
    { "volume", required_argument, NULL, 'V' },
    { "json", no_argument, NULL, 'j' },
    COMMON_LONG_OPTIONS
  };
  int opt;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    switch (opt) {
    case 'V':
      if (!bs_valid_name (optarg))
        usage_error (cmd, "--volume '%s' is not a volume UUID", optarg);
      o->volume = optarg;
      break;
    case 'j':
      if (!json)
        usage_error (cmd, "unrecognized option '--json'");
      o->json = true;
      break;
    default:
      other_option (cmd, opt);
    }
  }
  need_operands (cmd, optind + partition_operands (argc, argv, optind),
                 argv, optind, min, min);
  return optind;
}

/* A time in ISO 8601 UTC. */
static struct hstr
iso_time (time_t t)
{
  struct hstr h;
  struct tm tm;

  gmtime_r (&t, &tm);
  strftime (h.s, sizeof h.s, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return h;
}

/* ---- backups ----------------------------------------------------- */

/* One backup as a JSON object. */
static json_t *
backup_json (const struct bs_manifest *m)
{
  const struct bs_counts *c = &m->counts;

  return json_pack ("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:b, s:s?, s:s?,"
                    " s:{s:I, s:I, s:I, s:I, s:I, s:I}}",
                    "volume", m->volume, "name", m->name,
                    "created", iso_time (m->created).s,
                    "completed", iso_time (m->completed).s,
                    "size", (json_int_t) m->size,
                    "block_size", (json_int_t) m->block_size,
                    "consistency", m->consistency,
                    "incremental", m->incremental,
                    "base", m->base, "source", m->source,
                    "counts", "blocks", (json_int_t) m->nr_blocks,
                    "zero_blocks", (json_int_t) c->zero_blocks,
                    "read_blocks", (json_int_t) c->read_blocks,
                    "uploaded_blocks", (json_int_t) c->uploaded_blocks,
                    "uploaded_bytes", (json_int_t) c->uploaded_bytes,
                    "existing_blocks", (json_int_t) c->existing_blocks);
}

/* One backup as a table row. */
static void
backup_row (struct table *t, const struct bs_manifest *m)
{
  char size[24], uploaded[48];
  const char *cells[7] = { m->volume, m->name, iso_time (m->created).s,
                           size, m->consistency,
                           m->incremental ? "incremental" : "full",
                           uploaded };

  snprintf (size, sizeof size, "%s", human_size (m->size).s);
  snprintf (uploaded, sizeof uploaded, "%" PRIu64 " blocks, %s",
            m->counts.uploaded_blocks,
            human_size (m->counts.uploaded_bytes).s);
  table_add_row (t, cells);
}

/* nbdrep backups. */
static int
run_backups (const struct subcommand *cmd, int argc, char **argv)
{
  static const char *const headers[] = { "VOLUME", "NAME", "CREATED", "SIZE",
                                         "CONSISTENCY", "READ", "UPLOADED" };
  struct store_opts o = { 0 };
  int i = parse_store_options (cmd, argc, argv, 1, &o, true), r = EXIT_OK;
  struct bs_store *s = open_store (argv[i], argc - i - 1, argv + i + 1);
  json_t *list = o.json ? json_array () : NULL;
  struct table *t = o.json ? NULL : table_new (7, headers);
  struct bs_backups l;
  size_t n;

  if (o.json && list == NULL)
    nbdrep_error ("out of memory");
  if (s == NULL || (o.json && list == NULL) ||
      bs_list_backups (s, o.volume, &l) == -1) {
    json_decref (list);
    table_free (t);
    bs_store_close (s);
    return EXIT_ERROR;
  }
  for (n = 0; n < l.n; ++n) {
    struct bs_manifest *m = bs_load_manifest (s, l.b[n].volume, l.b[n].name);
    if (m == NULL)
      r = EXIT_ERROR;
    else if (list)
      json_array_append_new (list, backup_json (m));
    else
      backup_row (t, m);
    bs_manifest_free (m);
  }
  if (list) {
    json_dumpf (list, stdout, JSON_INDENT (2));
    putchar ('\n');
    json_decref (list);
  }
  else {
    table_print (t, stdout, "");
    table_free (t);
  }
  bs_backups_free (&l);
  bs_store_close (s);
  return r;
}

const struct subcommand cmd_backups = {
  .name = "backups",
  .run = run_backups,
  .synopsis = "TARGET [KEY=VALUE...] [--volume=UUID] [--json]",
  .summary = "List the backups in a store.",
  .description =
  "One row per backup, oldest first for each volume (--json: an array of\n"
  "objects, see nbdrep(1)).  Reads the manifests, never the blocks.\n",
  .options =
  "  --volume=UUID     Only the backups of this volume.\n"
  "  --json            JSON for scripts.\n",
};

/* ---- backup-delete and backup-verify: one named backup ---------- */

/* A backup named on the command line, in its opened store. */
struct named_backup {
  struct bs_store *s;
  const char *name;
  char *volume;
};

/* Parse TARGET NAME [KEY=VALUE...] [--volume=UUID], open the store and
 * find the backup's volume.  -1 (error printed) if that fails.
 */
static int
open_named_backup (const struct subcommand *cmd, int argc, char **argv,
                   struct named_backup *nb)
{
  struct store_opts o = { 0 };
  int i = parse_store_options (cmd, argc, argv, 2, &o, false);

  nb->name = argv[i + 1];
  if (!bs_valid_name (nb->name))
    usage_error (cmd, "'%s' is not a backup name", nb->name);
  nb->s = open_store (argv[i], argc - i - 2, argv + i + 2);
  if (nb->s == NULL)
    return -1;
  nb->volume = bs_find_volume (nb->s, nb->name, o.volume);
  if (nb->volume == NULL) {
    bs_store_close (nb->s);
    return -1;
  }
  return 0;
}

/* Close what open_named_backup opened. */
static void
close_named_backup (struct named_backup *nb)
{
  free (nb->volume);
  bs_store_close (nb->s);
}

/* ---- backup-delete ----------------------------------------------- */

/* Mark: the blocks the remaining backups of volume name.  NULL if any
 * manifest cannot be read (then nothing may be swept), or if the
 * delete lock cannot be kept: it is rewritten when due after each
 * manifest, as reading them all may outlast a lock's lifetime, and a
 * backup that found it expired would run and count on blocks that the
 * sweep, not knowing its manifest, deletes.
 */
static struct bs_hashset *
mark_blocks (struct bs_store *s, const char *volume, struct bs_lock *lock)
{
  struct bs_hashset *h = bs_hashset_new ();
  struct bs_backups l;
  size_t n;
  uint64_t i;

  if (h == NULL)
    nbdrep_error ("out of memory");
  if (h == NULL || bs_list_backups (s, volume, &l) == -1) {
    bs_hashset_free (h);
    return NULL;
  }
  for (n = 0; n < l.n && h; ++n) {
    struct bs_manifest *m = bs_load_manifest (s, volume, l.b[n].name);
    for (i = 0; m && i < m->nr_blocks; ++i)
      if (!m->zero[i] && bs_hashset_add (h, m->hashes[i]) == -1) {
        nbdrep_error ("out of memory");
        break;
      }
    if (m == NULL || i < m->nr_blocks || bs_lock_refresh (lock) == -1) {
      bs_hashset_free (h);
      h = NULL;
    }
    bs_manifest_free (m);
  }
  bs_backups_free (&l);
  return h;
}

/* What a sweep did. */
struct sweep {
  uint64_t deleted, deleted_bytes, kept, failed;
};

/* A DELETE of the sweep finished. */
static void
sweep_done (void *opaque, enum bs_result r, struct bs_buf *body UNUSED)
{
  struct sweep *sw = opaque;

  if (r == BS_ERROR)
    sw->failed++;
  else
    sw->deleted++;
}

/* Queue the DELETE of the listed block e (under prefix) unless keep
 * has it.
 */
static int
sweep_one (struct bs_multi *m, const char *prefix, const struct bs_entry *e,
           const struct bs_hashset *keep, struct sweep *sw)
{
  CLEANUP_FREE char *key = NULL;
  uint8_t hash[BS_HASH_LEN];

  if (bs_block_key_hash (e->name, hash) == -1 ||
      bs_hashset_contains (keep, hash)) {
    sw->kept++;
    return 0;
  }
  if (asprintf (&key, "%s%s", prefix, e->name) == -1) {
    key = NULL;
    nbdrep_error ("out of memory");
    return -1;
  }
  sw->deleted_bytes += e->size;
  return bs_multi_add (m, BS_METHOD_DELETE, key, NULL, 0, sweep_done, sw);
}

/* Sweep: delete the blocks of volume not in keep. */
static int
sweep_blocks (struct bs_store *s, const char *volume,
              const struct bs_hashset *keep, struct bs_lock *lock,
              struct sweep *sw)
{
  CLEANUP_FREE char *prefix = bs_key_blocks (volume);
  struct bs_multi *m = bs_multi_new (s);
  size_t max_pending = 2 * bs_store_connections (s);
  struct bs_list l = { 0 };
  size_t i;
  int r = -1;

  if (prefix == NULL)
    nbdrep_error ("out of memory");
  if (prefix && m)
    r = bs_lock_refresh (lock);
  if (r == 0)
    r = bs_list (s, prefix, true, &l);
  for (i = 0; r == 0 && i < l.n; ++i) {
    r = sweep_one (m, prefix, &l.e[i], keep, sw);
    if (r == 0)
      r = bs_multi_wait (m, max_pending - 1);
    if (r == 0)
      r = bs_lock_refresh (lock);
  }
  if (r == 0)
    r = bs_multi_wait (m, 0);
  bs_multi_free (m);
  bs_list_free (&l);
  return r == 0 && sw->failed == 0 ? 0 : -1;
}

/* Delete a backup and sweep. */
static int
delete_backup (struct bs_store *s, const char *volume, const char *name)
{
  CLEANUP_FREE char *key = bs_key_manifest (volume, name);
  struct bs_lock *lock = key ? bs_lock_take (s, volume, "delete") : NULL;
  struct bs_hashset *keep = NULL;
  struct sweep sw = { 0 };
  enum bs_result r;
  int ret = -1;

  if (key == NULL)
    nbdrep_error ("out of memory");
  if (lock == NULL)
    return -1;
  r = bs_head (s, key);
  if (r == BS_NOT_FOUND)
    nbdrep_error ("%s: no backup %s of volume %s", bs_store_target (s), name,
                  volume);
  if (r == BS_OK && bs_delete (s, key) != BS_ERROR) {
    printf ("deleted backup %s of volume %s\n", name, volume);
    fflush (stdout);
    keep = mark_blocks (s, volume, lock);
    if (keep == NULL)
      nbdrep_error ("no block was swept: the remaining manifests of volume "
                    "%s could not all be read, or the delete lock not "
                    "kept", volume);
    else if (sweep_blocks (s, volume, keep, lock, &sw) == 0)
      ret = 0;
    printf ("swept %" PRIu64 " unreferenced blocks (%s); %" PRIu64
            " blocks kept for %zu referenced\n", sw.deleted,
            human_size (sw.deleted_bytes).s, sw.kept,
            keep ? bs_hashset_size (keep) : 0);
  }
  bs_hashset_free (keep);
  bs_lock_release (lock);
  return ret;
}

/* nbdrep backup-delete. */
static int
run_backup_delete (const struct subcommand *cmd, int argc, char **argv)
{
  struct named_backup nb;
  int r;

  if (open_named_backup (cmd, argc, argv, &nb) == -1)
    return EXIT_ERROR;
  r = delete_backup (nb.s, nb.volume, nb.name) == 0 ? EXIT_OK : EXIT_ERROR;
  close_named_backup (&nb);
  return r;
}

const struct subcommand cmd_backup_delete = {
  .name = "backup-delete",
  .run = run_backup_delete,
  .synopsis = "TARGET NAME [KEY=VALUE...] [--volume=UUID]",
  .summary = "Delete a backup and sweep the blocks no backup uses.",
  .description =
  "The manifest goes first; then every block of the volume that no\n"
  "remaining backup names is deleted (mark and sweep), under a lock that\n"
  "keeps backups of the volume out meanwhile.\n",
  .options = VOLUME_OPTION_HELP,
};

/* ---- backup-verify ----------------------------------------------- */

struct verify_state {
  const struct bs_manifest *m;
  struct bs_store *s;
  uint64_t checked, bad, bytes;
  char *buf;                    /* block_size bytes */
};

/* The check of one distinct block (owned by verify_blocks, so that
 * checks abandoned by a failing multi are freed all the same).
 */
struct check {
  struct verify_state *v;
  uint64_t index;               /* the first block with this hash */
};

/* A GET of a block finished: decode and check it. */
static void
check_done (void *opaque, enum bs_result r, struct bs_buf *body)
{
  const struct check *c = opaque;
  struct verify_state *v = c->v;
  uint32_t len = bs_manifest_block_len (v->m, c->index);
  const char *why = NULL;
  CLEANUP_FREE char *key = NULL;

  v->checked++;
  if (r == BS_NOT_FOUND)
    why = "missing";
  else if (r == BS_ERROR)
    why = "cannot be read";
  else if (bs_decode (body->data, body->len, v->buf, len,
                      v->m->hashes[c->index], &why) == 0)
    v->bytes += body->len;
  if (why == NULL)
    return;
  v->bad++;
  key = bs_key_block (v->m->volume, v->m->hashes[c->index]);
  printf ("BAD %s/%s: block %" PRIu64 " (offset %" PRIu64 "): %s\n",
          bs_store_target (v->s), key ? key : "(out of memory)", c->index,
          c->index * v->m->block_size, why);
}

/* Queue the GET of block i of m (the first with its hash) for check c. */
static int
queue_check (struct bs_multi *multi, const struct bs_manifest *m,
             uint64_t i, struct check *c)
{
  CLEANUP_FREE char *key = bs_key_block (m->volume, m->hashes[i]);

  if (key == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  return bs_multi_add (multi, BS_METHOD_GET, key, NULL, 0, check_done, c);
}

/* Check every distinct block of m; -1 if it could not run. */
static int
verify_blocks (struct bs_store *s, const struct bs_manifest *m,
               struct verify_state *v)
{
  struct bs_hashset *seen = bs_hashset_new ();
  struct bs_multi *multi = bs_multi_new (s);
  CLEANUP_FREE struct check *checks =
    calloc (m->nr_blocks ? m->nr_blocks : 1, sizeof *checks);
  size_t max_pending = 2 * bs_store_connections (s);
  uint64_t i;
  int r = 0;

  v->buf = malloc (m->block_size);
  if (multi == NULL)
    r = -1;
  else if (seen == NULL || checks == NULL || v->buf == NULL) {
    nbdrep_error ("out of memory");
    r = -1;
  }
  for (i = 0; r == 0 && i < m->nr_blocks; ++i) {
    int added = m->zero[i] ? 0 : bs_hashset_add (seen, m->hashes[i]);
    if (added == -1)
      nbdrep_error ("out of memory");
    if (added <= 0) {
      r = added;
      continue;
    }
    checks[i] = (struct check) { .v = v, .index = i };
    r = queue_check (multi, m, i, &checks[i]);
    if (r == 0)
      r = bs_multi_wait (multi, max_pending - 1);
  }
  if (r == 0)
    r = bs_multi_wait (multi, 0);
  bs_multi_free (multi);
  bs_hashset_free (seen);
  free (v->buf);
  return r;
}

/* nbdrep backup-verify. */
static int
run_backup_verify (const struct subcommand *cmd, int argc, char **argv)
{
  struct verify_state v = { 0 };
  struct named_backup nb;
  struct bs_manifest *m;
  int r = EXIT_ERROR;

  if (open_named_backup (cmd, argc, argv, &nb) == -1)
    return EXIT_ERROR;
  m = bs_load_manifest (nb.s, nb.volume, nb.name);
  v.m = m;
  v.s = nb.s;
  if (m && verify_blocks (nb.s, m, &v) == 0) {
    printf ("backup %s of volume %s: %" PRIu64 " blocks checked (%s "
            "stored), %" PRIu64 " bad\n", nb.name, nb.volume, v.checked,
            human_size (v.bytes).s, v.bad);
    r = v.bad > 0 ? EXIT_UNHEALTHY : EXIT_OK;
  }
  bs_manifest_free (m);
  close_named_backup (&nb);
  return r;
}

const struct subcommand cmd_backup_verify = {
  .name = "backup-verify",
  .run = run_backup_verify,
  .synopsis = "TARGET NAME [KEY=VALUE...] [--volume=UUID]",
  .summary = "Check every block of a backup without restoring it.",
  .description =
  "Fetches each distinct block the backup names, decompresses it and\n"
  "checks its SHA-256; prints a BAD line naming each object that is\n"
  "missing or damaged, and exits 3 if there is any.\n",
  .options = VOLUME_OPTION_HELP,
};
