/* SPDX-License-Identifier: BSD-3-Clause */
/* NBD URIs of legs: checking one, telling whether two name the same
 * leg, and the socket path of a Unix one (pure; config_check_uri,
 * config_same_leg and config_unix_socket of params.h).
 *
 * Splitting is libnbd's.  libnbd (lib/uri.c of 1.14) splits a URI
 * with libxml2's xmlParseURI, which %-decodes the user, the host and
 * the path, and splits the raw query itself: a parameter ends at the
 * next '&', or, if none follows, at the next ';'; name and value are
 * decoded with xmlURIUnescapeString; "name" alone has the value "",
 * "=value" is ignored.  We do the same here, so that a URI we take is
 * one libnbd can parse and its parts are those libnbd uses: "%73ocket"
 * is socket=, "nbd+unix:///?socket=/a;b=1" is the socket /a,
 * "nbd://h/%61" and "nbd://h/a" are the same export, and a character
 * RFC 3986 does not allow ('{', '|', '"' ...), or a vsock port above
 * INT_MAX (libxml2's limit), is refused.
 *
 * Checking (messages start "replica=URI: ") then refuses more than
 * libnbd does.  The schemes are libnbd's, lowercase, followed by "://"
 * (libnbd insists on it too).  Whitespace, control characters, a '%'
 * without two hex digits, "%00" (which libnbd would cut the string at)
 * and a fragment are refused before or after the split.  nbd and nbds
 * take [USER@]HOST[:PORT], HOST a name (RFC 3986 unreserved
 * characters, once decoded), IPv4 or [IPv6[%25ZONE]], PORT up to
 * 65535, 0 or none meaning 10809 as in libnbd; nbd+unix and nbds+unix
 * take [USER@] (a TLS user name) and otherwise an empty authority, and
 * ?socket=PATH, absolute and at most 107 bytes once decoded, once;
 * nbd+vsock and nbds+vsock take [USER@]CID[:PORT], the CID decimal and
 * 32-bit.  An empty user name ("nbd://@h", which
 * libxml2 2.9 reads as the user "@h") is refused.  libnbd's
 * tls-certificates= and tls-psk-file= must be absolute paths (libnbd
 * opens them at every connection, and nbdkit in the background runs
 * in "/"); other query parameters are libnbd's business.  Where
 * libxml2 refuses a URI, explain_refusal looks at the authority only
 * to say what is wrong (a port, a bracket); the refusal is libxml2's.
 *
 * Same leg.  Two URIs name the same leg when they have the same
 * transport (TCP, Unix or vsock: nbd and nbds are the same server, one
 * with TLS) and the same export name, and: for TCP the same host
 * (ignoring case) and port; for vsock the same CID and port; for Unix
 * the same socket path.  Everything is compared decoded, as libnbd
 * uses it.  The user name and other query parameters are ignored, and
 * different names of one host (localhost and 127.0.0.1) or of one
 * socket (a symbolic link) are not detected.
 */

#include <config.h>

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libxml/uri.h>
#include <libxml/xmlmemory.h>

#include "params.h"
#include "params-text.h"

#define NBD_DEFAULT_PORT 10809
#define TCP_PORT_MAX 65535
#define VSOCK_CID_MAX UINT32_MAX
#define VSOCK_PORT_MAX INT_MAX          /* libxml2 refuses larger ports */

/* The NBD URI schemes, each plain then with TLS: index / 2 is the
 * transport.
 */
static const char *const schemes[] = {
  "nbd", "nbds", "nbd+unix", "nbds+unix", "nbd+vsock", "nbds+vsock",
};

enum transport { TRANSPORT_TCP, TRANSPORT_UNIX, TRANSPORT_VSOCK };

/* A piece of a string. */
struct span {
  const char *p;
  size_t len;
};

/* What a URI says about where a leg lives, decoded.  The strings
 * belong to xml or are libxml2 allocations (free with uri_parts_free).
 */
