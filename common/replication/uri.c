/* SPDX-License-Identifier: BSD-3-Clause */
/* NBD URIs of legs: checking one, and telling whether two name the same
 * leg (pure; config_check_uri and config_same_leg of params.h).
 *
 * Checking (messages start "replica=URI: ").  The schemes are libnbd's,
 * lowercase: nbd and nbds take [USER@]HOST[:PORT] with HOST a name,
 * IPv4 or [IPv6[%25ZONE]] and PORT 1..65535; nbd+unix and nbds+unix
 * take [USER@] (a TLS user name) and otherwise an empty authority, and
 * ?socket=PATH, absolute and at most 107 bytes once %-decoded;
 * nbd+vsock and nbds+vsock take [USER@]CID[:PORT], both 32-bit
 * numbers.  The path is empty, "/" or "/EXPORT".  libnbd's
 * tls-certificates= and tls-psk-file= must be absolute paths (libnbd
 * opens them at every connection, and nbdkit in the background runs in
 * "/"); other query parameters are libnbd's business.  A fragment,
 * whitespace, control characters and a '%' without two hex digits are
 * refused.
 *
 * Same leg.  Two URIs name the same leg when they have the same
 * transport (TCP, Unix or vsock: nbd and nbds are the same server, one
 * with TLS) and the same export name, and: for TCP the same host
 * (ignoring case) and port (10809 when absent); for vsock the same CID
 * and port; for Unix the same socket= path.  Everything else (user
 * name, other query parameters, "nbd+unix://" against "nbd+unix:///",
 * i.e. an empty path and "/") is ignored.  Strings are compared as
 * written (not %-decoded), and different names of one host (localhost
 * and 127.0.0.1) are not detected.
 */

#include <config.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "params.h"
#include "params-text.h"

#define NBD_DEFAULT_PORT 10809
#define TCP_PORT_MAX 65535
#define VSOCK_MAX UINT32_MAX           /* CIDs and vsock ports */

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

/* What a URI says about where a leg lives. */
struct uri_parts {
  int scheme;                   /* index in schemes[] */
  enum transport transport;
  struct span host;             /* TCP: a name, IPv4 or [IPv6] */
  uint64_t cid;                 /* vsock */
  uint64_t port;                /* TCP and vsock */
  struct span socket;           /* Unix: socket= value (p NULL if absent) */
  struct span export;           /* the path without its '/' */
  bool tls_files;               /* tls-certificates= or tls-psk-file= */
};

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

/* Value of the hex digit c. */
static unsigned
hex_value (char c)
{
  if (text_is_digit (c))
    return c - '0';
  return (c | 0x20) - 'a' + 10;
}

/* First byte of a %-encoded (and checked) string, decoded. */
static unsigned char
decoded_first (struct span s)
{
  if (s.p[0] == '%')
    return hex_value (s.p[1]) * 16 + hex_value (s.p[2]);
  return s.p[0];
}

