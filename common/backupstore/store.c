/* SPDX-License-Identifier: BSD-3-Clause */
/* Targets, options, and running requests with retries.
 *
 * A target is s3://BUCKET[/PREFIX] or http(s)://HOST[/PATH] (WebDAV),
 * with options as KEY=VALUE (BS_OPTIONS_HELP).  Credentials are read
 * from the environment or a file when the store is opened, never from
 * the command line, and never printed.
 *
 * Every request is retried with exponential backoff (0.5 s doubling,
 * at most 8 s between attempts, `retries` times) when the failure is
 * transient: HTTP 408, 429 and 5xx, a refused, reset or timed-out
 * connection.  Any other 4xx fails at once.  404 is "not found", not
 * an error, for GET, HEAD, DELETE and listings; the message of a
 * failure names the object, the verb, the HTTP status and the code the
 * server gave ("s3://b/p/volumes/...: PUT: HTTP 403
 * SignatureDoesNotMatch: ...").
 *
 * Easy handles are pooled (with their connections) under a mutex, so
 * the synchronous functions may be called from many threads at once;
 * a bs_multi belongs to the one thread that runs it.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "cleanup.h"
#include "internal.h"

#define DEFAULT_CONNECTIONS 8
#define DEFAULT_RETRIES 5
#define DEFAULT_TIMEOUT 120.0
#define BACKOFF_FIRST 0.5
#define BACKOFF_MAX 8.0
#define MAX_BODY (1024 * 1024 * 1024)

/* ---- buffers and lists ------------------------------------------- */

