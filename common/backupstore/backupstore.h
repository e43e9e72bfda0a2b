/* SPDX-License-Identifier: BSD-3-Clause */
/* The backup store: objects in S3 or on a WebDAV server, over libcurl.
 *
 * store.c      targets, options; one request done synchronously
 *              (thread-safe), with retries and backoff for transient
 *              failures
 * multi.c      many requests in flight on one thread (curl multi)
 * s3.c         S3: credentials, URLs, SigV4 through libcurl,
 *              ListObjectsV2, errors
 * dav.c        WebDAV: URLs, MKCOL of missing collections, PROPFIND,
 *              PUT then MOVE for objects that must appear whole
 * sigv4.c      the pure parts of S3 request construction (unit-tested)
 * xml.c        the little XML reading the two protocols need
 * block.c      blocks: SHA-256, zstd, all-zero detection
 * manifest.c   the backup manifest (JSON) and the store layout
 * catalog.c    volumes and backups in a store: list, load, find, locks
 *
 * Errors are printed with nbdkit_error (nbdrep and the unit tests
 * define it too) and name the object, the HTTP status and the server's
 * error code; functions then return -1 (or NULL).  Secrets never appear
 * in a message or a debug line.
 *
 * Threads: a store may be used by many threads at once for the
 * synchronous requests (bs_get ... bs_list); a bs_multi, a hash set
 * and a manifest belong to one thread (bs_multi_wakeup excepted).
 *
 * Store layout under the target's prefix (DESIGN: see manifest.c):
 *   volumes/VOLUME/backups/NAME.json        a manifest, written last
 *   volumes/VOLUME/blocks/HH/SHA256.zst     a block, content-addressed
 *   volumes/VOLUME/locks/KIND-ID.json       backup and delete locks
 */

#ifndef BACKUPSTORE_H
#define BACKUPSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The two message functions of nbdkit the library calls (the plugin
 * gets nbdkit's, nbdrep and the unit tests define their own).
 */
extern void nbdkit_error (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
extern void nbdkit_debug (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));

/* ---- store.c ----------------------------------------------------- */

/* A growing byte buffer (response bodies). */
struct bs_buf {
  char *data;
  size_t len, cap;
};
extern void bs_buf_free (struct bs_buf *b);

struct bs_store;

/* The help text of the store options (KEY=VALUE), for --help. */
#define BS_OPTIONS_HELP \
  "endpoint=URL        S3 endpoint (default\n" \
  "                    https://s3.REGION.amazonaws.com)\n" \
  "region=REGION       S3 region (default $AWS_REGION or us-east-1)\n" \
  "addressing=path|virtual  S3 bucket in the path or the host name\n" \
  "credentials=FILE    S3: AWS credentials file; WebDAV: a netrc file\n" \
  "profile=NAME        profile in the credentials file (default\n" \
  "                    $AWS_PROFILE or default)\n" \
  "cafile=FILE         CA certificates to check the server with\n" \
  "insecure=true       do not check the server's certificate\n" \
  "connections=N       transfers in flight (default 8)\n" \
  "retries=N           retries of a transient failure (default 5)\n" \
  "timeout=SECS        one request's timeout (default 120)\n"

/* Is key one of the store options? */
extern bool bs_config_is_key (const char *key);
/* Is arg "KEY=VALUE" with a store option's KEY? */
extern bool bs_is_option (const char *arg);
/* Open the store target (s3://BUCKET[/PREFIX] or http(s)://HOST[/PATH])
 * with the options opts[0..nopts), each "KEY=VALUE": parse them and
 * read the credentials.  No request is sent; bs_store_check does one.
 * NULL after an error.
 */
extern struct bs_store *bs_store_new (const char *target, size_t nopts,
                                      char *const *opts);
extern void bs_store_close (struct bs_store *s);
/* Check that the store answers and accepts the credentials (a listing
 * of the prefix); its error says what is wrong (missing bucket, wrong
 * secret ...).
 */
