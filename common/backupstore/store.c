/* SPDX-License-Identifier: BSD-3-Clause */
/* Opening a store, and running requests with retries.
 *
 * store-config.c parses the target and its options.  Credentials are
 * read from the environment or a file when the store is opened, never
 * from the command line, and never printed: they reach libcurl only as
 * options of its handles (S3: CURLOPT_USERNAME and CURLOPT_PASSWORD;
 * WebDAV: a netrc file), CURLOPT_VERBOSE is never set, and messages
 * name objects by target and key, never by a URL with a login in it.
 *
 * Every request is retried with exponential backoff (0.5 s doubling,
 * at most 8 s, each delay jittered between half and all of it, so that
 * parallel transfers do not retry in step), `retries` times, when the
 * failure is transient: HTTP 408, 429, 500, 502, 503, 504 (and S3's
 * 400 RequestTimeout), a refused, reset or timed-out connection.  Any
 * other failure is final at once.  404 is "not found", not an error,
 * for GET, HEAD, DELETE and listings; the message of a failure names
 * the object, the verb, the HTTP status and the code the server gave
 * ("s3://b/p/volumes/...: PUT: HTTP 403 SignatureDoesNotMatch: ...").
 *
 * Easy handles are pooled (with their connections) under the store's
 * lock, so the synchronous functions may be called from many threads
 * at once; everything else in a store is read-only once it is open.
 * multi.c runs many requests on one thread with the same attempts.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "cleanup.h"
#include "random.h"
#include "internal.h"
#include "array.h"

#define CONNECT_TIMEOUT_MS 10000L
#define BACKOFF_FIRST 0.5
#define BACKOFF_MAX 8.0
#define MAX_BODY (1024 * 1024 * 1024)

/* ---- buffers, lists, secrets, the clock -------------------------- */

/* Free a buffer's data. */
void
bs_buf_free (struct bs_buf *b)
{
  free (b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* Append to a buffer, keeping a NUL after the data.  -1 if it would
 * pass MAX_BODY or memory is short.
 */
static int
buf_append (struct bs_buf *b, const void *data, size_t len)
{
  if (len > MAX_BODY - b->len - 1)
    return -1;
  if (b->len + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    char *p;
    while (cap < b->len + len + 1)
      cap *= 2;
    if ((p = realloc (b->data, cap)) == NULL)
      return -1;
    b->data = p;
    b->cap = cap;
  }
  memcpy (b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
  return 0;
}

/* Add an entry to a listing. */
int
list_add (struct bs_list *l, const char *name, time_t mtime, uint64_t size)
{
  struct bs_entry *e = array_reserve_one (l->e, l->n, &l->cap, sizeof *e, 64);

  if (e == NULL)
    return -1;
  l->e = e;
  l->e[l->n].name = strdup (name);
  if (l->e[l->n].name == NULL)
    return -1;
  l->e[l->n].mtime = mtime;
  l->e[l->n].size = size;
  l->n++;
  return 0;
}

/* Free a listing. */
void
bs_list_free (struct bs_list *l)
{
  size_t i;

  for (i = 0; i < l->n; ++i)
    free (l->e[i].name);
  free (l->e);
  l->e = NULL;
  l->n = l->cap = 0;
}

/* Wipe a secret before freeing it. */
void
secret_free (char *p)
{
  if (p) {
    explicit_bzero (p, strlen (p));
    free (p);
  }
}

/* Monotonic seconds. */
double
bs_now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ---- the store --------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

/* Initialise libcurl once per process. */
static void
init_curl (void)
{
  curl_init_result = curl_global_init (CURL_GLOBAL_DEFAULT);
}

/* Open a store on cfg (taken, freed on error). */
static struct bs_store *
store_open (struct bs_config *cfg)
{
  struct bs_store *s;

  pthread_once (&curl_once, init_curl);
  if (curl_init_result != CURLE_OK) {
    nbdkit_error ("libcurl: %s", curl_easy_strerror (curl_init_result));
    bs_config_free (cfg);
    return NULL;
  }
  s = calloc (1, sizeof *s);
  if (s == NULL) {
    nbdkit_error ("out of memory");
    bs_config_free (cfg);
    return NULL;
  }
  s->cfg = cfg;
  pthread_mutex_init (&s->lock, NULL);
  if (cfg->kind == BS_S3 && s3_open (s) == -1) {
    bs_store_close (s);
    return NULL;
  }
  return s;
}

/* Open a store from a target and its options. */
struct bs_store *
bs_store_new (const char *target, size_t nopts, char *const *opts)
{
  struct bs_config *cfg = bs_config_new (target);
  size_t i;

  if (cfg == NULL)
    return NULL;
  for (i = 0; i < nopts; ++i)
    if (bs_config_set (cfg, opts[i]) == -1) {
      bs_config_free (cfg);
      return NULL;
    }
  return store_open (cfg);
}

/* Close a store. */
void
bs_store_close (struct bs_store *s)
{
  size_t i;

  if (s == NULL)
    return;
  for (i = 0; i < s->nr_idle; ++i)
    curl_easy_cleanup (s->idle[i]);
  free (s->idle);
  pthread_mutex_destroy (&s->lock);
  free (s->scheme);
  free (s->host);
  secret_free (s->access_key);
  secret_free (s->secret_key);
  secret_free (s->session_token);
  free (s->provider);
  bs_config_free (s->cfg);
  free (s);
}

/* The canonical target. */
const char *
bs_store_target (const struct bs_store *s)
{
  return s->cfg->target;
}

/* Transfers in flight in a bs_multi. */
unsigned
bs_store_connections (const struct bs_store *s)
{
  return s->cfg->connections;
}

/* Check the store with a listing of its top. */
int
bs_store_check (struct bs_store *s)
{
  struct bs_list l = { 0 };
  int r = bs_list (s, "", false, &l);

  bs_list_free (&l);
  return r;
}

/* List a prefix. */
int
bs_list (struct bs_store *s, const char *prefix, bool recursive,
         struct bs_list *out)
{
  if (s->cfg->kind == BS_S3)
    return s3_list (s, prefix, recursive, out);
  return dav_list (s, prefix, recursive, out);
}

/* ---- easy handles ------------------------------------------------ */

/* An easy handle from the pool, or a new one. */
static CURL *
pool_get (struct bs_store *s)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
    if (s->nr_idle > 0)
      return s->idle[--s->nr_idle];
  }
  return curl_easy_init ();
}

/* Give an easy handle back to the pool. */
static void
pool_put (struct bs_store *s, CURL *easy)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&s->lock);
  CURL **p = array_reserve_one (s->idle, s->nr_idle, &s->cap_idle,
                                sizeof *p, 16);

  if (p == NULL) {
    curl_easy_cleanup (easy);
    return;
  }
  s->idle = p;
  s->idle[s->nr_idle++] = easy;
}

