/* SPDX-License-Identifier: BSD-3-Clause */
/* The parts of an S3 request that libcurl 7.88 leaves to us.
 *
 * libcurl signs with CURLOPT_AWS_SIGV4, but (curl/curl#9717, #8810):
 * - it takes the query string as it is into the canonical request: the
 *   query must already be sorted by key and percent-encoded, and a key
 *   without a value must carry its '=' ("?uploads=");
 * - it does not hash the payload of an upload: the x-amz-content-sha256
 *   header must be given, and libcurl then signs with its value.
 * The URL and the Host header depend on the addressing: path style
 * puts the bucket in the path, virtual-host style in the host name.
 * These are pure functions of their inputs, unit-tested against AWS's
 * published examples (tests/unit-sigv4.c).
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "backupstore.h"

/* Is c left as it is by SigV4's URI encoding? */
static bool
is_unreserved (unsigned char c)
{
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
    (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Percent-encode a string. */
char *
bs_uri_encode (const char *s, bool keep_slash)
{
  static const char hex[] = "0123456789ABCDEF";
  char *out = malloc (strlen (s) * 3 + 1), *q = out;
  const unsigned char *p;

  if (out == NULL)
    return NULL;
  for (p = (const unsigned char *) s; *p; ++p) {
    if (is_unreserved (*p) || (keep_slash && *p == '/'))
      *q++ = (char) *p;
    else {
      *q++ = '%';
      *q++ = hex[*p >> 4];
      *q++ = hex[*p & 15];
    }
  }
  *q = '\0';
  return out;
}

/* One encoded "key=value" pair and its parts, for sorting. */
struct encoded_param {
  char *key, *value;
};

/* Order encoded parameters by key, then value (byte order). */
static int
compare_params (const void *a, const void *b)
{
  const struct encoded_param *x = a, *y = b;
  int r = strcmp (x->key, y->key);

  return r ? r : strcmp (x->value, y->value);
}

/* Free n encoded parameters and the array. */
static void
free_params (struct encoded_param *e, size_t n)
{
  size_t i;

  for (i = 0; i < n; ++i) {
    free (e[i].key);
    free (e[i].value);
  }
  free (e);
}

/* The canonical query string. */
char *
bs_canonical_query (const struct bs_param *params, size_t n)
{
  struct encoded_param *e = calloc (n ? n : 1, sizeof *e);
  size_t i, total = 1;
  char *out = NULL, *q;

  if (e == NULL)
    return NULL;
  for (i = 0; i < n; ++i) {
    e[i].key = bs_uri_encode (params[i].key, false);
    e[i].value = bs_uri_encode (params[i].value ? params[i].value : "",
                                false);
    if (e[i].key == NULL || e[i].value == NULL)
      goto out;
    total += strlen (e[i].key) + strlen (e[i].value) + 2;
  }
  qsort (e, n, sizeof *e, compare_params);
  out = q = malloc (total);
  if (out == NULL)
    goto out;
  *q = '\0';
  for (i = 0; i < n; ++i)
    q += sprintf (q, "%s%s=%s", i ? "&" : "", e[i].key, e[i].value);
 out:
  free_params (e, n);
  return out;
}

/* The URL of a key in a bucket. */
char *
bs_s3_url (const struct bs_s3_addr *a, const char *key, const char *query)
{
  CLEANUP_FREE char *path = bs_uri_encode (key, true);
  const char *qmark = query && *query ? "?" : "";
  char *url;
  int r;

  if (path == NULL)
    return NULL;
  if (a->virtual_host)
    r = asprintf (&url, "%s://%s.%s/%s%s%s", a->scheme, a->bucket, a->host,
                  path, qmark, query && *query ? query : "");
  else
    r = asprintf (&url, "%s://%s/%s%s%s%s%s", a->scheme, a->host, a->bucket,
                  *path ? "/" : "", path, qmark,
                  query && *query ? query : "");
  return r == -1 ? NULL : url;
}

/* The Host header. */
char *
bs_s3_host (const struct bs_s3_addr *a)
{
  char *host;

  if (a->virtual_host) {
    if (asprintf (&host, "%s.%s", a->bucket, a->host) == -1)
      return NULL;
    return host;
  }
  return strdup (a->host);
}

/* The payload hash header. */
int
bs_payload_header (const void *data, size_t len, char line[96])
{
  uint8_t md[BS_HASH_LEN];
  char hex[65];

  if (bs_hash (data, len, md) == -1)
    return -1;
  bs_hash_to_hex (md, hex);
  snprintf (line, 96, "x-amz-content-sha256: %s", hex);
  return 0;
}

/* "aws:amz:REGION:s3". */
char *
bs_sigv4_provider (const char *region)
{
  char *p;

  if (asprintf (&p, "aws:amz:%s:s3", region) == -1)
    return NULL;
  return p;
}