extern int bs_store_check (struct bs_store *s);
/* The target without options: "s3://bucket/prefix", "http://h/p". */
extern const char *bs_store_target (const struct bs_store *s);
/* How many transfers bs_multi keeps in flight. */
extern unsigned bs_store_connections (const struct bs_store *s);

/* Results of one request. */
enum bs_result {
  BS_ERROR = -1,
  BS_OK = 0,
  BS_NOT_FOUND = 1,
};

/* GET key into out (emptied first). */
extern enum bs_result bs_get (struct bs_store *s, const char *key,
                              struct bs_buf *out);
/* PUT len bytes at key. */
extern enum bs_result bs_put (struct bs_store *s, const char *key,
                              const void *data, size_t len);
/* PUT an object no reader may ever see half-written (a manifest): S3
 * shows an object only once its PUT is complete; on WebDAV it is PUT
 * under a temporary name in the same collection and MOVEd into place.
 */
extern enum bs_result bs_put_atomic (struct bs_store *s, const char *key,
                                     const void *data, size_t len);
/* HEAD key: BS_OK if it exists. */
extern enum bs_result bs_head (struct bs_store *s, const char *key);
/* DELETE key (a missing key is BS_NOT_FOUND, not an error). */
extern enum bs_result bs_delete (struct bs_store *s, const char *key);

/* A listing: names relative to the listed prefix. */
struct bs_entry {
  char *name;                   /* "a.json"; a directory ends in '/' */
  time_t mtime;                 /* server time of the last write, or 0 */
  uint64_t size;
};
struct bs_list {
  struct bs_entry *e;
  size_t n, cap;
};
extern void bs_list_free (struct bs_list *l);
/* List what is under prefix (a key ending in '/'): its direct children
 * (directories too), or with recursive every object below it (names
 * with their subdirectories, "ab/cd.zst").  A prefix with nothing under
 * it is an empty list.
 */
extern int bs_list (struct bs_store *s, const char *prefix, bool recursive,
                    struct bs_list *out);

/* Many requests in flight (curl multi); one thread uses a bs_multi. */
enum bs_method { BS_METHOD_GET, BS_METHOD_PUT, BS_METHOD_HEAD,
                 BS_METHOD_DELETE };
struct bs_request;
typedef void (*bs_done_fn) (void *opaque, enum bs_result r,
                            struct bs_buf *body);
struct bs_multi;
extern struct bs_multi *bs_multi_new (struct bs_store *s);
/* Free a multi, abandoning the requests not finished (their done
 * functions are not called).
 */
extern void bs_multi_free (struct bs_multi *m);
/* Queue a request; data (PUT) must live until done is called, with the
 * result and for GET the body (the callee may steal body->data).
 */
extern int bs_multi_add (struct bs_multi *m, enum bs_method method,
                         const char *key, const void *data, size_t len,
                         bs_done_fn done, void *opaque);
/* Requests queued or in flight. */
extern size_t bs_multi_pending (const struct bs_multi *m);
/* Wake a bs_multi_run sleeping in another thread (thread-safe). */
extern void bs_multi_wakeup (struct bs_multi *m);
/* Run transfers for at most timeout_ms (less if one completes); calls
 * the done functions of the requests that finished.  -1 (message
 * printed) if libcurl's multi interface fails: then the caller frees
 * the multi, abandoning what is pending.
 */
extern int bs_multi_run (struct bs_multi *m, int timeout_ms);
/* Run transfers until at most max_pending requests are pending (0:
 * until all are done).  -1 as bs_multi_run.
 */
extern int bs_multi_wait (struct bs_multi *m, size_t max_pending);
/* Seconds on the monotonic clock. */
extern double bs_now (void);

/* ---- sigv4.c ----------------------------------------------------- */