/* Free a buffer's data. */
void
bs_buf_free (struct bs_buf *b)
{
  free (b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* Append to a buffer, keeping a NUL after the data.  -1 if too big. */
int
buf_append (struct bs_buf *b, const void *data, size_t len)
{
  if (b->len + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    char *p;
    while (cap < b->len + len + 1)
      cap *= 2;
    if (cap > MAX_BODY || (p = realloc (b->data, cap)) == NULL)
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
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    struct bs_entry *e = realloc (l->e, cap * sizeof *e);
    if (e == NULL)
      return -1;
    l->e = e;
    l->cap = cap;
  }
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

/* Monotonic seconds. */
double
now_mono (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ---- configuration ----------------------------------------------- */

static const char *const config_keys[] = {
  "endpoint", "region", "addressing", "credentials", "profile", "cafile",
  "insecure", "connections", "retries", "timeout",
};

/* Is key a store option? */
bool
bs_config_is_key (const char *key)
{
  size_t i;

  for (i = 0; i < sizeof config_keys / sizeof config_keys[0]; ++i)
    if (strcmp (key, config_keys[i]) == 0)
      return true;
  return false;
}

/* Split "s3://bucket/prefix/" into bucket and prefix (no slashes at its
 * ends).
 */
static int
parse_s3_target (struct bs_config *cfg, const char *rest)
{
  const char *slash = strchr (rest, '/');
  size_t blen = slash ? (size_t) (slash - rest) : strlen (rest);
  const char *p = slash ? slash : "";
  size_t plen;

  while (*p == '/')
    p++;
  plen = strlen (p);
  while (plen > 0 && p[plen - 1] == '/')
    plen--;
  if (blen == 0 || blen > 63 ||
      strspn (rest, "abcdefghijklmnopqrstuvwxyz0123456789.-") < blen) {
    nbdkit_error ("s3://%.*s: not a bucket name (3 to 63 lower-case "
                  "letters, digits, dots and dashes)", (int) blen, rest);
    return -1;
  }
  cfg->bucket = strndup (rest, blen);
  cfg->prefix = strndup (p, plen);
  if (cfg->bucket == NULL || cfg->prefix == NULL ||
      asprintf (&cfg->target, "s3://%s%s%s", cfg->bucket,
                plen ? "/" : "", cfg->prefix) == -1) {
    cfg->target = NULL;
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Keep an http(s) URL as the base collection (with a trailing '/'). */
static int
parse_dav_target (struct bs_config *cfg, const char *target)
{
  size_t len = strlen (target);
  const char *host = strstr (target, "://") + 3;

  if (strchr (target, '?') || strchr (target, '#') ||
      strcspn (host, "/@") == 0 || strchr (host, '@')) {
    nbdkit_error ("%s: a WebDAV target is http(s)://HOST[:PORT][/PATH], "
                  "without user, query or fragment (credentials= names "
                  "a netrc file)", target);
    return -1;
  }
  while (len > 0 && target[len - 1] == '/')
    len--;
  if (asprintf (&cfg->base_url, "%.*s/", (int) len, target) == -1 ||
      (cfg->target = strndup (target, len)) == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Parse a target. */
struct bs_config *
bs_config_new (const char *target)
{
  struct bs_config *cfg = calloc (1, sizeof *cfg);
  int r;

  if (cfg == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  cfg->connections = DEFAULT_CONNECTIONS;
  cfg->retries = DEFAULT_RETRIES;
  cfg->timeout = DEFAULT_TIMEOUT;
  if (strncmp (target, "s3://", 5) == 0) {
    cfg->kind = BS_S3;
    r = parse_s3_target (cfg, target + 5);
  }
  else if (strncmp (target, "http://", 7) == 0 ||
           strncmp (target, "https://", 8) == 0) {
    cfg->kind = BS_DAV;
    r = parse_dav_target (cfg, target);
  }
  else {
    nbdkit_error ("%s: a target is s3://BUCKET[/PREFIX] or "
                  "http(s)://HOST[/PATH] (WebDAV)", target);
    r = -1;
  }
  if (r == -1) {
    bs_config_free (cfg);
    return NULL;
  }
  return cfg;
}

/* Parse an unsigned option value within [min, max]. */
static int
parse_unsigned (const char *key, const char *value, unsigned min,
                unsigned max, unsigned *out)
{
  char *end;
  unsigned long v;

  errno = 0;
  v = strtoul (value, &end, 10);
  if (errno || end == value || *end || v < min || v > max ||
      value[0] == '-') {
    nbdkit_error ("%s=%s: not a number from %u to %u", key, value, min, max);
    return -1;
  }
  *out = (unsigned) v;
  return 0;
}

/* Replace a string option. */
static int
set_string (char **field, const char *value)
{
  char *v = strdup (value);

  if (v == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  free (*field);
  *field = v;
  return 0;
}

/* Set an option. */
int
bs_config_set (struct bs_config *cfg, const char *key, const char *value)
{
  if (strcmp (key, "connections") == 0)
    return parse_unsigned (key, value, 1, 64, &cfg->connections);
  if (strcmp (key, "retries") == 0)
    return parse_unsigned (key, value, 0, 20, &cfg->retries);
  if (strcmp (key, "timeout") == 0) {
    char *end;
    double t = strtod (value, &end);
    if (end == value || *end || !(t > 0 && t <= 86400)) {
      nbdkit_error ("timeout=%s: not a number of seconds", value);
      return -1;
    }
    cfg->timeout = t;
    return 0;
  }
  if (strcmp (key, "insecure") == 0) {
    if (strcasecmp (value, "true") == 0 || strcmp (value, "1") == 0 ||
        strcasecmp (value, "yes") == 0 || strcasecmp (value, "on") == 0)
      cfg->insecure = true;
    else if (strcasecmp (value, "false") == 0 || strcmp (value, "0") == 0 ||
             strcasecmp (value, "no") == 0 || strcasecmp (value, "off") == 0)
      cfg->insecure = false;
    else {
      nbdkit_error ("insecure=%s: not a boolean", value);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "addressing") == 0 && strcmp (value, "path") != 0 &&
      strcmp (value, "virtual") != 0) {
    nbdkit_error ("addressing=%s: must be path or virtual", value);
    return -1;
  }
  if (cfg->kind == BS_DAV &&
      (strcmp (key, "endpoint") == 0 || strcmp (key, "region") == 0 ||
       strcmp (key, "addressing") == 0 || strcmp (key, "profile") == 0)) {
    nbdkit_error ("%s= is for s3:// targets, not for %s", key, cfg->target);
    return -1;
  }
  if (strcmp (key, "endpoint") == 0)
    return set_string (&cfg->endpoint, value);
  if (strcmp (key, "region") == 0)
    return set_string (&cfg->region, value);
  if (strcmp (key, "addressing") == 0)
    return set_string (&cfg->addressing, value);
  if (strcmp (key, "credentials") == 0)
    return set_string (&cfg->credentials, value);
  if (strcmp (key, "profile") == 0)
    return set_string (&cfg->profile, value);
  if (strcmp (key, "cafile") == 0)
    return set_string (&cfg->cafile, value);
  nbdkit_error ("unknown store option %s=", key);
  return -1;
}

/* Free a configuration. */
void
bs_config_free (struct bs_config *cfg)
{
  if (cfg == NULL)
    return;
  free (cfg->target);
  free (cfg->bucket);
  free (cfg->prefix);
  free (cfg->base_url);
  free (cfg->endpoint);
  free (cfg->region);
  free (cfg->addressing);
  free (cfg->credentials);
  free (cfg->profile);
  free (cfg->cafile);
  free (cfg);
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

/* Open a store. */
struct bs_store *
bs_store_open (struct bs_config *cfg)
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

/* Wipe a secret before freeing it. */
static void
free_secret (char *p)
{
  if (p) {
    explicit_bzero (p, strlen (p));
    free (p);
  }
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
  free_secret (s->access_key);
  free_secret (s->secret_key);
  free_secret (s->session_token);
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
  if (s->nr_idle == s->cap_idle) {
    size_t cap = s->cap_idle ? s->cap_idle * 2 : 16;
    CURL **p = realloc (s->idle, cap * sizeof *p);
    if (p == NULL) {
      curl_easy_cleanup (easy);
      return;
    }
    s->idle = p;
    s->cap_idle = cap;
  }
  s->idle[s->nr_idle++] = easy;
}

/* ---- requests ---------------------------------------------------- */

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
  h = s->cfg->kind == BS_S3 ? s3_headers (s, r) : dav_headers (s, r);
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

  if (buf_append (&r->resp, ptr, size * nmemb) == -1)
    return 0;
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

/* Set up an easy handle for one attempt of r.  -1 on error. */
static int
req_prepare (struct bs_request *r, CURL *easy)
{
  struct bs_config *cfg = r->s->cfg;
  bool upload = strcmp (r->verb, "PUT") == 0 ||
    strcmp (r->verb, "PROPFIND") == 0;

  curl_easy_reset (easy);
  r->easy = easy;
  r->body_off = 0;
  r->errbuf[0] = '\0';
  bs_buf_free (&r->resp);
  curl_easy_setopt (easy, CURLOPT_URL, r->url);
  curl_easy_setopt (easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt (easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt (easy, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt (easy, CURLOPT_PRIVATE, r);
  curl_easy_setopt (easy, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt (easy, CURLOPT_WRITEDATA, r);
  curl_easy_setopt (easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt (easy, CURLOPT_TIMEOUT_MS, (long) (cfg->timeout * 1000));
  curl_easy_setopt (easy, CURLOPT_HTTPHEADER, r->headers);
  if (cfg->cafile)
    curl_easy_setopt (easy, CURLOPT_CAINFO, cfg->cafile);
  if (cfg->insecure) {
    curl_easy_setopt (easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt (easy, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (upload) {
    curl_easy_setopt (easy, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt (easy, CURLOPT_READFUNCTION, read_cb);
    curl_easy_setopt (easy, CURLOPT_READDATA, r);
    curl_easy_setopt (easy, CURLOPT_SEEKFUNCTION, seek_cb);
    curl_easy_setopt (easy, CURLOPT_SEEKDATA, r);
    curl_easy_setopt (easy, CURLOPT_INFILESIZE_LARGE,
                      (curl_off_t) r->body_len);
  }
  if (strcmp (r->verb, "HEAD") == 0)
    curl_easy_setopt (easy, CURLOPT_NOBODY, 1L);
  else if (strcmp (r->verb, "GET") != 0 && strcmp (r->verb, "PUT") != 0)
    curl_easy_setopt (easy, CURLOPT_CUSTOMREQUEST, r->verb);
  if (r->s->cfg->kind == BS_S3)
    return s3_setup (r->s, easy);
  return dav_setup (r->s, easy);
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

/* Is an HTTP status worth another attempt? */
static bool
transient_status (long status)
{
  return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

/* The object a request is about, for messages: "TARGET/KEY". */
static void
object_name (const struct bs_request *r, char *buf, size_t len)
{
  snprintf (buf, len, "%s/%s", r->s->cfg->target, r->key);
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
  title = xml_text (body->data, body->data + body->len, "title");
  if (title) {
    snprintf (out, len, "(%s)", title);
    return;
  }
  n = strcspn (body->data, "\r\n");
  if (body->data[0] != '<' && n > 0 && n < 200)
    snprintf (out, len, "(%.*s)", (int) n, body->data);
}

/* Describe the failure of the last attempt in buf. */
static void
describe_failure (const struct bs_request *r, CURLcode c, long status,
                  char *buf, size_t len)
{
  char code[256] = "";

  if (c != CURLE_OK) {
    snprintf (buf, len, "%s", r->errbuf[0] ? r->errbuf
              : curl_easy_strerror (c));
    return;
  }
  if (r->s->cfg->kind == BS_S3)
    s3_error_code (&r->resp, code, sizeof code);
  if (code[0] == '\0')
    body_summary (&r->resp, code, sizeof code);
  snprintf (buf, len, "HTTP %ld%s%s", status, code[0] ? " " : "", code);
}

/* Seconds to wait before attempt n + 1 (n >= 1 attempts made). */
static double
backoff (unsigned n)
{
  double d = BACKOFF_FIRST;

  while (--n > 0 && d < BACKOFF_MAX)
    d *= 2;
  return d < BACKOFF_MAX ? d : BACKOFF_MAX;
}

/* Does a 404 of this request mean "not found" (rather than a missing
 * bucket, which is an error)?
 */
static bool
is_not_found (const struct bs_request *r)
{
  char code[256] = "";

  if (strcmp (r->verb, "PUT") == 0)
    return false;
  if (r->s->cfg->kind == BS_S3) {
    s3_error_code (&r->resp, code, sizeof code);
    if (strncmp (code, "NoSuchBucket", 12) == 0)
      return false;
  }
  return true;
}

/* The outcome of one attempt; prints the error when it is final. */
static enum outcome
classify (struct bs_request *r, CURLcode c)
{
  char obj[1024], why[512];
  long status = 0;

  r->attempt++;
  if (c == CURLE_OK)
    curl_easy_getinfo (r->easy, CURLINFO_RESPONSE_CODE, &status);
  if (c == CURLE_OK && status >= 200 && status <= 299)
    return OUT_OK;
  if (c == CURLE_OK && strcmp (r->verb, "MKCOL") == 0 && status == 405)
    return OUT_OK;              /* the collection exists */
  if (c == CURLE_OK && strcmp (r->verb, "MKCOL") == 0 && status == 409)
    return OUT_NOT_FOUND;       /* its parent does not */
  if (c == CURLE_OK && status == 404 && is_not_found (r))
    return OUT_NOT_FOUND;
  /* A WebDAV PUT into a missing collection: 409 (RFC 4918), or 500
   * from nginx (without create_full_put_path).  Make the collections
   * once, then retry as usual.
   */
  if (c == CURLE_OK && (status == 409 || status == 500) &&
      r->s->cfg->kind == BS_DAV && strcmp (r->verb, "PUT") == 0 &&
      !r->made_parents) {
    r->made_parents = true;
    r->attempt--;
    return OUT_MKCOL;
  }
  object_name (r, obj, sizeof obj);
  describe_failure (r, c, status, why, sizeof why);
  if ((c != CURLE_OK ? transient_curl_error (c) : transient_status (status))
      && r->attempt <= r->s->cfg->retries) {
    nbdkit_debug ("%s: %s: %s; retrying in %g s (attempt %u of %u)", obj,
                  r->verb, why, backoff (r->attempt), r->attempt + 1,
                  r->s->cfg->retries + 1);
    r->not_before = now_mono () + backoff (r->attempt);
    return OUT_RETRY;
  }
  if (r->attempt > 1)
    nbdkit_error ("%s: %s: %s (gave up after %u attempts)", obj, r->verb,
                  why, r->attempt);
  else
    nbdkit_error ("%s: %s: %s", obj, r->verb, why);
  return OUT_FAIL;
}

/* Sleep until the monotonic time t. */
static void
sleep_until (double t)
{
  double d = t - now_mono ();
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
    CURL *easy = pool_get (r->s);
    enum outcome o;
    CURLcode c;

    if (easy == NULL || req_prepare (r, easy) == -1) {
      nbdkit_error ("cannot set up a libcurl handle");
      if (easy)
        curl_easy_cleanup (easy);
      return BS_ERROR;
    }
    c = curl_easy_perform (easy);
    o = classify (r, c);
    pool_put (r->s, easy);
    r->easy = NULL;
    switch (o) {
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

/* ---- many requests in flight ------------------------------------- */

struct bs_multi {
  struct bs_store *s;
  CURLM *cm;
  struct bs_request *queue, *queue_tail;  /* waiting to start, FIFO */
  struct bs_request **active;   /* in flight: connections slots */
  size_t running, queued;
  uint64_t bytes_sent;
};

/* A new multi. */
struct bs_multi *
bs_multi_new (struct bs_store *s)
{
  struct bs_multi *m = calloc (1, sizeof *m);

  if (m == NULL || (m->cm = curl_multi_init ()) == NULL) {
    nbdkit_error ("out of memory");
    free (m);
    return NULL;
  }
  m->s = s;
  m->active = calloc (s->cfg->connections, sizeof *m->active);
  if (m->active == NULL) {
    nbdkit_error ("out of memory");
    bs_multi_free (m);
    return NULL;
  }
  curl_multi_setopt (m->cm, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                     (long) s->cfg->connections);
  return m;
}

/* Free a multi and what it has not finished. */
void
bs_multi_free (struct bs_multi *m)
{
  struct bs_request *r;
  size_t i;

  if (m == NULL)
    return;
  for (i = 0; m->active && i < m->s->cfg->connections; ++i)
    if ((r = m->active[i]) != NULL) {
      curl_multi_remove_handle (m->cm, r->easy);
      curl_easy_cleanup (r->easy);
      req_free (r);
    }
  while ((r = m->queue) != NULL) {
    m->queue = r->next;
    req_free (r);
  }
  if (m->cm)
    curl_multi_cleanup (m->cm);
  free (m->active);
  free (m);
}

/* Record r in a free slot of the active table. */
static void
set_active (struct bs_multi *m, struct bs_request *r, bool on)
{
  size_t i;

  for (i = 0; i < m->s->cfg->connections; ++i)
    if (m->active[i] == (on ? NULL : r)) {
      m->active[i] = on ? r : NULL;
      return;
    }
}

/* Wake bs_multi_run. */
void
bs_multi_wakeup (struct bs_multi *m)
{
  curl_multi_wakeup (m->cm);
}

/* Append a request to the waiting queue. */
static void
enqueue (struct bs_multi *m, struct bs_request *r)
{
  r->next = NULL;
  if (m->queue_tail)
    m->queue_tail->next = r;
  else
    m->queue = r;
  m->queue_tail = r;
  m->queued++;
}

/* Queue a request. */
int
bs_multi_add (struct bs_multi *m, enum bs_method method, const char *key,
              const void *data, size_t len, bs_done_fn done, void *opaque)
{
  static const char *const verbs[] = { "GET", "PUT", "HEAD", "DELETE" };
  struct bs_request *r = req_new (m->s, verbs[method], key, data, len);

  if (r == NULL)
    return -1;
  r->done = done;
  r->opaque = opaque;
  enqueue (m, r);
  return 0;
}

/* Requests not finished. */
size_t
bs_multi_pending (const struct bs_multi *m)
{
  return m->running + m->queued;
}

/* Bytes of finished uploads. */
uint64_t
bs_multi_bytes_sent (const struct bs_multi *m)
{
  return m->bytes_sent;
}

/* Finish a request: call its done function and free it. */
static void
finish (struct bs_multi *m, struct bs_request *r, enum bs_result res)
{
  if (res == BS_OK && strcmp (r->verb, "PUT") == 0)
    m->bytes_sent += r->body_len;
  r->done (r->opaque, res, &r->resp);
  req_free (r);
}

/* Start the queued requests that are due, up to the connection limit;
 * returns the milliseconds until the next one is due (or -1).
 */
static int
start_due (struct bs_multi *m)
{
  struct bs_request **pp = &m->queue, *r, *prev = NULL;
  double now = now_mono (), next = -1;

  while ((r = *pp) != NULL && m->running < m->s->cfg->connections) {
    CURL *easy;
    if (r->not_before > now) {
      if (next < 0 || r->not_before < next)
        next = r->not_before;
      prev = r;
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    if (m->queue_tail == r)
      m->queue_tail = prev;
    m->queued--;
    easy = pool_get (m->s);
    if (easy == NULL || req_prepare (r, easy) == -1 ||
        curl_multi_add_handle (m->cm, easy) != CURLM_OK) {
      nbdkit_error ("cannot set up a libcurl handle");
      if (easy)
        curl_easy_cleanup (easy);
      finish (m, r, BS_ERROR);
      continue;
    }
    set_active (m, r, true);
    m->running++;
  }
  return next < 0 ? -1 : (int) ((next - now) * 1000) + 1;
}

/* Deal with a transfer that completed. */
static void
completed (struct bs_multi *m, CURL *easy, CURLcode c)
{
  struct bs_request *r;
  enum outcome o;

  curl_easy_getinfo (easy, CURLINFO_PRIVATE, (char **) &r);
  curl_multi_remove_handle (m->cm, easy);
  set_active (m, r, false);
  m->running--;
  o = classify (r, c);
  pool_put (m->s, easy);
  r->easy = NULL;
  switch (o) {
  case OUT_OK:
    finish (m, r, BS_OK);
    break;
  case OUT_NOT_FOUND:
    finish (m, r, BS_NOT_FOUND);
    break;
  case OUT_FAIL:
    finish (m, r, BS_ERROR);
    break;
  case OUT_MKCOL:
    if (dav_make_parents (m->s, r->key) == -1) {
      finish (m, r, BS_ERROR);
      break;
    }
    /* fall through */
  case OUT_RETRY:
    enqueue (m, r);
    break;
  }
}

/* Run for a while. */
void
bs_multi_run (struct bs_multi *m, int timeout_ms)
{
  int still, next, msgs;
  CURLMsg *msg;

  next = start_due (m);
  if (next >= 0 && next < timeout_ms)
    timeout_ms = next;
  curl_multi_perform (m->cm, &still);
  curl_multi_poll (m->cm, NULL, 0, timeout_ms, NULL);
  curl_multi_perform (m->cm, &still);
  while ((msg = curl_multi_info_read (m->cm, &msgs)) != NULL)
    if (msg->msg == CURLMSG_DONE)
      completed (m, msg->easy_handle, msg->data.result);
  start_due (m);
}
