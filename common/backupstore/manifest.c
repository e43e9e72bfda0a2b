/* SPDX-License-Identifier: BSD-3-Clause */
/* The store layout and the backup manifest.
 *
 * Layout under the target (s3://bucket/prefix or the WebDAV URL):
 *
 *   volumes/VOLUME/backups/NAME.json      one manifest per backup
 *   volumes/VOLUME/blocks/HH/HASH.zst     the blocks of every backup
 *   volumes/VOLUME/locks/KIND-ID.json     see catalog.c
 *
 * VOLUME is the volume's UUID, HASH the SHA-256 of the uncompressed
 * block in hex and HH its first two digits (256 directories, so that a
 * WebDAV server's directories stay small).  Blocks are per volume:
 * identical blocks of one volume are stored once, whatever the backup.
 * Listing the backups lists volumes/ and each volume's backups/, never
 * the blocks; only a delete's sweep lists the blocks of its volume.
 *
 * A manifest is written after every block it names is stored, so a
 * backup whose manifest exists is complete and one that was interrupted
 * has none.  It holds the whole block map, so every backup restores on
 * its own, whatever happened to the others:
 *
 *   {"format": "nbdkit-replicate-backup", "version": 1,
 *    "name": "...", "volume": "UUID", "size": BYTES, "block_size": BYTES,
 *    "created": "2026-11-29T22:50:00Z", "completed": "...",
 *    "consistency": "point-in-time" | "live", "source": "..." | null,
 *    "base": "NAME" | null, "incremental": BOOL, "token": "HEX" | null,
 *    "compression": "zstd", "hash": "sha256",
 *    "counts": {"blocks": N, "zero_blocks": N, "read_blocks": N,
 *               "uploaded_blocks": N, "uploaded_bytes": N,
 *               "existing_blocks": N},
 *    "blocks": ["HASH", null, ...]}
 *
 * "blocks" has one entry per block-size piece of the volume (the last
 * may be short): its hash, or null when it is all zeroes (not stored).
 * "token" is the controller's name of the backup (backup-begin): the
 * next backup of the volume gives it back as its base, and the
 * controller then tells only what was written since.
 *
 * Decoding checks the format, the version, the block size (a power of
 * two in [BS_MIN_BLOCK, BS_MAX_BLOCK]) and that the map has exactly
 * one entry per block before it allocates anything of that size.  The
 * functions are pure; a manifest belongs to one thread.
 */

#include <config.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cleanup.h"
#include "internal.h"

#define FORMAT_NAME "nbdkit-replicate-backup"
#define FORMAT_VERSION 1
#define MAX_NAME 128

/* A valid name: letters, digits, '.', '_', '-', not starting with '.'
 * or '-'.
 */
bool
bs_valid_name (const char *s)
{
  size_t n = strlen (s);

  return n > 0 && n <= MAX_NAME && s[0] != '.' && s[0] != '-' &&
    strspn (s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
            "0123456789._-") == n;
}

