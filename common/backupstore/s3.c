/* SPDX-License-Identifier: BSD-3-Clause */
/* S3: where objects are, how requests are signed, listings, errors.
 *
 * The endpoint is endpoint= (e.g. http://127.0.0.1:8080), else
 * $AWS_ENDPOINT_URL, else AWS's https://s3.REGION.amazonaws.com; the
 * region is region=, else $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1.
 * Addressing defaults to virtual-host style on AWS's own endpoint and
 * to path style on any other (self-hosted servers rarely have the
 * wildcard DNS that virtual hosts need).
 *
 * Credentials, first found wins: the file credentials= (the AWS
 * credentials format: [PROFILE] with aws_access_key_id,
 * aws_secret_access_key and optionally aws_session_token), the
 * environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN), $AWS_SHARED_CREDENTIALS_FILE or
 * ~/.aws/credentials.  Without any, requests go unsigned (a public
 * bucket).  They go to libcurl through CURLOPT_USERNAME and
 * CURLOPT_PASSWORD, so an access key with a colon in it works, and
 * CURLOPT_AWS_SIGV4 signs (sigv4.c says what is left to us).
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cleanup.h"
#include "internal.h"

/* Strip white space at both ends of s, in place. */
static char *
trim (char *s)
{
  size_t n;

  while (*s == ' ' || *s == '\t')
    s++;
  n = strlen (s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' ||
                   s[n - 1] == '\n' || s[n - 1] == '\r'))
    s[--n] = '\0';
  return s;
}

/* Take one key of the profile's section into the store. */
static int
take_credential (struct bs_store *s, const char *key, const char *value)
{
  char **field = NULL;

  if (strcmp (key, "aws_access_key_id") == 0)
    field = &s->access_key;
  else if (strcmp (key, "aws_secret_access_key") == 0)
    field = &s->secret_key;
  else if (strcmp (key, "aws_session_token") == 0)
    field = &s->session_token;
  if (field == NULL)
    return 0;
  secret_free (*field);
  *field = strdup (value);
  return *field ? 0 : -1;
}

/* Read the profile's credentials from an AWS credentials file. */
static int
read_credentials_file (struct bs_store *s, const char *path,
                       const char *profile)
{
  FILE *fp = fopen (path, "r");
  CLEANUP_FREE char *line = NULL;
  size_t cap = 0;
  bool in_profile = false;

  if (fp == NULL) {
    nbdkit_error ("credentials file %s: %m", path);
    return -1;
  }
  while (getline (&line, &cap, fp) != -1) {
    char *l = trim (line), *eq;
    if (*l == '#' || *l == ';' || *l == '\0')
      continue;
    if (*l == '[') {
      char *end = strchr (l, ']'), *name = l + 1;
      if (end)
        *end = '\0';
      if (strncmp (name, "profile ", 8) == 0)
        name = trim (name + 8);
      in_profile = strcmp (trim (name), profile) == 0;
      continue;
    }
    if (!in_profile || (eq = strchr (l, '=')) == NULL)
      continue;
    *eq = '\0';
    if (take_credential (s, trim (l), trim (eq + 1)) == -1) {
      explicit_bzero (line, cap);
      fclose (fp);
      nbdkit_error ("out of memory");
      return -1;
    }
  }
  if (line)
    explicit_bzero (line, cap);
  fclose (fp);
  if (s->access_key == NULL || s->secret_key == NULL) {
    nbdkit_error ("credentials file %s: profile [%s] has no "
                  "aws_access_key_id and aws_secret_access_key", path,
                  profile);
    return -1;
  }
  return 0;
}

/* Copy an environment variable into *field if it is set. */
static int
from_env (char **field, const char *name)
{
  const char *v = getenv (name);

  if (v == NULL || *v == '\0')
    return 0;
  *field = strdup (v);
  return *field ? 1 : -1;
}

/* Find the credentials. */
static int
find_credentials (struct bs_store *s)
{
  const struct bs_config *cfg = s->cfg;
  const char *profile = cfg->profile ? cfg->profile : getenv ("AWS_PROFILE");
  const char *file = getenv ("AWS_SHARED_CREDENTIALS_FILE");
  const char *home = getenv ("HOME");
  CLEANUP_FREE char *home_file = NULL;

  if (profile == NULL || *profile == '\0')
    profile = "default";
  if (cfg->credentials)
    return read_credentials_file (s, cfg->credentials, profile);
  if (from_env (&s->access_key, "AWS_ACCESS_KEY_ID") == -1 ||
      from_env (&s->secret_key, "AWS_SECRET_ACCESS_KEY") == -1 ||
      from_env (&s->session_token, "AWS_SESSION_TOKEN") == -1) {
    nbdkit_error ("out of memory");
    return -1;
  }
  if (s->access_key || s->secret_key) {
    if (s->access_key && s->secret_key)
      return 0;
    nbdkit_error ("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be "
                  "set together");
    return -1;
  }
  if (file == NULL && home &&
      asprintf (&home_file, "%s/.aws/credentials", home) != -1 &&
      access (home_file, R_OK) == 0)
    file = home_file;
  if (file)
    return read_credentials_file (s, file, profile);
  nbdkit_debug ("%s: no S3 credentials: requests are not signed",
                cfg->target);
  return 0;
}