/* One query parameter, not encoded; value NULL is "key=". */
struct bs_param {
  const char *key, *value;
};
/* Percent-encode s as SigV4 wants (unreserved A-Z a-z 0-9 - . _ ~ kept,
 * '/' kept if keep_slash, the rest %XX in upper case).
 */
extern char *bs_uri_encode (const char *s, bool keep_slash);
/* The canonical query string: each key and value encoded, sorted by
 * key then value, "k=v" joined with '&' (an empty value keeps its '=').
 */
extern char *bs_canonical_query (const struct bs_param *params, size_t n);
/* Where an S3 bucket lives. */
struct bs_s3_addr {
  const char *scheme;           /* "https" */
  const char *host;             /* "s3.us-east-1.amazonaws.com" or "h:port" */
  const char *bucket;
  bool virtual_host;            /* bucket.host/key, not host/bucket/key */
};
/* The URL of key (may be "" for the bucket) with query (may be NULL). */
extern char *bs_s3_url (const struct bs_s3_addr *a, const char *key,
                        const char *query);
/* The Host header a request to a goes with. */
extern char *bs_s3_host (const struct bs_s3_addr *a);
/* The x-amz-content-sha256 header line of a payload.  -1 (message
 * printed) if OpenSSL fails.
 */
extern int bs_payload_header (const void *data, size_t len, char line[96]);
/* CURLOPT_AWS_SIGV4's parameter for region. */
extern char *bs_sigv4_provider (const char *region);

/* ---- block.c ----------------------------------------------------- */

#define BS_HASH_LEN 32
/* SHA-256 of a block.  -1 (message printed) if OpenSSL fails. */
extern int bs_hash (const void *data, size_t len, uint8_t hash[BS_HASH_LEN]);
extern void bs_hash_to_hex (const uint8_t hash[BS_HASH_LEN], char hex[65]);
/* 0, or -1 if hex is not 64 hex digits. */
extern int bs_hash_from_hex (const char *hex, uint8_t hash[BS_HASH_LEN]);
/* Is the block all zeroes? */
extern bool bs_is_zero (const void *data, size_t len);
/* Compress a block with zstd into a new buffer. */
extern int bs_compress (const void *data, size_t len, void **out,
                        size_t *outlen);
/* Decompress a stored block into out (len bytes expected) and check
 * its hash.  0, or -1 with a reason in why (no message printed).
 */
extern int bs_decode (const void *comp, size_t complen, void *out,
                      size_t len, const uint8_t hash[BS_HASH_LEN],
                      const char **why);

/* A set of hashes (open addressing; not thread-safe). */
struct bs_hashset;
extern struct bs_hashset *bs_hashset_new (void);
extern void bs_hashset_free (struct bs_hashset *h);
/* Add a hash: 1 if added, 0 if it was there, -1 out of memory. */
extern int bs_hashset_add (struct bs_hashset *h,
                           const uint8_t hash[BS_HASH_LEN]);
extern bool bs_hashset_contains (const struct bs_hashset *h,
                                 const uint8_t hash[BS_HASH_LEN]);
extern size_t bs_hashset_size (const struct bs_hashset *h);

/* ---- manifest.c -------------------------------------------------- */

struct bs_counts {
  uint64_t read_blocks;         /* blocks read from the volume */
  uint64_t zero_blocks;         /* all-zero blocks in the map */
  uint64_t uploaded_blocks;     /* blocks this backup stored */
  uint64_t uploaded_bytes;      /* their compressed size */
  uint64_t existing_blocks;     /* read, found in the store already */
};

/* A backup: what its manifest says. */
struct bs_manifest {
  char *name, *volume;
  uint64_t size;                /* the volume's size in bytes */
  uint32_t block_size;
  time_t created;               /* backup-begin, UTC */
  time_t completed;
  char *consistency;            /* "point-in-time" or "live" */
  char *source;                 /* "leg 1" or the URI read, or NULL */
  char *base;                   /* the backup it is incremental to */
  char *token;                  /* the controller's name of this backup,
                                   the base it tracks the next one from */
  bool incremental;             /* only changed blocks were read */
  struct bs_counts counts;
  uint64_t nr_blocks;           /* ceil (size / block_size) */
  uint8_t (*hashes)[BS_HASH_LEN];
  bool *zero;                   /* zero[i]: block i is all zeroes */
};