/* ---- requests ---------------------------------------------------- */

/* Add a header line. */
int
req_add_header (struct bs_request *r, const char *line)
{
  struct curl_slist *h = curl_slist_append (r->headers, line);

  if (h == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  r->headers = h;
  return 0;
}

/* Build a request. */
struct bs_request *
req_new (struct bs_store *s, const char *verb, const char *key,
         const void *body, size_t len)
{
  struct bs_request *r = calloc (1, sizeof *r);
  int h;

  if (r == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  r->s = s;
  r->verb = verb;
  r->body = body;
  r->body_len = len;
  r->key = strdup (key);
  r->url = s->cfg->kind == BS_S3 ? s3_url (s, key) : dav_url (s, key);
  if (r->key == NULL || r->url == NULL) {
    nbdkit_error ("out of memory");
    req_free (r);
    return NULL;
  }
  h = s->cfg->kind == BS_S3 ? s3_add_headers (s, r) : dav_add_headers (s, r);
  if (h == 0 && strcmp (verb, "PUT") == 0)
    h = req_add_header (r, "Content-Type: application/octet-stream");
  if (h == -1) {
    req_free (r);
    return NULL;
  }
  return r;
}

/* Free a request. */
void
req_free (struct bs_request *r)
{
  if (r == NULL)
    return;
  free (r->key);
  free (r->url);
  curl_slist_free_all (r->headers);
  bs_buf_free (&r->resp);
  free (r);
}

/* libcurl's write callback: append to the response. */
static size_t
write_cb (char *ptr, size_t size, size_t nmemb, void *opaque)
{
  struct bs_request *r = opaque;

  if (buf_append (&r->resp, ptr, size * nmemb) == -1) {
    r->resp_too_big = true;
    return 0;
  }
  return size * nmemb;
}

/* libcurl's read callback: the next piece of the body. */
static size_t
read_cb (char *ptr, size_t size, size_t nmemb, void *opaque)
{
  struct bs_request *r = opaque;
  size_t n = size * nmemb, left = r->body_len - r->body_off;

  if (n > left)
    n = left;
  memcpy (ptr, (const char *) r->body + r->body_off, n);
  r->body_off += n;
  return n;
}

/* libcurl's seek callback: rewind the body (a resend). */
static int
seek_cb (void *opaque, curl_off_t offset, int origin)
{
  struct bs_request *r = opaque;

  if (origin != SEEK_SET || offset < 0 || (size_t) offset > r->body_len)
    return CURL_SEEKFUNC_CANTSEEK;
  r->body_off = (size_t) offset;
  return CURL_SEEKFUNC_OK;
}

/* Set the body options of an upload (PUT, PROPFIND). */
static CURLcode
set_upload_options (struct bs_request *r, CURL *easy)
{
  CURLcode c = CURLE_OK;

  SETOPT (c, easy, CURLOPT_UPLOAD, 1L);
  SETOPT (c, easy, CURLOPT_READFUNCTION, read_cb);
  SETOPT (c, easy, CURLOPT_READDATA, r);
  SETOPT (c, easy, CURLOPT_SEEKFUNCTION, seek_cb);
  SETOPT (c, easy, CURLOPT_SEEKDATA, r);
  SETOPT (c, easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t) r->body_len);
  return c;
}

/* Set the options of one attempt of r on easy (reset first). */
static CURLcode
set_options (struct bs_request *r, CURL *easy)
{
  const struct bs_config *cfg = r->s->cfg;
  CURLcode c = CURLE_OK;

  curl_easy_reset (easy);
  SETOPT (c, easy, CURLOPT_URL, r->url);
  SETOPT (c, easy, CURLOPT_PROTOCOLS_STR, "http,https");
  SETOPT (c, easy, CURLOPT_NOSIGNAL, 1L);
  SETOPT (c, easy, CURLOPT_ERRORBUFFER, r->errbuf);
  SETOPT (c, easy, CURLOPT_WRITEFUNCTION, write_cb);
  SETOPT (c, easy, CURLOPT_WRITEDATA, r);
  SETOPT (c, easy, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
  SETOPT (c, easy, CURLOPT_TIMEOUT_MS, (long) (cfg->timeout * 1000));
  SETOPT (c, easy, CURLOPT_HTTPHEADER, r->headers);
  if (cfg->cafile)
    SETOPT (c, easy, CURLOPT_CAINFO, cfg->cafile);
  if (cfg->insecure) {
    SETOPT (c, easy, CURLOPT_SSL_VERIFYPEER, 0L);
    SETOPT (c, easy, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (c == CURLE_OK && (strcmp (r->verb, "PUT") == 0 ||
                        strcmp (r->verb, "PROPFIND") == 0))
    c = set_upload_options (r, easy);
  if (strcmp (r->verb, "HEAD") == 0)
    SETOPT (c, easy, CURLOPT_NOBODY, 1L);
  else if (strcmp (r->verb, "GET") != 0 && strcmp (r->verb, "PUT") != 0)
    SETOPT (c, easy, CURLOPT_CUSTOMREQUEST, r->verb);
  if (c == CURLE_OK)
    c = r->s->cfg->kind == BS_S3 ? s3_setup (r->s, easy)
      : dav_setup (r->s, easy);
  return c;
}

/* An easy handle set up for the next attempt of r, or NULL (message
 * printed).
 */
CURL *
req_attach (struct bs_request *r)
{
  CURL *easy = pool_get (r->s);
  CURLcode c;

  if (easy == NULL) {
    nbdkit_error ("%s/%s: %s: libcurl: cannot make a handle",
                  r->s->cfg->target, r->key, r->verb);
    return NULL;
  }
  r->body_off = 0;
  r->errbuf[0] = '\0';
  r->resp_too_big = false;
  bs_buf_free (&r->resp);
  c = set_options (r, easy);
  if (c != CURLE_OK) {
    nbdkit_error ("%s/%s: %s: libcurl: %s", r->s->cfg->target, r->key,
                  r->verb, curl_easy_strerror (c));
    curl_easy_cleanup (easy);
    return NULL;
  }
  r->easy = easy;
  return easy;
}

/* Is a libcurl failure worth another attempt? */
static bool
transient_curl_error (CURLcode c)
{
  switch (c) {
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_HTTP3:
  case CURLE_AGAIN:
    return true;
  default:
    return false;
  }
}

/* The S3 error code of a failed request ("" if none). */
static void
error_code (const struct bs_request *r, char *code, size_t len)
{
  code[0] = '\0';
  if (r->s->cfg->kind == BS_S3)
    s3_error_code (&r->resp, code, len);
}

/* Is an HTTP status (with the server's error code) worth another
 * attempt?
 */
static bool
transient_status (const struct bs_request *r, long status)
{
  char code[256];

  switch (status) {
  case 408: case 429: case 500: case 502: case 503: case 504:
    return true;
  case 400:
    error_code (r, code, sizeof code);
    return strncmp (code, "RequestTimeout", 14) == 0;
  default:
    return false;
  }
}

/* What an error body says when it is not an S3 error: an HTML page's
 * title, or a short text's first line ("" if neither).
 */
static void
body_summary (const struct bs_buf *body, char *out, size_t len)
{
  CLEANUP_FREE char *title = NULL;
  size_t n;

  out[0] = '\0';
  if (body->len == 0)
    return;
  title = xml_html_title (body->data, body->len);
  if (title) {
    snprintf (out, len, "(%s)", title);
    return;
  }
  n = strcspn (body->data, "\r\n");
  if (body->data[0] != '<' && n > 0 && n < 200)
    snprintf (out, len, "(%.*s)", (int) n, body->data);
}

/* Parse the reply of a request as XML. */
xmlDoc *
req_parse_xml (const struct bs_request *r)
{
  char why[256];
  xmlDoc *doc = xml_parse (r->resp.data, r->resp.len, why, sizeof why);

  if (doc == NULL)
    nbdkit_error ("%s/%s: %s: the reply is not well-formed XML (%s)",
                  r->s->cfg->target, r->key, r->verb, why);
  return doc;
}

/* Describe the failure of the last attempt in buf. */
static void
describe_failure (const struct bs_request *r, CURLcode c, long status,
                  char *buf, size_t len)
{
  char code[256];

  if (c == CURLE_WRITE_ERROR && r->resp_too_big)
    snprintf (buf, len, "the response is larger than %d MiB",
              MAX_BODY / (1024 * 1024));
  else if (c != CURLE_OK)
    snprintf (buf, len, "%s", r->errbuf[0] ? r->errbuf
              : curl_easy_strerror (c));
  else {
    error_code (r, code, sizeof code);
    if (code[0] == '\0')
      body_summary (&r->resp, code, sizeof code);
    snprintf (buf, len, "HTTP %ld%s%s", status, code[0] ? " " : "", code);
  }
}

/* Seconds to wait before attempt n + 1 (n >= 1 attempts made): the
 * exponential backoff, jittered between half and all of it.
 */
static double
retry_delay (unsigned n)
{
  double d = BACKOFF_FIRST;

  while (--n > 0 && d < BACKOFF_MAX)
    d *= 2;
  if (d > BACKOFF_MAX)
    d = BACKOFF_MAX;
  return d / 2 + d / 2 * (double) (random_u64 () % 1024) / 1024.0;
}

/* Does a 404 of this request mean "not found" (rather than a missing
 * bucket, which is an error)?
 */
static bool
is_not_found (const struct bs_request *r)
{
  char code[256];

  if (strcmp (r->verb, "PUT") == 0)
    return false;
  error_code (r, code, sizeof code);
  return strncmp (code, "NoSuchBucket", 12) != 0;
}

/* Is this a WebDAV PUT into a missing collection, not yet helped with
 * MKCOL?  409 (RFC 4918), or 500 from nginx (without
 * create_full_put_path).
 */
static bool
needs_parents (const struct bs_request *r, long status)
{
  return (status == 409 || status == 500) && r->s->cfg->kind == BS_DAV &&
    strcmp (r->verb, "PUT") == 0 && !r->made_parents;
}

/* The outcome of an HTTP status (the transfer itself went through), or
 * OUT_FAIL when it is a failure.
 */
static enum outcome
status_outcome (struct bs_request *r, long status)
{
  bool mkcol = strcmp (r->verb, "MKCOL") == 0;

  if (status >= 200 && status <= 299)
    return OUT_OK;
  if (mkcol && status == 405)
    return OUT_OK;              /* the collection exists */
  if (mkcol && status == 409)
    return OUT_NOT_FOUND;       /* its parent does not */
  if (status == 404 && is_not_found (r))
    return OUT_NOT_FOUND;
  if (needs_parents (r, status)) {
    r->made_parents = true;
    return OUT_MKCOL;
  }
  return OUT_FAIL;
}

/* The outcome of one attempt; prints the error when it is final. */
static enum outcome
classify (struct bs_request *r, CURLcode c)
{
  char why[512];
  long status = 0;
  enum outcome o;
  bool transient;
  double delay;

  if (c == CURLE_OK)
    c = curl_easy_getinfo (r->easy, CURLINFO_RESPONSE_CODE, &status);
  o = c == CURLE_OK ? status_outcome (r, status) : OUT_FAIL;
  if (o == OUT_MKCOL)
    return o;                   /* not an attempt of its own */
  r->attempt++;
  if (o != OUT_FAIL)
    return o;
  describe_failure (r, c, status, why, sizeof why);
  transient = c != CURLE_OK ? transient_curl_error (c)
    : transient_status (r, status);
  if (transient && r->attempt <= r->s->cfg->retries) {
    delay = retry_delay (r->attempt);
    nbdkit_debug ("%s/%s: %s: %s; retrying in %.1f s (attempt %u of %u)",
                  r->s->cfg->target, r->key, r->verb, why, delay,
                  r->attempt + 1, r->s->cfg->retries + 1);
    r->not_before = bs_now () + delay;
    return OUT_RETRY;
  }
  if (r->attempt > 1)
    nbdkit_error ("%s/%s: %s: %s (gave up after %u attempts)",
                  r->s->cfg->target, r->key, r->verb, why, r->attempt);
  else
    nbdkit_error ("%s/%s: %s: %s", r->s->cfg->target, r->key, r->verb, why);
  return OUT_FAIL;
}

/* End an attempt: its outcome, and the easy handle back to the pool. */
enum outcome
req_detach (struct bs_request *r, CURLcode c)
{
  enum outcome o = classify (r, c);

  pool_put (r->s, r->easy);
  r->easy = NULL;
  return o;
}

/* Sleep until the monotonic time t. */
static void
sleep_until (double t)
{
  double d = t - bs_now ();
  struct timespec ts;

  if (d <= 0)
    return;
  ts.tv_sec = (time_t) d;
  ts.tv_nsec = (long) ((d - (double) ts.tv_sec) * 1e9);
  while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
    ;
}

/* Run a request to the end on this thread. */
enum bs_result
run_sync (struct bs_request *r)
{
  for (;;) {
    CURL *easy = req_attach (r);

    if (easy == NULL)
      return BS_ERROR;
    switch (req_detach (r, curl_easy_perform (easy))) {
    case OUT_OK:
      return BS_OK;
    case OUT_NOT_FOUND:
      return BS_NOT_FOUND;
    case OUT_FAIL:
      return BS_ERROR;
    case OUT_RETRY:
      sleep_until (r->not_before);
      break;
    case OUT_MKCOL:
      if (dav_make_parents (r->s, r->key) == -1)
        return BS_ERROR;
      break;
    }
  }
}

/* Run one synchronous request with a body and keep its response. */
static enum bs_result
simple (struct bs_store *s, const char *verb, const char *key,
        const void *data, size_t len, struct bs_buf *out)
{
  struct bs_request *r = req_new (s, verb, key, data, len);
  enum bs_result res;

  if (r == NULL)
    return BS_ERROR;
  res = run_sync (r);
  if (out && res == BS_OK) {
    bs_buf_free (out);
    *out = r->resp;
    r->resp = (struct bs_buf) { 0 };
  }
  req_free (r);
  return res;
}

/* GET. */
enum bs_result
bs_get (struct bs_store *s, const char *key, struct bs_buf *out)
{
  return simple (s, "GET", key, NULL, 0, out);
}

/* PUT. */
enum bs_result
bs_put (struct bs_store *s, const char *key, const void *data, size_t len)
{
  return simple (s, "PUT", key, data, len, NULL);
}

/* PUT that never shows a partial object. */
enum bs_result
bs_put_atomic (struct bs_store *s, const char *key, const void *data,
               size_t len)
{
  if (s->cfg->kind == BS_S3)
    return bs_put (s, key, data, len);
  return dav_put_atomic (s, key, data, len);
}

/* HEAD. */
enum bs_result
bs_head (struct bs_store *s, const char *key)
{
  return simple (s, "HEAD", key, NULL, 0, NULL);
}

/* DELETE. */
enum bs_result
bs_delete (struct bs_store *s, const char *key)
{
  return simple (s, "DELETE", key, NULL, 0, NULL);
}
