/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-backup-plugin: serve a backup from a store as a read-only
 * export (nbdkit-backup-plugin(1)).
 *
 * At start the backup's manifest is loaded (it holds the whole block
 * map); blocks are fetched when a read first needs them, decompressed,
 * checked against their SHA-256, and kept in a small cache.  All-zero
 * blocks are not stored: they read as zeroes and are reported as holes
 * that read as zeroes, so nbdcopy and qemu-img stay sparse.
 *
 * Threads: the PARALLEL model.  The store is safe for concurrent
 * synchronous requests (each on its own pooled curl easy handle).  The
 * cache is one array of slots under cache_lock.  A slot is EMPTY,
 * LOADING (one thread fetches it without the lock; others that want
 * the same block wait on cache_cond) or READY; data is copied out
 * under the lock, and a slot's data is replaced only by the thread
 * that loaded it, under the lock.  A failed fetch empties its slot
 * again, so the next read retries; the store itself retries transient
 * failures.  Eviction takes the least recently used slot that is not
 * LOADING.  The manifest is read-only after get_ready.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "cleanup.h"
#include "backupstore.h"

#define DEFAULT_CACHE (64 * 1024 * 1024)
#define MIN_SLOTS 4

enum slot_state { SLOT_EMPTY, SLOT_LOADING, SLOT_READY };

struct slot {
  enum slot_state state;
  uint64_t block;
  uint64_t used;                /* tick of the last use */
  char *data;
};

/* Parameters. */
static char *target, *name, *volume;
static int64_t cache_size = DEFAULT_CACHE;
static char **store_options;    /* "KEY=VALUE", in order */
static size_t nr_store_options;

/* After get_ready. */
static struct bs_store *store;
static struct bs_manifest *manifest;

/* The cache. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cache_cond = PTHREAD_COND_INITIALIZER;
static struct slot *slots;
static size_t nr_slots;
static uint64_t tick;

/* Free everything. */
static void
backup_unload (void)
{
  size_t i;

  for (i = 0; i < nr_slots; ++i)
    free (slots[i].data);
  free (slots);
  for (i = 0; i < nr_store_options; ++i)
    free (store_options[i]);
  free (store_options);
  bs_manifest_free (manifest);
  bs_store_close (store);
  free (target);
  free (name);
  free (volume);
}

/* Remember a store option for config_complete (the target may come
 * after it).
 */
