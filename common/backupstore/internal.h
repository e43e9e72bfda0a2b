/* SPDX-License-Identifier: BSD-3-Clause */
/* What store.c shares with store-config.c (its target and options) and
 * the two protocols (s3.c, dav.c).
 *
 * A request is built once (URL, verb, headers, body) and can be run
 * several times: run_sync does it on a pooled easy handle, bs_multi
 * on its curl multi handle.  classify (store.c) turns the outcome of
 * one attempt into done, not found, retry or fail.  A request belongs
 * to one thread at a time; the store it points to is shared (its pool
 * of easy handles is under the store's lock, the rest is read-only
 * once the store is open).
 */

#ifndef BACKUPSTORE_INTERNAL_H
#define BACKUPSTORE_INTERNAL_H

#include <pthread.h>

#include <curl/curl.h>

#include "backupstore.h"
#include "xml.h"

enum bs_kind { BS_S3, BS_DAV };

struct bs_config {
  enum bs_kind kind;
  char *target;                 /* canonical: "s3://bucket/prefix" */
  char *bucket, *prefix;        /* S3; prefix "" or "a/b" */
  char *base_url;               /* WebDAV: "http://h:p/path/" */
  char *endpoint, *region, *addressing;
  char *credentials, *profile, *cafile;
  bool insecure;
  unsigned connections, retries;
  double timeout;
};

/* store-config.c: a target into a configuration with the default
 * options, an option "KEY=VALUE" into it, and freeing it.  NULL or -1
 * after nbdkit_error.
 */
extern struct bs_config *bs_config_new (const char *target);
extern int bs_config_set (struct bs_config *cfg, const char *option);
extern void bs_config_free (struct bs_config *cfg);

struct bs_store {
  struct bs_config *cfg;
  /* S3 */
  struct bs_s3_addr addr;
  char *scheme, *host;          /* of the endpoint */
  char *access_key, *secret_key, *session_token, *provider;
  /* idle easy handles (connections are kept with them) */
  pthread_mutex_t lock;
  CURL **idle;
  size_t nr_idle, cap_idle;
};

/* One request and the state of its attempts. */
struct bs_request {
  struct bs_store *s;
  char *key;                    /* relative to the target, for messages */
  char *url;
  const char *verb;             /* GET PUT HEAD DELETE PROPFIND MKCOL MOVE */
  const void *body;
  size_t body_len, body_off;
  struct curl_slist *headers;
  struct bs_buf resp;
  bool resp_too_big;            /* the response passed MAX_BODY */
  unsigned attempt;             /* attempts made */
  bool made_parents;            /* WebDAV: MKCOL done once already */
  double not_before;            /* monotonic time of the next attempt */
  CURL *easy;
  char errbuf[CURL_ERROR_SIZE];
  bs_done_fn done;              /* bs_multi only */
  void *opaque;
  struct bs_request *next;
};

enum outcome { OUT_OK, OUT_NOT_FOUND, OUT_RETRY, OUT_FAIL, OUT_MKCOL };

/* curl_easy_setopt unless an earlier one failed: *c keeps the first
 * failure, so a run of options is checked once at its end.
 */
#define SETOPT(c, easy, opt, val) \
  ((c) == CURLE_OK ? ((c) = curl_easy_setopt ((easy), (opt), (val))) : (c))

/* store.c */
extern struct bs_request *req_new (struct bs_store *s, const char *verb,
                                   const char *key, const void *body,
                                   size_t len);
extern void req_free (struct bs_request *r);
/* Add a header line to a request.  -1 (message printed) if out of
 * memory.
 */
extern int req_add_header (struct bs_request *r, const char *line);
/* An easy handle set up for the next attempt of r (also r->easy), or
 * NULL (message printed).
 */
extern CURL *req_attach (struct bs_request *r);
/* End an attempt of r with libcurl's result c: its outcome (a final
 * failure is printed, a retry has its time in r->not_before), and the
 * easy handle back to the pool.
 */
extern enum outcome req_detach (struct bs_request *r, CURLcode c);
/* Run a request to the end on this thread. */
extern enum bs_result run_sync (struct bs_request *r);
/* The reply of r parsed as XML, or NULL after a message naming the
 * object and the request ("...: PROPFIND: the reply is not well-formed
 * XML (line 1: ...)").
 */
extern xmlDoc *req_parse_xml (const struct bs_request *r);
/* Add an entry to a listing.  -1 if out of memory (nothing printed). */
extern int list_add (struct bs_list *l, const char *name, time_t mtime,
                     uint64_t size);
/* Free a string that held a secret, wiping it first. */
extern void secret_free (char *p);

/* s3.c */
extern char *s3_url (struct bs_store *s, const char *key);
/* Add the headers of an S3 request (the payload hash, the session
 * token).
 */
extern int s3_add_headers (struct bs_store *s, struct bs_request *r);
/* Set the signing options of an easy handle. */
extern CURLcode s3_setup (struct bs_store *s, CURL *easy);
extern int s3_open (struct bs_store *s);
extern int s3_list (struct bs_store *s, const char *prefix, bool recursive,
                    struct bs_list *out);
/* The server's error code and message of a failed S3 request, from its
 * XML body ("" if none).
 */
extern void s3_error_code (const struct bs_buf *body, char *code,
                           size_t len);
/* Parse an ISO 8601 UTC time (2024-01-02T03:04:05.000Z); 0 if bad. */
extern time_t parse_iso_time (const char *s);

/* dav.c */
extern char *dav_url (struct bs_store *s, const char *key);
/* Add the headers of a WebDAV request (Depth of a PROPFIND). */
extern int dav_add_headers (struct bs_store *s, struct bs_request *r);
/* Set the login options of an easy handle. */
extern CURLcode dav_setup (struct bs_store *s, CURL *easy);
extern int dav_make_parents (struct bs_store *s, const char *key);
extern int dav_list (struct bs_store *s, const char *prefix, bool recursive,
                     struct bs_list *out);
/* PUT under a temporary name, then MOVE into place. */
extern enum bs_result dav_put_atomic (struct bs_store *s, const char *key,
                                      const void *data, size_t len);

#endif /* BACKUPSTORE_INTERNAL_H */