/* asprintf returning the string or NULL. */
static char *key_printf (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
static char *
key_printf (const char *fs, ...)
{
  va_list ap;
  char *s;
  int r;

  va_start (ap, fs);
  r = vasprintf (&s, fs, ap);
  va_end (ap);
  return r == -1 ? NULL : s;
}

/* "volumes/". */
char *
bs_key_volumes (void)
{
  return strdup ("volumes/");
}

/* "volumes/V/backups/". */
char *
bs_key_backups (const char *volume)
{
  return key_printf ("volumes/%s/backups/", volume);
}

/* "volumes/V/backups/NAME.json". */
char *
bs_key_manifest (const char *volume, const char *name)
{
  return key_printf ("volumes/%s/backups/%s.json", volume, name);
}

/* "volumes/V/blocks/". */
char *
bs_key_blocks (const char *volume)
{
  return key_printf ("volumes/%s/blocks/", volume);
}

/* "volumes/V/blocks/HH/HASH.zst". */
char *
bs_key_block (const char *volume, const uint8_t hash[BS_HASH_LEN])
{
  char hex[65];

  bs_hash_to_hex (hash, hex);
  return key_printf ("volumes/%s/blocks/%.2s/%s.zst", volume, hex, hex);
}

/* "volumes/V/locks/". */
char *
bs_key_locks (const char *volume)
{
  return key_printf ("volumes/%s/locks/", volume);
}

/* The hash of "HH/HASH.zst". */
int
bs_block_key_hash (const char *rel, uint8_t hash[BS_HASH_LEN])
{
  char hex[65];

  if (strlen (rel) != 3 + 64 + 4 || rel[2] != '/' ||
      strcmp (rel + 67, ".zst") != 0 || memcmp (rel, rel + 3, 2) != 0)
    return -1;
  memcpy (hex, rel + 3, 64);
  hex[64] = '\0';
  return bs_hash_from_hex (hex, hash);
}

/* A new manifest of all-zero blocks. */
struct bs_manifest *
bs_manifest_new (const char *name, const char *volume, uint64_t size,
                 uint32_t block_size)
{
  struct bs_manifest *m = calloc (1, sizeof *m);

  if (m == NULL)
    goto oom;
  m->name = strdup (name);
  m->volume = strdup (volume);
  m->size = size;
  m->block_size = block_size;
  m->nr_blocks = size / block_size + (size % block_size != 0);
  m->hashes = calloc (m->nr_blocks ? m->nr_blocks : 1, sizeof *m->hashes);
  m->zero = malloc (m->nr_blocks ? m->nr_blocks : 1);
  if (m->name == NULL || m->volume == NULL || m->hashes == NULL ||
      m->zero == NULL)
    goto oom;
  memset (m->zero, 1, m->nr_blocks);
  return m;
 oom:
  nbdkit_error ("out of memory");
  bs_manifest_free (m);
  return NULL;
}

/* Free a manifest. */
void
bs_manifest_free (struct bs_manifest *m)
{
  if (m == NULL)
    return;
  free (m->name);
  free (m->volume);
  free (m->consistency);
  free (m->source);
  free (m->base);
  free (m->token);
  free (m->hashes);
  free (m->zero);
  free (m);
}

/* The length of block i. */
uint32_t
bs_manifest_block_len (const struct bs_manifest *m, uint64_t i)
{
  uint64_t off = i * m->block_size;

  return m->size - off < m->block_size ? (uint32_t) (m->size - off)
    : m->block_size;
}

/* A time as "2026-11-29T22:50:00Z" (a JSON string). */
static json_t *
json_time (time_t t)
{
  struct tm tm;
  char buf[32];

  gmtime_r (&t, &tm);
  strftime (buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return json_string (buf);
}

/* A string or null. */
static json_t *
json_string_or_null (const char *s)
{
  return s ? json_string (s) : json_null ();
}

/* The block map as a JSON array. */
static json_t *
encode_blocks (const struct bs_manifest *m)
{
  json_t *a = json_array ();
  uint64_t i;
  char hex[65];

  for (i = 0; a && i < m->nr_blocks; ++i) {
    if (!m->zero[i])
      bs_hash_to_hex (m->hashes[i], hex);
    if (json_array_append_new (a, m->zero[i] ? json_null ()
                               : json_string (hex)) == -1) {
      json_decref (a);
      return NULL;
    }
  }
  return a;
}

/* Encode a manifest. */
char *
bs_manifest_encode (const struct bs_manifest *m)
{
  const struct bs_counts *c = &m->counts;
  json_t *blocks = encode_blocks (m), *j;
  char *text;

  if (blocks == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  j = json_pack ("{s:s, s:i, s:s, s:s, s:I, s:I, s:o, s:o, s:s, s:o, s:o,"
                 " s:b, s:o, s:s, s:s,"
                 " s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o}",
                 "format", FORMAT_NAME, "version", FORMAT_VERSION,
                 "name", m->name, "volume", m->volume,
                 "size", (json_int_t) m->size,
                 "block_size", (json_int_t) m->block_size,
                 "created", json_time (m->created),
                 "completed", json_time (m->completed),
                 "consistency", m->consistency ? m->consistency : "live",
                 "source", json_string_or_null (m->source),
                 "base", json_string_or_null (m->base),
                 "incremental", m->incremental,
                 "token", json_string_or_null (m->token),
                 "compression", "zstd", "hash", "sha256",
                 "counts",
                 "blocks", (json_int_t) m->nr_blocks,
                 "zero_blocks", (json_int_t) c->zero_blocks,
                 "read_blocks", (json_int_t) c->read_blocks,
                 "uploaded_blocks", (json_int_t) c->uploaded_blocks,
                 "uploaded_bytes", (json_int_t) c->uploaded_bytes,
                 "existing_blocks", (json_int_t) c->existing_blocks,
                 "blocks", blocks);
  if (j == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  text = json_dumps (j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref (j);
  if (text == NULL)
    nbdkit_error ("out of memory");
  return text;
}

/* Copy the string field key into *out (NULL when it is missing or
 * null and not required).
 */
static int
get_string (const json_t *j, const char *key, char **out, bool required,
            const char *what)
{
  json_t *v = json_object_get (j, key);

  *out = NULL;
  if (!required && (v == NULL || json_is_null (v)))
    return 0;
  if (!json_is_string (v)) {
    nbdkit_error ("%s: \"%s\" is %s", what, key,
                  v ? "not a string" : "missing");
    return -1;
  }
  if ((*out = strdup (json_string_value (v))) == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Check that the block map a has one entry per block of a volume of
 * size bytes (before anything of that size is allocated).
 */
static int
check_blocks (const json_t *a, uint64_t size, uint32_t block_size,
              const char *what)
{
  uint64_t nr_blocks = size / block_size + (size % block_size != 0);

  if (!json_is_array (a) || json_array_size (a) != nr_blocks) {
    nbdkit_error ("%s: \"blocks\" must have %" PRIu64 " entries (size %"
                  PRIu64 ", block size %" PRIu32 ")", what, nr_blocks,
                  size, block_size);
    return -1;
  }
  return 0;
}

/* Decode the block map (checked by check_blocks) into m. */
static int
decode_blocks (struct bs_manifest *m, const json_t *a, const char *what)
{
  json_t *v;
  size_t i;

  json_array_foreach (a, i, v) {
    if (json_is_null (v))
      continue;
    if (!json_is_string (v) ||
        bs_hash_from_hex (json_string_value (v), m->hashes[i]) == -1) {
      nbdkit_error ("%s: block %zu: not a SHA-256 in hex", what, i);
      return -1;
    }
    m->zero[i] = false;
  }
  return 0;
}

/* Read the numbers of "counts" (informational: missing ones are 0). */
static void
decode_counts (struct bs_counts *c, const json_t *j)
{
  json_t *o = json_object_get (j, "counts");

  c->zero_blocks = json_integer_value (json_object_get (o, "zero_blocks"));
  c->read_blocks = json_integer_value (json_object_get (o, "read_blocks"));
  c->uploaded_blocks =
    json_integer_value (json_object_get (o, "uploaded_blocks"));
  c->uploaded_bytes =
    json_integer_value (json_object_get (o, "uploaded_bytes"));
  c->existing_blocks =
    json_integer_value (json_object_get (o, "existing_blocks"));
}

/* Decode what follows the header into m. */
static int
decode_body (struct bs_manifest *m, const json_t *j, const char *what)
{
  CLEANUP_FREE char *created = NULL, *completed = NULL;

  if (get_string (j, "consistency", &m->consistency, true, what) == -1 ||
      get_string (j, "source", &m->source, false, what) == -1 ||
      get_string (j, "base", &m->base, false, what) == -1 ||
      get_string (j, "token", &m->token, false, what) == -1 ||
      get_string (j, "created", &created, true, what) == -1 ||
      get_string (j, "completed", &completed, false, what) == -1 ||
      decode_blocks (m, json_object_get (j, "blocks"), what) == -1)
    return -1;
  m->created = parse_iso_time (created);
  m->completed = completed ? parse_iso_time (completed) : m->created;
  m->incremental = json_is_true (json_object_get (j, "incremental"));
  decode_counts (&m->counts, j);
  return 0;
}

/* Decode a manifest. */
struct bs_manifest *
bs_manifest_decode (const char *text, size_t len, const char *what)
{
  json_error_t err;
  json_t *j = json_loadb (text, len, 0, &err);
  const char *format = NULL, *name, *volume;
  json_int_t version = 0, size = 0, bs = 0;
  struct bs_manifest *m = NULL;

  if (j == NULL) {
    nbdkit_error ("%s: not JSON: %s (line %d)", what, err.text, err.line);
    return NULL;
  }
  if (json_unpack_ex (j, &err, 0, "{s:s, s:I, s:s, s:s, s:I, s:I}",
                      "format", &format, "version", &version,
                      "name", &name, "volume", &volume, "size", &size,
                      "block_size", &bs) == -1 ||
      strcmp (format, FORMAT_NAME) != 0) {
    nbdkit_error ("%s: not a backup manifest (%s)", what,
                  format ? "wrong format" : err.text);
    goto out;
  }
  if (version != FORMAT_VERSION) {
    nbdkit_error ("%s: manifest version %lld, this program reads %d", what,
                  (long long) version, FORMAT_VERSION);
    goto out;
  }
  if (size < 0 || bs < BS_MIN_BLOCK || bs > BS_MAX_BLOCK || (bs & (bs - 1))) {
    nbdkit_error ("%s: bad size or block size", what);
    goto out;
  }
  if (check_blocks (json_object_get (j, "blocks"), (uint64_t) size,
                    (uint32_t) bs, what) == -1)
    goto out;
  m = bs_manifest_new (name, volume, (uint64_t) size, (uint32_t) bs);
  if (m && decode_body (m, j, what) == -1) {
    bs_manifest_free (m);
    m = NULL;
  }
 out:
  json_decref (j);
  return m;
}