/* The first set environment variable of two, or NULL. */
static const char *
env2 (const char *a, const char *b)
{
  const char *v = getenv (a);

  if (v && *v)
    return v;
  v = getenv (b);
  return v && *v ? v : NULL;
}

/* Split the endpoint URL into scheme and host[:port]. */
static int
parse_endpoint (struct bs_store *s, const char *endpoint)
{
  const char *sep = strstr (endpoint, "://"), *host;
  size_t hlen;

  if (sep == NULL || (strncmp (endpoint, "http://", 7) != 0 &&
                      strncmp (endpoint, "https://", 8) != 0)) {
    nbdkit_error ("endpoint=%s: not an http:// or https:// URL", endpoint);
    return -1;
  }
  host = sep + 3;
  hlen = strcspn (host, "/?#");
  if (hlen == 0 || strcspn (host + hlen, "/") != 0 ||
      host[hlen + strspn (host + hlen, "/")] != '\0' ||
      memchr (host, '@', hlen)) {
    nbdkit_error ("endpoint=%s: give only the scheme, host and port "
                  "(http://HOST:PORT)", endpoint);
    return -1;
  }
  s->scheme = strndup (endpoint, (size_t) (sep - endpoint));
  s->host = strndup (host, hlen);
  if (s->scheme == NULL || s->host == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Set up the S3 side of a store. */
int
s3_open (struct bs_store *s)
{
  struct bs_config *cfg = s->cfg;
  const char *region = cfg->region ? cfg->region
    : env2 ("AWS_REGION", "AWS_DEFAULT_REGION");
  const char *endpoint = cfg->endpoint ? cfg->endpoint
    : env2 ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
  CLEANUP_FREE char *aws = NULL;
  bool virtual_host;

  if (region == NULL)
    region = "us-east-1";
  if (strspn (region, "abcdefghijklmnopqrstuvwxyz0123456789-")
      != strlen (region) || *region == '\0') {
    nbdkit_error ("region=%s: not a region name", region);
    return -1;
  }
  if (endpoint == NULL) {
    if (asprintf (&aws, "https://s3.%s.amazonaws.com", region) == -1) {
      nbdkit_error ("out of memory");
      return -1;
    }
    endpoint = aws;
  }
  if (parse_endpoint (s, endpoint) == -1)
    return -1;
  virtual_host = cfg->addressing ? strcmp (cfg->addressing, "virtual") == 0
    : aws != NULL;
  if (virtual_host && strchr (cfg->bucket, '.')) {
    nbdkit_error ("bucket %s: a name with dots needs addressing=path",
                  cfg->bucket);
    return -1;
  }
  s->addr = (struct bs_s3_addr) {
    .scheme = s->scheme, .host = s->host, .bucket = cfg->bucket,
    .virtual_host = virtual_host,
  };
  s->provider = bs_sigv4_provider (region);
  if (s->provider == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  {
    CLEANUP_FREE char *host = bs_s3_host (&s->addr);
    nbdkit_debug ("%s: requests to %s://%s, region %s, %s addressing",
                  cfg->target, s->scheme, host ? host : s->host, region,
                  virtual_host ? "virtual-host" : "path");
  }
  return find_credentials (s);
}

/* The full key of a key relative to the target. */
static char *
full_key (struct bs_store *s, const char *key)
{
  char *k;

  if (asprintf (&k, "%s%s%s", s->cfg->prefix, *s->cfg->prefix ? "/" : "",
                key) == -1)
    return NULL;
  return k;
}

/* The URL of a key. */
char *
s3_url (struct bs_store *s, const char *key)
{
  CLEANUP_FREE char *k = full_key (s, key);

  if (k == NULL)
    return NULL;
  return bs_s3_url (&s->addr, k, NULL);
}

/* Add the session token header. */
static int
add_token_header (struct bs_store *s, struct bs_request *r)
{
  char *line;
  int ret;

  if (asprintf (&line, "x-amz-security-token: %s", s->session_token) == -1) {
    nbdkit_error ("out of memory");
    return -1;
  }
  ret = req_add_header (r, line);
  secret_free (line);
  return ret;
}

/* Add the headers of a request: the payload hash, the session token. */
int
s3_add_headers (struct bs_store *s, struct bs_request *r)
{
  char line[96];

  if (bs_payload_header (r->body, r->body_len, line) == -1 ||
      req_add_header (r, line) == -1)
    return -1;
  if (s->session_token && add_token_header (s, r) == -1)
    return -1;
  return 0;
}

/* Set the signing options of an easy handle. */
CURLcode
s3_setup (struct bs_store *s, CURL *easy)
{
  CURLcode c = CURLE_OK;

  if (s->access_key == NULL)
    return c;
  SETOPT (c, easy, CURLOPT_AWS_SIGV4, s->provider);
  SETOPT (c, easy, CURLOPT_USERNAME, s->access_key);
  SETOPT (c, easy, CURLOPT_PASSWORD, s->secret_key);
  return c;
}

/* The code and message of an S3 error body: "Code: Message". */
void
s3_error_code (const struct bs_buf *body, char *code, size_t len)
{
  CLEANUP_XML_DOC xmlDoc *doc = NULL;
  CLEANUP_FREE char *c = NULL, *msg = NULL;
  char why[128];

  code[0] = '\0';
  if (body->data == NULL)
    return;
  doc = xml_parse (body->data, body->len, why, sizeof why);
  if (doc == NULL)
    return;                     /* not an S3 error: the caller says so */
  c = xml_text ((xmlNode *) doc, "Code");
  msg = xml_text ((xmlNode *) doc, "Message");
  if (c)
    snprintf (code, len, "%s%s%s", c, msg ? ": " : "", msg ? msg : "");
}

/* Parse 2024-01-02T03:04:05[.sss]Z. */
time_t
parse_iso_time (const char *s)
{
  struct tm tm = { 0 };
  int n = 0;

  if (sscanf (s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
              &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return timegm (&tm);
}

/* Add the entries of one ListObjectsV2 page (the reply of r); sets
 * *token to the next page's continuation token or NULL.
 */
static int
parse_list_page (const struct bs_request *r, size_t skip,
                 struct bs_list *out, char **token)
{
  CLEANUP_XML_DOC xmlDoc *doc = req_parse_xml (r);
  CLEANUP_FREE char *truncated = NULL;
  xmlNode *top = (xmlNode *) doc, *c;

  *token = NULL;
  if (doc == NULL)
    return -1;
  truncated = xml_text (top, "IsTruncated");
  for (c = xml_next (top, NULL, "Contents"); c != NULL;
       c = xml_next (top, c, "Contents")) {
    CLEANUP_FREE char *key = xml_text (c, "Key");
    CLEANUP_FREE char *mtime = xml_text (c, "LastModified");
    CLEANUP_FREE char *size = xml_text (c, "Size");
    if (key == NULL || strlen (key) <= skip)
      continue;
    if (list_add (out, key + skip, mtime ? parse_iso_time (mtime) : 0,
                  size ? strtoull (size, NULL, 10) : 0) == -1)
      goto oom;
  }
  for (c = xml_next (top, NULL, "CommonPrefixes"); c != NULL;
       c = xml_next (top, c, "CommonPrefixes")) {
    CLEANUP_FREE char *prefix = xml_text (c, "Prefix");
    if (prefix && strlen (prefix) > skip &&
        list_add (out, prefix + skip, 0, 0) == -1)
      goto oom;
  }
  if (truncated && strcmp (truncated, "true") == 0) {
    *token = xml_text (top, "NextContinuationToken");
    if (*token == NULL) {
      nbdkit_error ("a truncated listing has no NextContinuationToken");
      return -1;
    }
  }
  return 0;
 oom:
  nbdkit_error ("out of memory");
  return -1;
}

/* Fetch one page of a listing into out; sets *token for the next. */
static int
list_page (struct bs_store *s, const char *prefix, const char *full,
           bool recursive, struct bs_list *out, char **token)
{
  struct bs_param params[4] = {
    { "list-type", "2" }, { "prefix", full },
  };
  size_t n = 2;
  CLEANUP_FREE char *query = NULL;
  struct bs_request *r;
  enum bs_result res;
  int ret;

  if (!recursive)
    params[n++] = (struct bs_param) { "delimiter", "/" };
  if (*token)
    params[n++] = (struct bs_param) { "continuation-token", *token };
  query = bs_canonical_query (params, n);
  if (query == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  /* A request of the bucket itself; its messages name the prefix. */
  r = req_new (s, "GET", prefix, NULL, 0);
  if (r == NULL)
    return -1;
  free (r->url);
  r->url = bs_s3_url (&s->addr, "", query);
  if (r->url == NULL)
    nbdkit_error ("out of memory");
  res = r->url ? run_sync (r) : BS_ERROR;
  free (*token);
  *token = NULL;
  if (res == BS_NOT_FOUND)
    nbdkit_error ("%s: listing: HTTP 404", s->cfg->target);
  ret = res == BS_OK ? parse_list_page (r, strlen (full), out, token) : -1;
  req_free (r);
  return ret;
}

/* List a prefix (ListObjectsV2, page by page). */
int
s3_list (struct bs_store *s, const char *prefix, bool recursive,
         struct bs_list *out)
{
  CLEANUP_FREE char *full = full_key (s, prefix);
  char *token = NULL;

  if (full == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  do {
    if (list_page (s, prefix, full, recursive, out, &token) == -1) {
      free (token);
      return -1;
    }
  } while (token);
  return 0;
}