struct uri_parts {
  int scheme;                   /* index in schemes[] */
  enum transport transport;
  xmlURI *xml;                  /* libxml2's split */
  struct span authority;        /* as written: after "://" */
  const char *host;             /* TCP: a name, IPv4 or [IPv6] */
  uint64_t cid;                 /* vsock */
  uint64_t port;                /* TCP and vsock */
  char *socket;                 /* Unix: socket=, NULL if absent */
  struct span socket_raw;       /* socket='s value as written */
  const char *export;           /* the path without its '/' */
  bool tls_files;               /* tls-certificates= or tls-psk-file= */
};

/* Free what a parse allocated. */
static void
uri_parts_free (struct uri_parts *u)
{
  xmlFree (u->socket);
  xmlFreeURI (u->xml);
}

#define CLEANUP_URI_PARTS __attribute__ ((cleanup (uri_parts_free)))

/* Is c an unreserved URI character (RFC 3986)? */
static bool
is_unreserved (char c)
{
  return text_is_digit (c) || (c >= 'a' && c <= 'z') ||
    (c >= 'A' && c <= 'Z') || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Write "replica=URI: " and the formatted text.  Returns -1. */
#define bad_uri(err, errlen, uri, ...) \
  msg_bad_value ((err), (errlen), "replica", (uri), __VA_ARGS__)

/* The first whitespace or control character in s, or NULL. */
static const char *
find_control (const char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s <= ' ' || *s == 0x7f)
      return s;
  return NULL;
}

/* The first '%' in s not followed by two hex digits, or NULL. */
static const char *
find_bad_percent (const char *s)
{
  for (; (s = strchr (s, '%')) != NULL; s++)
    if (!text_is_hex (s[1]) || !text_is_hex (s[2]))
      return s;
  return NULL;
}

/* Index of the scheme s[0..len) in schemes[], or -1. */
static int
find_scheme (const char *s, size_t len)
{
  size_t i;

  for (i = 0; i < ARRAY_SIZE (schemes); i++)
    if (strlen (schemes[i]) == len && strncmp (s, schemes[i], len) == 0)
      return i;
  return -1;
}

/* s[0..len) %-decoded by libxml2, as libnbd decodes query parameters
 * (a new string, NULL if out of memory).  xmlURIUnescapeString takes a
 * length of 0 as "up to the NUL", hence the empty case.
 */
static char *
unescape (const char *s, size_t len)
{
  if (len == 0)
    return (char *) xmlStrdup ((const xmlChar *) "");
  if (len > INT_MAX)
    return NULL;
  return xmlURIUnescapeString (s, (int) len, NULL);
}

/* Is h (decoded, brackets included) an IPv6 address, with an optional
 * zone ('%' and unreserved characters)?  Only the characters are
 * checked.
 */
static bool
is_ipv6 (const char *h)
{
  size_t len = strlen (h);
  const char *p = h + 1, *end = h + len - 1;
  bool colon = false;

  if (len < 2 || h[len - 1] != ']')
    return false;
  for (; p < end && *p != '%'; p++) {
    if (*p == ':')
      colon = true;
    else if (!text_is_hex (*p) && *p != '.')
      return false;
  }
  if (p < end) {
    if (end - p < 2)
      return false;
    for (p++; p < end; p++)
      if (!is_unreserved (*p))
        return false;
  }
  return colon;
}

/* Is h (decoded) a host name or IPv4 address (unreserved characters)? */
static bool
is_host_name (const char *h)
{
  for (; *h; h++)
    if (!is_unreserved (*h))
      return false;
  return true;
}

/* The part of a string of digits that libxml2 refuses as a port: not
 * digits, empty, or above INT_MAX?
 */
static bool
is_bad_port_text (struct span p)
{
  uint64_t n;

  return text_parse_digits (p.p, p.len, &n) == -1 || n > INT_MAX;
}

/* Say why libxml2 refused a URI, from its authority: two '@', a '['
 * without ']', something after the host, a port it cannot take; or
 * else that it is not a URI.  Returns -1.
 */