/* Length of a %-encoded (and checked) string once decoded. */
static size_t
decoded_len (struct span s)
{
  size_t i, len = s.len;

  for (i = 0; i < s.len; i++)
    if (s.p[i] == '%')
      len -= 2;
  return len;
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

/* Is h (brackets included) an IPv6 address, with an optional zone
 * ("%25" and unreserved characters)?  Only the characters are checked.
 */
static bool
is_ipv6 (struct span h)
{
  const char *p = h.p + 1, *end = h.p + h.len - 1;
  bool colon = false;

  for (; p < end && *p != '%'; p++) {
    if (*p == ':')
      colon = true;
    else if (!text_is_hex (*p) && *p != '.')
      return false;
  }
  if (p < end) {
    if (end - p < 4 || strncmp (p, "%25", 3) != 0)
      return false;
    for (p += 3; p < end; p++)
      if (!is_unreserved (*p))
        return false;
  }
  return colon;
}

/* Is h a host name or IPv4 address (unreserved characters, %-escapes)? */
static bool
is_host_name (struct span h)
{
  size_t i;

  for (i = 0; i < h.len; i++)
    if (!is_unreserved (h.p[i]) && h.p[i] != '%')
      return false;
  return true;
}

/* Drop "USER@" from the front of an authority. */
static int
strip_userinfo (const char *uri, struct span *a, char *err, size_t errlen)
{
  const char *at = memchr (a->p, '@', a->len);

  if (at == NULL)
    return 0;
  if (at == a->p)
    return bad_uri (err, errlen, uri, "empty user name before '@'");
  a->len -= at + 1 - a->p;
  a->p = at + 1;
  return 0;
}

/* Parse what follows the host: nothing, or ":PORT" in [1, max]. */
static int
parse_port (const char *uri, struct span rest, uint64_t max, uint64_t *port,
            char *err, size_t errlen)
{
  *port = NBD_DEFAULT_PORT;
  if (rest.len == 0)
    return 0;
  if (rest.p[0] != ':')
    return bad_uri (err, errlen, uri, "unexpected '%.*s' after the host",
                    (int) rest.len, rest.p);
  if (text_parse_digits (rest.p + 1, rest.len - 1, port) == -1 ||
      *port < 1 || *port > max)
    return bad_uri (err, errlen, uri,
                    "bad port '%.*s' (expected a number from 1 to %" PRIu64
                    ")", (int) rest.len - 1, rest.p + 1, max);
  return 0;
}

/* Parse a TCP authority: [USER@]HOST[:PORT], HOST a name, an IPv4
 * address or an [IPv6] address.
 */
static int
parse_tcp_authority (const char *uri, struct span a, struct uri_parts *u,
                     char *err, size_t errlen)
{
  const char *end;

  if (strip_userinfo (uri, &a, err, errlen) == -1)
    return -1;
  if (a.len > 0 && a.p[0] == '[') {
    end = memchr (a.p, ']', a.len);
    if (end == NULL)
      return bad_uri (err, errlen, uri, "'[' without ']' in the host");
    end++;
  }
  else {
    end = memchr (a.p, ':', a.len);
    if (end == NULL)
      end = a.p + a.len;
  }
  u->host = (struct span) { a.p, end - a.p };
  if (u->host.len == 0)
    return bad_uri (err, errlen, uri,
                    "no host (expected %s://HOST[:PORT][/EXPORT])",
                    schemes[u->scheme]);
  if (u->host.p[0] == '[' ? !is_ipv6 (u->host) : !is_host_name (u->host))
    return bad_uri (err, errlen, uri, "bad host '%.*s'",
                    (int) u->host.len, u->host.p);
  return parse_port (uri, (struct span) { end, a.p + a.len - end },
                     TCP_PORT_MAX, &u->port, err, errlen);
}

/* Parse a vsock authority: [USER@]CID[:PORT]. */
static int
parse_vsock_authority (const char *uri, struct span a, struct uri_parts *u,
                       char *err, size_t errlen)
{
  size_t len;

  if (strip_userinfo (uri, &a, err, errlen) == -1)
    return -1;
  len = strspn (a.p, DIGITS);     /* the authority ends in a non-digit */
  if (text_parse_digits (a.p, len, &u->cid) == -1 || u->cid > VSOCK_MAX)
    return bad_uri (err, errlen, uri,
                    "bad or missing CID (expected %s://CID[:PORT][/EXPORT] "
                    "with a numeric CID)", schemes[u->scheme]);
  return parse_port (uri, (struct span) { a.p + len, a.len - len },
                     VSOCK_MAX, &u->port, err, errlen);
}

/* Check a Unix URI: no authority but a user name, and an absolute
 * socket= path that fits in a socket address.
 */
static int
check_unix (const char *uri, struct span a, const struct uri_parts *u,
            char *err, size_t errlen)
{
  const char *scheme = schemes[u->scheme];

  if (strip_userinfo (uri, &a, err, errlen) == -1)
    return -1;
  if (a.len > 0)
    return bad_uri (err, errlen, uri,
                    "%s takes no host ('%.*s'): expected "
                    "%s://[USER@]/[EXPORT]?socket=PATH", scheme,
                    (int) a.len, a.p, scheme);
  if (u->socket.p == NULL)
    return bad_uri (err, errlen, uri,
                    "no socket (expected %s:///[EXPORT]?socket=PATH)",
                    scheme);
  if (u->socket.len == 0)
    return bad_uri (err, errlen, uri, "socket= is empty");
  if (decoded_first (u->socket) != '/')
    return bad_uri (err, errlen, uri,
                    "socket=%.*s is not an absolute path",
                    (int) u->socket.len, u->socket.p);
  if (decoded_len (u->socket) > SUN_PATH_MAX)
    return bad_uri (err, errlen, uri,
                    "socket path longer than %zu bytes, the limit of a "
                    "Unix socket path", SUN_PATH_MAX);
  return 0;
}

/* If the parameter param (its length len) is NAME=VALUE, VALUE. */
static bool
param_value (const char *param, size_t len, const char *name,
             struct span *value)
{
  size_t n = strlen (name);

  if (len < n + 1 || strncmp (param, name, n) != 0 || param[n] != '=')
    return false;
  *value = (struct span) { param + n + 1, len - n - 1 };
  return true;
}

/* Check libnbd's TLS file parameter in param (its length len), if it
 * is one: an absolute path.
 */
static int
check_tls_file (const char *uri, const char *param, size_t len,
                struct uri_parts *u, char *err, size_t errlen)
{
  static const char *const names[] = { "tls-certificates", "tls-psk-file" };
  struct span value;
  size_t i;

  for (i = 0; i < ARRAY_SIZE (names); i++)
    if (param_value (param, len, names[i], &value)) {
      u->tls_files = true;
      if (value.len == 0 || decoded_first (value) != '/')
        return bad_uri (err, errlen, uri,
                        "%.*s is not an absolute path", (int) len, param);
    }
  return 0;
}

/* Find socket= and libnbd's TLS files in a query (parameters separated
 * by '&').
 */
static int
parse_query (const char *uri, struct span q, struct uri_parts *u,
             char *err, size_t errlen)
{
  const char *p = q.p, *end = q.p + q.len;
  struct span value;

  while (p < end) {
    const char *amp = memchr (p, '&', end - p);
    size_t len = (amp ? amp : end) - p;

    if (param_value (p, len, "socket", &value)) {
      if (u->transport != TRANSPORT_UNIX)
        return bad_uri (err, errlen, uri,
                        "socket= is only for nbd+unix and nbds+unix");
      if (u->socket.p != NULL)
        return bad_uri (err, errlen, uri, "socket= given twice");
      u->socket = value;
    }
    else if (check_tls_file (uri, p, len, u, err, errlen) == -1)
      return -1;
    p = amp ? amp + 1 : end;
  }
  return 0;
}

/* Split and check an NBD URI:
 *   SCHEME://AUTHORITY[/EXPORT][?QUERY]
 */
static int
parse_uri (const char *uri, struct uri_parts *u, char *err, size_t errlen)
{
  struct span authority, query = { NULL, 0 };
  size_t scheme_len = strcspn (uri, ":/?#");
  const char *p;

  memset (u, 0, sizeof *u);
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

  p = uri + scheme_len + 3;
  authority = (struct span) { p, strcspn (p, "/?#") };
  p += authority.len;
  if (*p == '/') {
    u->export = (struct span) { p + 1, strcspn (p + 1, "?#") };
    p += 1 + u->export.len;
  }
  if (*p == '?') {
    query = (struct span) { p + 1, strcspn (p + 1, "#") };
    p += 1 + query.len;
  }
  if (*p == '#')
    return bad_uri (err, errlen, uri, "unexpected fragment '%s'", p);
  if (parse_query (uri, query, u, err, errlen) == -1)
    return -1;

  switch (u->transport) {
  case TRANSPORT_TCP:
    return parse_tcp_authority (uri, authority, u, err, errlen);
  case TRANSPORT_VSOCK:
    return parse_vsock_authority (uri, authority, u, err, errlen);
  case TRANSPORT_UNIX:
    return check_unix (uri, authority, u, err, errlen);
  }
  abort ();
}

/* Check an NBD URI; the message starts "replica=URI: ". */
int
config_check_uri (const char *uri, char *err, size_t errlen)
{
  struct uri_parts u;

  return parse_uri (uri, &u, err, errlen);
}

/* Does a URI's query name libnbd's TLS files (whatever else is wrong
 * with the URI: nbdrep's URIs are not checked, and may be relative)?
 */
bool
config_uri_names_tls_files (const char *uri)
{
  struct uri_parts u;

  parse_uri (uri, &u, NULL, 0);
  return u.tls_files;
}

/* Are two spans equal (ignoring ASCII case if asked)? */
static bool
same_span (struct span a, struct span b, bool ignore_case)
{
  if (a.len != b.len)
    return false;
  if (a.len == 0)
    return true;
  return ignore_case ? strncasecmp (a.p, b.p, a.len) == 0
    : memcmp (a.p, b.p, a.len) == 0;
}

/* Do two checked URIs name the same leg (see the note at the top)? */
static bool
same_leg (const struct uri_parts *a, const struct uri_parts *b)
{
  if (a->transport != b->transport || !same_span (a->export, b->export, false))
    return false;
  switch (a->transport) {
  case TRANSPORT_TCP:
    return same_span (a->host, b->host, true) && a->port == b->port;
  case TRANSPORT_VSOCK:
    return a->cid == b->cid && a->port == b->port;
  case TRANSPORT_UNIX:
    return same_span (a->socket, b->socket, false);
  }
  abort ();
}

/* The socket path of a Unix-socket URI, decoded (see params.h). */
int
config_unix_socket (const char *uri, char *path, size_t len)
{
  struct uri_parts u;
  size_t i = 0, n = 0;

  if (parse_uri (uri, &u, NULL, 0) == -1 || u.transport != TRANSPORT_UNIX ||
      u.socket.p == NULL || decoded_len (u.socket) >= len)
    return -1;
  while (i < u.socket.len) {
    struct span rest = { u.socket.p + i, u.socket.len - i };

    path[n++] = (char) decoded_first (rest);
    i += u.socket.p[i] == '%' ? 3 : 1;
  }
  path[n] = '\0';
  return 0;
}

/* Do two URIs name the same leg?  False if either is malformed. */
bool
config_same_leg (const char *a, const char *b)
{
  struct uri_parts ua, ub;

  return parse_uri (a, &ua, NULL, 0) == 0 &&
    parse_uri (b, &ub, NULL, 0) == 0 && same_leg (&ua, &ub);
}