/* Block sizes: powers of two in [BS_MIN_BLOCK, BS_MAX_BLOCK]. */
#define BS_MIN_BLOCK 4096
#define BS_MAX_BLOCK (64 * 1024 * 1024)
#define BS_DEFAULT_BLOCK (2 * 1024 * 1024)

/* Names must match this (backups, volumes); 1..128 characters. */
extern bool bs_valid_name (const char *s);
/* A new manifest with nr_blocks zero blocks. */
extern struct bs_manifest *bs_manifest_new (const char *name,
                                            const char *volume,
                                            uint64_t size,
                                            uint32_t block_size);
extern void bs_manifest_free (struct bs_manifest *m);
/* The manifest's JSON text (NULL on error). */
extern char *bs_manifest_encode (const struct bs_manifest *m);
/* Decode a manifest; what names where it came from in errors. */
extern struct bs_manifest *bs_manifest_decode (const char *text, size_t len,
                                               const char *what);
/* The size of block i (the last one may be short). */
extern uint32_t bs_manifest_block_len (const struct bs_manifest *m,
                                       uint64_t i);

/* Keys of the layout (new strings). */
extern char *bs_key_volumes (void);
extern char *bs_key_backups (const char *volume);
extern char *bs_key_manifest (const char *volume, const char *name);
extern char *bs_key_blocks (const char *volume);
extern char *bs_key_block (const char *volume,
                           const uint8_t hash[BS_HASH_LEN]);
extern char *bs_key_locks (const char *volume);
/* The hash of a block key relative to bs_key_blocks ("ab/HASH.zst");
 * -1 if it is not one.
 */
extern int bs_block_key_hash (const char *rel, uint8_t hash[BS_HASH_LEN]);

/* ---- catalog.c --------------------------------------------------- */

/* A backup found in a store. */
struct bs_backup {
  char *volume, *name;
  time_t mtime;                 /* when its manifest was written */
};
struct bs_backups {
  struct bs_backup *b;
  size_t n;
};
extern void bs_backups_free (struct bs_backups *l);
/* Every backup of volume (NULL: of every volume), oldest first. */
extern int bs_list_backups (struct bs_store *s, const char *volume,
                            struct bs_backups *out);
/* Load a backup's manifest (checking it names volume and name). */
extern struct bs_manifest *bs_load_manifest (struct bs_store *s,
                                             const char *volume,
                                             const char *name);
/* Find the volume of backup name (volume may be given, else searched;
 * an ambiguous name is an error).  Returns a new string.
 */
extern char *bs_find_volume (struct bs_store *s, const char *name,
                             const char *volume);

/* Locks between backups and deletes of one volume: a lock object is
 * written, then the locks are listed; a lock of the other kind written
 * within bs_lock_lifetime () seconds before ours (server times) makes
 * us back off.  Holders refresh theirs after 2/5 of it.
 */
#define BS_LOCK_LIFETIME 150
/* BS_LOCK_LIFETIME, or NBDREP_LOCK_LIFETIME (tests). */
extern unsigned bs_lock_lifetime (void);
struct bs_lock;
/* Take a lock of kind "backup" or "delete". */
extern struct bs_lock *bs_lock_take (struct bs_store *s, const char *volume,
                                     const char *kind);
/* Rewrite the lock if it is due (cheap to call often).  -1 on error. */
extern int bs_lock_refresh (struct bs_lock *l);
/* Remove the lock and free it. */
extern void bs_lock_release (struct bs_lock *l);

#endif /* BACKUPSTORE_H */
