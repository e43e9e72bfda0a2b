/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/backupstore/sigv4.c: the parts of an S3 request
 * libcurl leaves to us.  The vectors are AWS's published examples: the
 * canonical query strings of the Signature Version 4 test suite
 * (get-vanilla-query-order-key-case, -order-value, -unreserved,
 * get-vanilla-utf8-query) and of the S3 signing examples (GET
 * /?max-keys=2&prefix=J, GET ?lifecycle, PUT "Welcome to Amazon S3."
 * and the hash of an empty payload), and the URLs of path-style and
 * virtual-host requests.  Each row says what it is.
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "backupstore.h"
#include "unit.h"

struct query_case {
  const char *what;
  struct bs_param params[4];
  size_t n;
  const char *expected;
};

static const struct query_case query_cases[] = {
  { "S3 example GET /?max-keys=2&prefix=J (sorted)",
    { { "prefix", "J" }, { "max-keys", "2" } }, 2, "max-keys=2&prefix=J" },
  { "S3 example GET ?lifecycle: a bare key keeps its '='",
    { { "lifecycle", NULL } }, 1, "lifecycle=" },
  { "get-vanilla-query-order-key-case",
    { { "Param2", "value2" }, { "Param1", "value1" } }, 2,
    "Param1=value1&Param2=value2" },
  { "get-vanilla-query-order-value: same key, sorted by value",
    { { "Param1", "value2" }, { "Param1", "Value1" } }, 2,
    "Param1=Value1&Param1=value2" },
  { "get-vanilla-query-unreserved: nothing encoded",
    { { "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
        "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" } },
    1,
    "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
    "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" },
  { "get-vanilla-utf8-query: UTF-8 bytes in upper-case hex",
    { { "\xe1\x88\xb4", "bar" } }, 1, "%E1%88%B4=bar" },
  { "ListObjectsV2 with a delimiter: '/' encoded in values",
    { { "list-type", "2" }, { "prefix", "a/b/" }, { "delimiter", "/" } }, 3,
    "delimiter=%2F&list-type=2&prefix=a%2Fb%2F" },
  { "a continuation token: '+', '/', '=' encoded",
    { { "list-type", "2" }, { "continuation-token", "1ue+Gc/x=" } }, 2,
    "continuation-token=1ue%2BGc%2Fx%3D&list-type=2" },
  { "a space is %20, never '+'",
    { { "prefix", "a b" } }, 1, "prefix=a%20b" },
  { "no parameters", { { NULL, NULL } }, 0, "" },
};

struct url_case {
  const char *what;
  struct bs_s3_addr addr;
  const char *key, *query;
  const char *url, *host;
};

static const struct url_case url_cases[] = {
  { "path style: the bucket in the path",
    { "http", "127.0.0.1:8080", "bkt", false },
    "p/volumes/v/backups/n.json", NULL,
    "http://127.0.0.1:8080/bkt/p/volumes/v/backups/n.json",
    "127.0.0.1:8080" },
  { "virtual host: S3 example GET /test.txt",
    { "https", "s3.amazonaws.com", "examplebucket", true },
    "test.txt", NULL,
    "https://examplebucket.s3.amazonaws.com/test.txt",
    "examplebucket.s3.amazonaws.com" },
  { "virtual host, the bucket itself: S3 example GET /?max-keys=2&prefix=J",
    { "https", "s3.amazonaws.com", "examplebucket", true },
    "", "max-keys=2&prefix=J",
    "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
    "examplebucket.s3.amazonaws.com" },
  { "path style, the bucket itself with a query",
    { "http", "127.0.0.1:8080", "bkt", false },
    "", "list-type=2&prefix=p%2F",
    "http://127.0.0.1:8080/bkt?list-type=2&prefix=p%2F", "127.0.0.1:8080" },
  { "a key's reserved characters encoded, its slashes kept",
    { "https", "s3.eu-west-1.amazonaws.com", "b", false },
    "a b/c+d=e", NULL,
    "https://s3.eu-west-1.amazonaws.com/b/a%20b/c%2Bd%3De",
    "s3.eu-west-1.amazonaws.com" },
};

struct payload_case {
  const char *what;
  const char *payload;
  const char *header;
};

static const struct payload_case payload_cases[] = {
  { "an empty payload (GET, HEAD, DELETE)", "",
    "x-amz-content-sha256: "
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
  { "S3 example PUT /test$file.text", "Welcome to Amazon S3.",
    "x-amz-content-sha256: "
    "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072" },
};

/* The canonical query strings. */
static void
test_queries (void)
{
  size_t i;

  for (i = 0; i < sizeof query_cases / sizeof query_cases[0]; ++i) {
    const struct query_case *c = &query_cases[i];
    char *q = bs_canonical_query (c->params, c->n);
    CHECKF (q && strcmp (q, c->expected) == 0, "%s: got \"%s\", want \"%s\"",
            c->what, q ? q : "(null)", c->expected);
    free (q);
  }
}

/* URLs and Host headers of both addressings. */
static void
test_urls (void)
{
  size_t i;

  for (i = 0; i < sizeof url_cases / sizeof url_cases[0]; ++i) {
    const struct url_case *c = &url_cases[i];
    char *url = bs_s3_url (&c->addr, c->key, c->query);
    char *host = bs_s3_host (&c->addr);
    CHECKF (url && strcmp (url, c->url) == 0, "%s: got %s, want %s",
            c->what, url ? url : "(null)", c->url);
    CHECKF (host && strcmp (host, c->host) == 0, "%s: host %s, want %s",
            c->what, host ? host : "(null)", c->host);
    free (url);
    free (host);
  }
}

/* The payload hash header. */
static void
test_payloads (void)
{
  size_t i;

  for (i = 0; i < sizeof payload_cases / sizeof payload_cases[0]; ++i) {
    const struct payload_case *c = &payload_cases[i];
    char line[96] = "";
    int r = bs_payload_header (c->payload, strlen (c->payload), line);
    CHECKF (r == 0 && strcmp (line, c->header) == 0, "%s: returned %d, got "
            "\"%s\"", c->what, r, line);
  }
}

/* CURLOPT_AWS_SIGV4's parameter. */
static void
test_provider (void)
{
  char *p = bs_sigv4_provider ("eu-central-1");

  CHECK (p && strcmp (p, "aws:amz:eu-central-1:s3") == 0);
  free (p);
}

/* Run every table. */
int
main (void)
{
  test_queries ();
  test_urls ();
  test_payloads ();
  test_provider ();
  return unit_exit ("unit-sigv4");
}