static int
explain_refusal (const char *uri, const struct uri_parts *u,
                 char *err, size_t errlen)
{
  struct span a = u->authority;
  const char *end = a.p + a.len, *at = memchr (a.p, '@', a.len);
  const char *host = at ? at + 1 : a.p, *rest;

  if (at && memchr (host, '@', end - host))
    return bad_uri (err, errlen, uri, "more than one '@' in '%.*s'",
                    (int) a.len, a.p);
  if (host < end && *host == '[') {
    rest = memchr (host, ']', end - host);
    if (rest == NULL)
      return bad_uri (err, errlen, uri, "'[' without ']' in the host");
    rest++;
  }
  else {
    rest = memchr (host, ':', end - host);
    if (rest == NULL)
      rest = end;
  }
  if (rest < end && *rest != ':')
    return bad_uri (err, errlen, uri, "unexpected '%.*s' after the host",
                    (int) (end - rest), rest);
  if (rest < end &&
      is_bad_port_text ((struct span) { rest + 1, end - rest - 1 }))
    return bad_uri (err, errlen, uri,
                    "bad port '%.*s' (expected a number from 1 to %d)",
                    (int) (end - rest - 1), rest + 1,
                    u->transport == TRANSPORT_VSOCK ? VSOCK_PORT_MAX
                    : TCP_PORT_MAX);
  return bad_uri (err, errlen, uri,
                  "not a URI libnbd can parse (RFC 3986: characters such "
                  "as < > \" { } | \\ ^ ` must be %%-escaped)");
}

/* The port of a TCP or vsock URI: 10809 if absent or 0 (libnbd's
 * rule), else in [1, max].
 */
static int
parse_port (const char *uri, struct uri_parts *u, uint64_t max,
            char *err, size_t errlen)
{
  int port = u->xml->port;

  u->port = port > 0 ? (uint64_t) port : NBD_DEFAULT_PORT;
  if (u->port > max)
    return bad_uri (err, errlen, uri,
                    "bad port '%d' (expected a number from 1 to %" PRIu64
                    ")", port, max);
  return 0;
}

/* Check a TCP URI: HOST a name, an IPv4 address or an [IPv6] address. */
static int
check_tcp (const char *uri, struct uri_parts *u, char *err, size_t errlen)
{
  u->host = u->xml->server;
  if (u->host == NULL || u->host[0] == '\0')
    return bad_uri (err, errlen, uri,
                    "no host (expected %s://HOST[:PORT][/EXPORT])",
                    schemes[u->scheme]);
  if (u->host[0] == '[' ? !is_ipv6 (u->host) : !is_host_name (u->host))
    return bad_uri (err, errlen, uri, "bad host '%s'", u->host);
  return parse_port (uri, u, TCP_PORT_MAX, err, errlen);
}

/* Check a vsock URI: a decimal CID. */
static int
check_vsock (const char *uri, struct uri_parts *u, char *err, size_t errlen)
{
  const char *cid = u->xml->server ? u->xml->server : "";

  if (text_parse_digits (cid, strlen (cid), &u->cid) == -1 ||
      u->cid > VSOCK_CID_MAX)
    return bad_uri (err, errlen, uri,
                    "bad or missing CID (expected %s://CID[:PORT][/EXPORT] "
                    "with a numeric CID)", schemes[u->scheme]);
  return parse_port (uri, u, VSOCK_PORT_MAX, err, errlen);
}

/* Check a Unix URI: no authority but a user name, and an absolute
 * socket= path that fits in a socket address.
 */