static int
add_store_option (const char *key, const char *value)
{
  char **p = realloc (store_options, (nr_store_options + 1) * sizeof *p);

  if (p == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  store_options = p;
  if (asprintf (&p[nr_store_options], "%s=%s", key, value) == -1) {
    nbdkit_error ("out of memory");
    return -1;
  }
  nbdkit_debug ("store option %s", p[nr_store_options]);
  nr_store_options++;
  return 0;
}

/* Replace a string parameter, refusing a repeated one. */
static int
set_once (char **field, const char *key, const char *value)
{
  if (*field) {
    nbdkit_error ("%s= given twice", key);
    return -1;
  }
  *field = strdup (value);
  if (*field == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Is key a store option naming a file?  Those are made absolute at
 * once: nbdkit changes to "/" when it forks into the background, and
 * the store opens them later (curl at each request).
 */
static bool
is_file_option (const char *key)
{
  return strcmp (key, "credentials") == 0 || strcmp (key, "cafile") == 0;
}

/* One key=value of the command line. */
static int
backup_config (const char *key, const char *value)
{
  if (strcmp (key, "target") == 0)
    return set_once (&target, key, value);
  if (strcmp (key, "name") == 0)
    return set_once (&name, key, value);
  if (strcmp (key, "volume") == 0)
    return set_once (&volume, key, value);
  if (strcmp (key, "cache") == 0) {
    cache_size = nbdkit_parse_size (value);
    return cache_size == -1 ? -1 : 0;
  }
  if (is_file_option (key) && value[0] != '\0') {
    CLEANUP_FREE char *abs = nbdkit_absolute_path (value);

    return abs ? add_store_option (key, abs) : -1;
  }
  if (bs_config_is_key (key))
    return add_store_option (key, value);
  nbdkit_error ("unknown parameter %s=", key);
  return -1;
}

/* Check the parameters and open the store (no request yet). */
static int
backup_config_complete (void)
{
  if (target == NULL || name == NULL) {
    nbdkit_error ("the target (s3://BUCKET/PREFIX or http(s)://URL) and "
                  "name=NAME are required");
    return -1;
  }
  if (!bs_valid_name (name) || (volume && !bs_valid_name (volume))) {
    nbdkit_error ("name= and volume= are letters, digits, '.', '_' and "
                  "'-' (not first), at most 128");
    return -1;
  }
  store = bs_store_new (target, nr_store_options, store_options);
  return store ? 0 : -1;
}

#define backup_config_help \
  "[target=]s3://BUCKET/PREFIX | http(s)://URL   (required) the store\n" \
  "name=NAME           (required) the backup to serve\n" \
  "volume=UUID         its volume, if backups of several volumes have\n" \
  "                    that name\n" \
  "cache=SIZE          memory for decompressed blocks (default 64M)\n" \
  BS_OPTIONS_HELP

/* Load the manifest and size the cache. */
static int
backup_get_ready (void)
{
  CLEANUP_FREE char *vol = NULL;
  size_t n;

  if (bs_store_check (store) == -1)
    return -1;
  vol = bs_find_volume (store, name, volume);
  if (vol == NULL)
    return -1;
  manifest = bs_load_manifest (store, vol, name);
  if (manifest == NULL)
    return -1;
  n = (size_t) (cache_size / manifest->block_size);
  nr_slots = n < MIN_SLOTS ? MIN_SLOTS : n;
  slots = calloc (nr_slots, sizeof *slots);
  if (slots == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  nbdkit_debug ("backup %s of volume %s: %" PRIu64 " bytes, %" PRIu64
                " blocks of %" PRIu32 ", %s, cache of %zu blocks", name, vol,
                manifest->size, manifest->nr_blocks, manifest->block_size,
                manifest->consistency, nr_slots);
  return 0;
}

/* Print the library versions for --dump-plugin. */
static void
backup_dump_plugin (void)
{
  printf ("backup_libcurl_version=%s\n", curl_version_info
          (CURLVERSION_NOW)->version);
}

/* A connection needs no state of its own. */
static void *
backup_open (int readonly UNUSED)
{
  return NBDKIT_HANDLE_NOT_NEEDED;
}

/* The backup's size. */
static int64_t
backup_get_size (void *handle UNUSED)
{
  return (int64_t) manifest->size;
}

/* Every connection sees the same immutable data. */
static int
backup_can_multi_conn (void *handle UNUSED)
{
  return 1;
}

/* Read-only, whatever the client asks. */
static int
backup_can_write (void *handle UNUSED)
{
  return 0;
}

/* Fetch, decompress and check block i into a new buffer. */
static char *
fetch_block (uint64_t i)
{
  CLEANUP_FREE char *key = bs_key_block (manifest->volume,
                                         manifest->hashes[i]);
  uint32_t len = bs_manifest_block_len (manifest, i);
  struct bs_buf body = { 0 };
  enum bs_result r;
  const char *why;
  char *data;

  if (key == NULL || (data = malloc (len)) == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  r = bs_get (store, key, &body);
  if (r == BS_NOT_FOUND)
    nbdkit_error ("%s/%s: block %" PRIu64 " (offset %" PRIu64 ") of backup "
                  "%s is missing from the store", bs_store_target (store),
                  key, i, i * manifest->block_size, name);
  if (r == BS_OK &&
      bs_decode (body.data, body.len, data, len, manifest->hashes[i],
                 &why) == -1) {
    nbdkit_error ("%s/%s: block %" PRIu64 " (offset %" PRIu64 ") of backup "
                  "%s is corrupt: %s", bs_store_target (store), key, i,
                  i * manifest->block_size, name, why);
    r = BS_ERROR;
  }
  bs_buf_free (&body);
  if (r != BS_OK) {
    free (data);
    return NULL;
  }
  return data;
}

/* The slot holding block i, or NULL (cache_lock held). */
static struct slot *
find_slot (uint64_t i)
{
  size_t s;

  for (s = 0; s < nr_slots; ++s)
    if (slots[s].state != SLOT_EMPTY && slots[s].block == i)
      return &slots[s];
  return NULL;
}

/* The least recently used slot that is not loading, or NULL
 * (cache_lock held).
 */
static struct slot *
victim_slot (void)
{
  struct slot *v = NULL;
  size_t s;

  for (s = 0; s < nr_slots; ++s) {
    if (slots[s].state == SLOT_LOADING)
      continue;
    if (slots[s].state == SLOT_EMPTY)
      return &slots[s];
    if (v == NULL || slots[s].used < v->used)
      v = &slots[s];
  }
  return v;
}

/* The slot for block i (cache_lock held): the READY slot that holds
 * it (*load false), or a slot now LOADING it for the caller to fetch
 * (*load true).  Waits while another thread loads block i, or while
 * every slot is loading.
 */
static struct slot *
claim_slot (uint64_t i, bool *load)
{
  struct slot *slot;

  for (;;) {
    slot = find_slot (i);
    if (slot && slot->state == SLOT_READY) {
      *load = false;
      return slot;
    }
    if (slot == NULL && (slot = victim_slot ()) != NULL) {
      slot->state = SLOT_LOADING;
      slot->block = i;
      *load = true;
      return slot;
    }
    pthread_cond_wait (&cache_cond, &cache_lock);
  }
}

/* Give a LOADING slot what was fetched (NULL: the fetch failed, the
 * slot is empty again) and wake the waiters (cache_lock held).
 */
static void
fill_slot (struct slot *slot, char *data)
{
  pthread_cond_broadcast (&cache_cond);
  if (data == NULL) {
    slot->state = SLOT_EMPTY;
    return;
  }
  free (slot->data);
  slot->data = data;
  slot->state = SLOT_READY;
}

/* Copy len bytes at offset off of a READY slot into buf (cache_lock
 * held).
 */
static void
copy_out (struct slot *slot, uint32_t off, uint32_t len, char *buf)
{
  memcpy (buf, slot->data + off, len);
  slot->used = ++tick;
}

/* Copy len bytes at offset off of block i into buf, through the
 * cache.
 */
static int
read_block (uint64_t i, uint32_t off, uint32_t len, char *buf)
{
  struct slot *slot;
  bool load;
  char *data;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&cache_lock);
    slot = claim_slot (i, &load);
    if (!load) {
      copy_out (slot, off, len, buf);
      return 0;
    }
  }
  data = fetch_block (i);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&cache_lock);
    fill_slot (slot, data);
    if (data)
      copy_out (slot, off, len, buf);
  }
  if (data == NULL) {
    errno = EIO;
    return -1;
  }
  return 0;
}

/* Read. */
static int
backup_pread (void *handle UNUSED, void *buf, uint32_t count,
              uint64_t offset, uint32_t flags UNUSED)
{
  char *p = buf;

  while (count > 0) {
    uint64_t i = offset / manifest->block_size;
    uint32_t off = (uint32_t) (offset % manifest->block_size);
    uint32_t n = bs_manifest_block_len (manifest, i) - off;
    if (n > count)
      n = count;
    if (manifest->zero[i])
      memset (p, 0, n);
    else if (read_block (i, off, n, p) == -1)
      return -1;
    p += n;
    offset += n;
    count -= n;
  }
  return 0;
}

/* Extents: all-zero blocks are holes that read as zeroes. */
static int
backup_extents (void *handle UNUSED, uint32_t count, uint64_t offset,
                uint32_t flags UNUSED, struct nbdkit_extents *extents)
{
  uint64_t end = offset + count;

  while (offset < end) {
    uint64_t i = offset / manifest->block_size;
    uint64_t next = (i + 1) * manifest->block_size;
    uint32_t type = manifest->zero[i]
      ? NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO : 0;
    if (next > manifest->size)
      next = manifest->size;
    if (nbdkit_add_extent (extents, offset, next - offset, type) == -1)
      return -1;
    offset = next;
  }
  return 0;
}

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static struct nbdkit_plugin plugin = {
  .name = "backup",
  .longname = "nbdkit backup plugin (nbdkit-replicate)",
  .version = PACKAGE_VERSION,
  .unload = backup_unload,
  .config = backup_config,
  .config_complete = backup_config_complete,
  .config_help = backup_config_help,
  .magic_config_key = "target",
  .get_ready = backup_get_ready,
  .dump_plugin = backup_dump_plugin,
  .open = backup_open,
  .get_size = backup_get_size,
  .can_write = backup_can_write,
  .can_multi_conn = backup_can_multi_conn,
  .pread = backup_pread,
  .extents = backup_extents,
  .errno_is_preserved = 1,
};

NBDKIT_REGISTER_PLUGIN (plugin)