static int
check_unix (const char *uri, const struct uri_parts *u,
            char *err, size_t errlen)
{
  const char *scheme = schemes[u->scheme];
  struct span a = u->authority;
  const char *at = memchr (a.p, '@', a.len);

  if (at != NULL)
    a = (struct span) { at + 1, a.p + a.len - (at + 1) };
  if (a.len > 0)
    return bad_uri (err, errlen, uri,
                    "%s takes no host ('%.*s'): expected "
                    "%s://[USER@]/[EXPORT]?socket=PATH", scheme,
                    (int) a.len, a.p, scheme);
  if (u->socket == NULL)
    return bad_uri (err, errlen, uri,
                    "no socket (expected %s:///[EXPORT]?socket=PATH)",
                    scheme);
  if (u->socket[0] == '\0')
    return bad_uri (err, errlen, uri, "socket= is empty");
  if (u->socket[0] != '/')
    return bad_uri (err, errlen, uri,
                    "socket=%.*s is not an absolute path",
                    (int) u->socket_raw.len, u->socket_raw.p);
  if (strlen (u->socket) > SUN_PATH_MAX)
    return bad_uri (err, errlen, uri,
                    "socket path longer than %zu bytes, the limit of a "
                    "Unix socket path", SUN_PATH_MAX);
  return 0;
}

/* Is name one of libnbd's TLS file parameters? */
static bool
is_tls_file_param (const char *name)
{
  return strcmp (name, "tls-certificates") == 0 ||
    strcmp (name, "tls-psk-file") == 0;
}

/* Take one query parameter, [p, p + len) as written: socket= and
 * libnbd's TLS files are checked and kept.
 */
static int
take_param (const char *uri, const char *p, size_t len, struct uri_parts *u,
            char *err, size_t errlen)
{
  const char *eq = memchr (p, '=', len);
  size_t name_len = eq ? (size_t) (eq - p) : len;
  struct span raw = { eq ? eq + 1 : p + len, eq ? len - name_len - 1 : 0 };
  char *name, *value;

  if (len == 0 || eq == p)
    return 0;                   /* "&&" and "=value": ignored */
  name = unescape (p, name_len);
  value = name ? unescape (raw.p, raw.len) : NULL;
  if (value == NULL) {
    xmlFree (name);
    return bad_uri (err, errlen, uri, "out of memory");
  }
  if (strcmp (name, "socket") == 0) {
    xmlFree (name);
    if (u->transport != TRANSPORT_UNIX || u->socket != NULL) {
      xmlFree (value);
      return bad_uri (err, errlen, uri, u->socket ? "socket= given twice"
                      : "socket= is only for nbd+unix and nbds+unix");
    }
    u->socket = value;
    u->socket_raw = raw;
    return 0;
  }
  if (is_tls_file_param (name)) {
    u->tls_files = true;
    if (value[0] != '/') {
      xmlFree (name);
      xmlFree (value);
      return bad_uri (err, errlen, uri, "%.*s is not an absolute path",
                      (int) len, p);
    }
  }
  xmlFree (name);
  xmlFree (value);
  return 0;
}

/* Take the parameters of the raw query q, split as libnbd splits
 * them: up to the next '&', or if there is none the next ';'.
 */
static int
parse_query (const char *uri, const char *q, struct uri_parts *u,
             char *err, size_t errlen)
{
  while (q && *q) {
    const char *end = strchr (q, '&');

    if (end == NULL)
      end = strchr (q, ';');
    if (end == NULL)
      end = q + strlen (q);
    if (take_param (uri, q, end - q, u, err, errlen) == -1)
      return -1;
    q = *end ? end + 1 : end;
  }
  return 0;
}

/* The checks on the URI as written, before libxml2 splits it: the
 * characters, the scheme and "://", no empty user name.
 */
static int
check_text (const char *uri, struct uri_parts *u, char *err, size_t errlen)
{
  size_t scheme_len = strcspn (uri, ":/?#");
  const char *p;

  if ((p = find_control (uri)) != NULL)
    return bad_uri (err, errlen, uri,
                    "whitespace or control character at offset %td",
                    p - uri);
  if (strncmp (uri + scheme_len, "://", 3) != 0)
    return bad_uri (err, errlen, uri,
                    "not an NBD URI (such as nbd://HOST[:PORT][/EXPORT] "
                    "or nbd+unix:///[EXPORT]?socket=PATH)");
  u->scheme = find_scheme (uri, scheme_len);
  if (u->scheme == -1) {
    bad_uri (err, errlen, uri, "unknown scheme '%.*s' (expected ",
             (int) scheme_len, uri);
    msg_append_list (err, errlen, schemes, ARRAY_SIZE (schemes));
    msg_append (err, errlen, ")");
    return -1;
  }
  u->transport = u->scheme / 2;
  if ((p = find_bad_percent (uri)) != NULL)
    return bad_uri (err, errlen, uri, "bad %%-escape '%.3s'", p);
  if (strstr (uri, "%00") != NULL)
    return bad_uri (err, errlen, uri, "bad %%-escape '%%00' (a NUL)");
  p = uri + scheme_len + 3;
  u->authority = (struct span) { p, strcspn (p, "/?#") };
  if (p[0] == '@')
    return bad_uri (err, errlen, uri, "empty user name before '@'");
  return 0;
}

/* Split (with libxml2, as libnbd does) and check an NBD URI:
 *   SCHEME://AUTHORITY[/EXPORT][?QUERY]
 * u must be freed with uri_parts_free whatever the result.
 */
static int
parse_uri (const char *uri, struct uri_parts *u, char *err, size_t errlen)
{
  memset (u, 0, sizeof *u);
  if (check_text (uri, u, err, errlen) == -1)
    return -1;
  u->xml = xmlParseURI (uri);
  if (u->xml == NULL)
    return explain_refusal (uri, u, err, errlen);
  if (u->xml->fragment != NULL)
    return bad_uri (err, errlen, uri, "unexpected fragment '%s'",
                    strchr (uri, '#'));
  if (parse_query (uri, u->xml->query_raw, u, err, errlen) == -1)
    return -1;
  u->export = u->xml->path ? u->xml->path + 1 : "";
  switch (u->transport) {
  case TRANSPORT_TCP:
    return check_tcp (uri, u, err, errlen);
  case TRANSPORT_VSOCK:
    return check_vsock (uri, u, err, errlen);
  case TRANSPORT_UNIX:
    return check_unix (uri, u, err, errlen);
  }
  abort ();
}

/* Check an NBD URI; the message starts "replica=URI: ". */
int
config_check_uri (const char *uri, char *err, size_t errlen)
{
  CLEANUP_URI_PARTS struct uri_parts u = { 0 };

  return parse_uri (uri, &u, err, errlen);
}

/* Does a URI's query name libnbd's TLS files (whatever else is wrong
 * with the URI: nbdrep's URIs are not checked, and may be relative)?
 */
bool
config_uri_names_tls_files (const char *uri)
{
  CLEANUP_URI_PARTS struct uri_parts u = { 0 };

  parse_uri (uri, &u, NULL, 0);
  return u.tls_files;
}

/* Do two checked URIs name the same leg (see the note at the top)? */
static bool
same_leg (const struct uri_parts *a, const struct uri_parts *b)
{
  if (a->transport != b->transport || strcmp (a->export, b->export) != 0)
    return false;
  switch (a->transport) {
  case TRANSPORT_TCP:
    return strcasecmp (a->host, b->host) == 0 && a->port == b->port;
  case TRANSPORT_VSOCK:
    return a->cid == b->cid && a->port == b->port;
  case TRANSPORT_UNIX:
    return strcmp (a->socket, b->socket) == 0;
  }
  abort ();
}

/* The socket path of a Unix-socket URI, decoded (see params.h). */
int
config_unix_socket (const char *uri, char *path, size_t len)
{
  CLEANUP_URI_PARTS struct uri_parts u = { 0 };

  if (parse_uri (uri, &u, NULL, 0) == -1 || u.transport != TRANSPORT_UNIX ||
      strlen (u.socket) >= len)
    return -1;
  strcpy (path, u.socket);
  return 0;
}

/* Do two URIs name the same leg?  False if either is malformed. */
bool
config_same_leg (const char *a, const char *b)
{
  CLEANUP_URI_PARTS struct uri_parts ua = { 0 };
  CLEANUP_URI_PARTS struct uri_parts ub = { 0 };

  return parse_uri (a, &ua, NULL, 0) == 0 &&
    parse_uri (b, &ub, NULL, 0) == 0 && same_leg (&ua, &ub);
}
