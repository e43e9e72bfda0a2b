/* SPDX-License-Identifier: BSD-3-Clause */
/* Parameters of a volume: parsing and validation (pure).
 *
 * config_set looks the key up in key_names[] (its index is also its
 * bit in c->seen) and parses the value with one small helper per kind
 * of value: whole numbers, sizes, seconds, choices, booleans, paths
 * and URIs.  config_check then checks what depends on several keys.
 *
 * Messages.  Every message names the parameter as KEY=VALUE, the value
 * quoted with control characters escaped as \xNN so that no value can
 * forge a log line.  They are built with append(), which truncates
 * safely into any buffer, even one of length 0.
 *
 * Numbers are digits only: no sign, no space, no base prefix, no
 * unit where none is expected.  Seconds are parsed with strtod after
 * checking the DIGITS[.DIGITS] form; strtod follows LC_NUMERIC, which
 * is "C" in nbdkit (the server never calls setlocale): other callers
 * must not change LC_NUMERIC either.
 *
 * URIs (config_check_uri; its messages start "replica=URI: ").  The
 * schemes are libnbd's, lowercase: nbd and nbds take [USER@]HOST[:PORT]
 * with HOST a name, IPv4 or [IPv6[%25ZONE]] and PORT 1..65535;
 * nbd+unix and nbds+unix take an empty authority and ?socket=PATH,
 * absolute and at most 107 bytes once %-decoded; nbd+vsock and
 * nbds+vsock take [USER@]CID[:PORT], both 32-bit numbers.  The path is
 * empty, "/" or "/EXPORT"; query parameters other than socket= are
 * libnbd's business; a fragment, whitespace, control characters and a
 * '%' without two hex digits are refused.
 *
 * Defaults yield to explicit values.  When a key was not given and its
 * default conflicts with a key that was, config_check adjusts the
 * default (max-legs is raised to the number of legs, al-extent to the
 * chunk, resync-min-rate lowered to resync-rate).  Two explicit values
 * that conflict are an error.
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

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "params.h"
#include "meta.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])

#define CONNECTIONS_MAX 64
#define CHUNK_MIN 4096
#define CHUNK_MAX (64u << 20)
#define AL_EXTENT_MAX (1u << 30)
#define TIMEOUT_MAX 3600.0
#define WAIT_MAX 86400.0
#define UBLK_ID_MAX 1048575
#define UBLK_QUEUES_MAX 64
#define UBLK_DEPTH_MAX 4096
#define NBD_DEFAULT_PORT 10809
#define TCP_PORT_MAX 65535
#define VSOCK_MAX UINT32_MAX           /* CIDs and vsock ports */
#define SUN_PATH_MAX (sizeof ((struct sockaddr_un *) 0)->sun_path - 1)

#define DIGITS "0123456789"

/* The keys.  A key's index is its bit in struct config's seen. */
enum key {
  KEY_REPLICA, KEY_CONNECTIONS, KEY_QUORUM, KEY_READ, KEY_TIMEOUT,
  KEY_CONTROL, KEY_CHUNK, KEY_MAX_LEGS, KEY_AL_EXTENT, KEY_AL_EXTENTS,
  KEY_RESYNC_RATE, KEY_RESYNC_MIN_RATE, KEY_VERIFY_RATE, KEY_INIT, KEY_WAIT, KEY_FORCE,
  KEY_PREFER, KEY_METADATA, KEY_UBLK, KEY_UBLK_QUEUES, KEY_UBLK_DEPTH,
  KEY_UBLK_KEEP,
  NR_KEYS
};

_Static_assert (NR_KEYS <= 32, "struct config's seen holds 32 keys");

static const char *const key_names[NR_KEYS] = {
  [KEY_REPLICA] = "replica",
  [KEY_CONNECTIONS] = "connections",
  [KEY_QUORUM] = "quorum",
  [KEY_READ] = "read",
  [KEY_TIMEOUT] = "timeout",
  [KEY_CONTROL] = "control",
  [KEY_CHUNK] = "chunk",
  [KEY_MAX_LEGS] = "max-legs",
  [KEY_AL_EXTENT] = "al-extent",
  [KEY_AL_EXTENTS] = "al-extents",
  [KEY_RESYNC_RATE] = "resync-rate",
  [KEY_RESYNC_MIN_RATE] = "resync-min-rate",
  [KEY_VERIFY_RATE] = "verify-rate",
  [KEY_INIT] = "init",
  [KEY_WAIT] = "wait",
  [KEY_FORCE] = "force",
  [KEY_PREFER] = "prefer",
  [KEY_METADATA] = "metadata",
  [KEY_UBLK] = "ublk",
  [KEY_UBLK_QUEUES] = "ublk-queues",
  [KEY_UBLK_DEPTH] = "ublk-depth",
  [KEY_UBLK_KEEP] = "ublk-keep",
};

static const char *const read_names[] = {
  [READ_LEAST_BUSY] = "least-busy",
  [READ_ROUND_ROBIN] = "round-robin",
  [READ_FIRST] = "first",
};

/* "none" is the default and is not accepted as a value. */
static const char *const init_names[] = {
  [INIT_NONE] = "none",
  [INIT_COPY] = "copy",
  [INIT_ZERO] = "zero",
  [INIT_ASSUME_CLEAN] = "assume-clean",
};

static const char *const metadata_names[] = {
  [METADATA_INTERNAL] = "internal",
  [METADATA_NONE] = "none",
};

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
};

/* Bit of key k in struct config's seen. */
static uint32_t
key_bit (enum key k)
{
  return UINT32_C (1) << k;
}

/* Append formatted text to the message in err, truncating to errlen. */
static void __attribute__ ((format (printf, 3, 0)))
vappend (char *err, size_t errlen, const char *fs, va_list ap)
{
  size_t used;

  if (errlen == 0)
    return;
  used = strnlen (err, errlen);
  if (used + 1 >= errlen)
    return;
  vsnprintf (err + used, errlen - used, fs, ap);
}

/* Append formatted text to the message in err. */
static void __attribute__ ((format (printf, 3, 4)))
append (char *err, size_t errlen, const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  vappend (err, errlen, fs, ap);
  va_end (ap);
}

/* Append s, with control characters escaped as \xNN. */
static void
append_quoted (char *err, size_t errlen, const char *s)
{
  for (; *s; s++) {
    unsigned char ch = *s;

    if (ch < 0x20 || ch == 0x7f)
      append (err, errlen, "\\x%02x", ch);
    else
      append (err, errlen, "%c", ch);
  }
}

/* Append "a, b or c" from names[0..n). */
static void
append_list (char *err, size_t errlen, const char *const *names, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    append (err, errlen, "%s%s",
            i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
}

/* Start a new message. */
static void
clear (char *err, size_t errlen)
{
  if (errlen > 0)
    err[0] = '\0';
}

/* Write a message that is not about one KEY=VALUE.  Returns -1. */
static int __attribute__ ((format (printf, 3, 4)))
fail (char *err, size_t errlen, const char *fs, ...)
{
  va_list ap;

  clear (err, errlen);
  va_start (ap, fs);
  vappend (err, errlen, fs, ap);
  va_end (ap);
  return -1;
}

/* Start a message about KEY=VALUE with "KEY=VALUE: ". */
static void
begin_value (char *err, size_t errlen, const char *key, const char *value)
{
  clear (err, errlen);
  append (err, errlen, "%s=", key);
  append_quoted (err, errlen, value);
  append (err, errlen, ": ");
}

/* Write "KEY=VALUE: " and the formatted text.  Returns -1. */
static int __attribute__ ((format (printf, 5, 6)))
bad_value (char *err, size_t errlen, const char *key, const char *value,
           const char *fs, ...)
{
  va_list ap;

  begin_value (err, errlen, key, value);
  va_start (ap, fs);
  vappend (err, errlen, fs, ap);
  va_end (ap);
  return -1;
}

/* Format n in the largest binary unit dividing it: 65536 -> "64K". */
static const char *
format_size (uint64_t n, char *buf, size_t len)
{
  static const char units[] = "KMGTPE";
  int unit = -1;

  while (n != 0 && n % 1024 == 0) {
    n /= 1024;
    unit++;
  }
  if (unit < 0)
    snprintf (buf, len, "%" PRIu64, n);
  else
    snprintf (buf, len, "%" PRIu64 "%c", n, units[unit]);
  return buf;
}

/* Is c an ASCII digit? */
static bool
is_digit (char c)
{
  return c >= '0' && c <= '9';
}

/* Is c a hexadecimal digit? */
static bool
is_hex (char c)
{
  return is_digit (c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Is c an unreserved URI character (RFC 3986)? */
static bool
is_unreserved (char c)
{
  return is_digit (c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
    c == '-' || c == '.' || c == '_' || c == '~';
}

/* Parse the len bytes at s as a decimal number: digits only, within
 * uint64_t.  Returns 0 or -1.
 */
static int
parse_digits (const char *s, size_t len, uint64_t *r)
{
  unsigned long long n;
  char *end;
  size_t i;

  if (len == 0)
    return -1;
  for (i = 0; i < len; i++)
    if (!is_digit (s[i]))
      return -1;
  errno = 0;
  n = strtoull (s, &end, 10);
  if (errno != 0 || end != s + len)
    return -1;
  *r = n;
  return 0;
}

/* Parse KEY=VALUE as a whole number in [min, max]. */
static int
parse_number (const char *key, const char *value, uint64_t min, uint64_t max,
              uint64_t *r, char *err, size_t errlen)
{
  uint64_t n;

  if (parse_digits (value, strlen (value), &n) == -1)
    return bad_value (err, errlen, key, value,
                      "must be a whole number between %" PRIu64
                      " and %" PRIu64, min, max);
  if (n < min || n > max)
    return bad_value (err, errlen, key, value,
                      "must be between %" PRIu64 " and %" PRIu64, min, max);
  *r = n;
  return 0;
}

/* Set an unsigned field from a whole number in [min, max]. */
static int
set_unsigned (const char *key, const char *value, unsigned min, unsigned max,
              unsigned *dst, char *err, size_t errlen)
{
  uint64_t n;

  if (parse_number (key, value, min, max, &n, err, errlen) == -1)
    return -1;
  *dst = n;
  return 0;
}

/* Set an int field from a whole number in [0, max]. */
static int
set_int (const char *key, const char *value, int max, int *dst,
         char *err, size_t errlen)
{
  uint64_t n;

  if (parse_number (key, value, 0, max, &n, err, errlen) == -1)
    return -1;
  *dst = n;
  return 0;
}

/* Parse a size: digits, an optional K/M/G/T/P/E (binary), "B" or "iB". */
int
config_parse_size (const char *str, uint64_t *r)
{
  static const char units[] = "kKmMgGtTpPeE";
  size_t digits = strspn (str, DIGITS);
  const char *p = str + digits;
  const char *unit;
  unsigned shift = 0;
  uint64_t n;

  if (parse_digits (str, digits, &n) == -1)
    return -1;
  if (*p != '\0' && (unit = strchr (units, *p)) != NULL) {
    shift = 10 * ((unit - units) / 2 + 1);
    p++;
    if (strcasecmp (p, "ib") == 0)
      p += 2;
  }
  if (strcasecmp (p, "b") == 0)
    p++;
  if (*p != '\0' || n > UINT64_MAX >> shift)
    return -1;
  *r = n << shift;
  return 0;
}

/* Set a uint64_t field from a size. */
static int
set_size (const char *key, const char *value, uint64_t *dst,
          char *err, size_t errlen)
{
  if (config_parse_size (value, dst) == -1)
    return bad_value (err, errlen, key, value,
                      "not a size (bytes, or a number with a K, M, G, T, "
                      "P or E suffix)");
  return 0;
}

/* Set a uint32_t field from a power of two size in [min, max]. */
static int
set_pow2_size (const char *key, const char *value, uint32_t min, uint32_t max,
               uint32_t *dst, char *err, size_t errlen)
{
  char lo[32], hi[32];
  uint64_t n;

  if (set_size (key, value, &n, err, errlen) == -1)
    return -1;
  if (n < min || n > max || (n & (n - 1)) != 0)
    return bad_value (err, errlen, key, value,
                      "must be a power of two between %s and %s",
                      format_size (min, lo, sizeof lo),
                      format_size (max, hi, sizeof hi));
  *dst = n;
  return 0;
}

/* Parse seconds: DIGITS or DIGITS.DIGITS, no sign, exponent or unit. */
int
config_parse_seconds (const char *str, double *r)
{
  size_t whole = strspn (str, DIGITS);
  size_t len = whole;
  char *end;
  double d;

  if (whole == 0)
    return -1;
  if (str[len] == '.') {
    size_t fraction = strspn (str + len + 1, DIGITS);

    if (fraction == 0)
      return -1;
    len += 1 + fraction;
  }
  if (str[len] != '\0')
    return -1;
  d = strtod (str, &end);
  /* Overflow (ERANGE) returns HUGE_VAL, which isfinite rejects;
   * underflow (ERANGE with a tiny or zero result) is a fine number.
   */
  if (end != str + len || !isfinite (d))
    return -1;
  *r = d;
  return 0;
}

/* Set a seconds field: in (0, max] if positive, else [0, max]. */
static int
set_seconds (const char *key, const char *value, bool positive, double max,
             double *dst, char *err, size_t errlen)
{
  double d;

  if (config_parse_seconds (value, &d) == -1)
    return bad_value (err, errlen, key, value,
                      "not a number of seconds (such as 10 or 0.5, "
                      "without a unit)");
  if (positive && d <= 0)
    return bad_value (err, errlen, key, value,
                      "must be more than 0 and at most %g seconds", max);
  if (d > max)
    return bad_value (err, errlen, key, value,
                      "must be at most %g seconds", max);
  *dst = d;
  return 0;
}

/* Parse KEY=VALUE as one of names[first..n).  Returns the index or -1. */
static int
parse_choice (const char *key, const char *value, const char *const *names,
              size_t first, size_t n, char *err, size_t errlen)
{
  size_t i;

  for (i = first; i < n; i++)
    if (strcmp (value, names[i]) == 0)
      return i;
  begin_value (err, errlen, key, value);
  append (err, errlen, "must be ");
  append_list (err, errlen, names + first, n - first);
  return -1;
}

/* Set a bool field from 1/0, true/false, yes/no or on/off. */
static int
set_bool (const char *key, const char *value, bool *dst,
          char *err, size_t errlen)
{
  static const char *const spellings[][2] = {
    { "0", "1" }, { "false", "true" }, { "no", "yes" }, { "off", "on" },
  };
  size_t i, v;

  for (i = 0; i < ARRAY_SIZE (spellings); i++)
    for (v = 0; v < 2; v++)
      if (strcasecmp (value, spellings[i][v]) == 0) {
        *dst = v;
        return 0;
      }
  return bad_value (err, errlen, key, value,
                    "must be 1/0, true/false, yes/no or on/off");
}

/* Set control=PATH: non-empty, short enough for a Unix socket. */
static int
set_control (struct config *c, const char *key, const char *value,
             char *err, size_t errlen)
{
  if (value[0] == '\0')
    return bad_value (err, errlen, key, value, "must not be empty");
  if (strlen (value) > SUN_PATH_MAX)
    return bad_value (err, errlen, key, value,
                      "longer than %zu bytes, the limit of a Unix socket "
                      "path", SUN_PATH_MAX);
  c->control = value;
  return 0;
}

/* Set quorum=N (1..MAX_LEGS) or quorum=majority. */
static int
set_quorum (struct config *c, const char *key, const char *value,
            char *err, size_t errlen)
{
  uint64_t n;

  c->quorum_given = true;
  if (strcmp (value, "majority") == 0) {
    c->quorum_majority = true;
    c->quorum = 0;
    return 0;
  }
  if (parse_digits (value, strlen (value), &n) == -1 ||
      n < 1 || n > MAX_LEGS)
    return bad_value (err, errlen, key, value,
                      "must be majority or a number of legs between 1 "
                      "and %d", MAX_LEGS);
  c->quorum_majority = false;
  c->quorum = n;
  return 0;
}

/* Write "replica=URI: " and the formatted text.  Returns -1. */
static int __attribute__ ((format (printf, 4, 5)))
bad_uri (char *err, size_t errlen, const char *uri, const char *fs, ...)
{
  va_list ap;

  begin_value (err, errlen, key_names[KEY_REPLICA], uri);
  va_start (ap, fs);
  vappend (err, errlen, fs, ap);
  va_end (ap);
  return -1;
}

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
    if (!is_hex (s[1]) || !is_hex (s[2]))
      return s;
  return NULL;
}

/* Value of the hex digit c. */
static unsigned
hex_value (char c)
{
  if (is_digit (c))
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
    else if (!is_hex (*p) && *p != '.')
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
  if (parse_digits (rest.p + 1, rest.len - 1, port) == -1 ||
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
  if (parse_digits (a.p, len, &u->cid) == -1 || u->cid > VSOCK_MAX)
    return bad_uri (err, errlen, uri,
                    "bad or missing CID (expected %s://CID[:PORT][/EXPORT] "
                    "with a numeric CID)", schemes[u->scheme]);
  return parse_port (uri, (struct span) { a.p + len, a.len - len },
                     VSOCK_MAX, &u->port, err, errlen);
}

/* Check a Unix URI: an empty authority and an absolute socket= path
 * that fits in a socket address.
 */
static int
check_unix (const char *uri, struct span a, const struct uri_parts *u,
            char *err, size_t errlen)
{
  const char *scheme = schemes[u->scheme];

  if (a.len > 0)
    return bad_uri (err, errlen, uri,
                    "%s takes no host ('%.*s'): expected "
                    "%s:///[EXPORT]?socket=PATH", scheme,
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

/* Find socket= in a query (parameters separated by '&'). */
static int
parse_query (const char *uri, struct span q, struct uri_parts *u,
             char *err, size_t errlen)
{
  static const char socket_eq[] = "socket=";
  const size_t n = sizeof socket_eq - 1;
  const char *p = q.p, *end = q.p + q.len;

  while (p < end) {
    const char *amp = memchr (p, '&', end - p);
    const char *next = amp ? amp : end;

    if ((size_t) (next - p) >= n && strncmp (p, socket_eq, n) == 0) {
      if (u->transport != TRANSPORT_UNIX)
        return bad_uri (err, errlen, uri,
                        "socket= is only for nbd+unix and nbds+unix");
      if (u->socket.p != NULL)
        return bad_uri (err, errlen, uri, "socket= given twice");
      u->socket = (struct span) { p + n, next - p - n };
    }
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
    append_list (err, errlen, schemes, ARRAY_SIZE (schemes));
    append (err, errlen, ")");
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

/* Do two URIs name the same leg?  False if either is malformed. */
bool
config_same_leg (const char *a, const char *b)
{
  struct uri_parts ua, ub;

  return parse_uri (a, &ua, NULL, 0) == 0 && parse_uri (b, &ub, NULL, 0) == 0 &&
    same_leg (&ua, &ub);
}

/* Leg index of the i'th URI. */
static size_t
leg_index (const struct config *c, size_t i)
{
  return i + c->local_leg0;
}

/* Add replica=URI as the next leg. */
static int
add_replica (struct config *c, const char *value, char *err, size_t errlen)
{
  struct uri_parts new_leg, old_leg;
  size_t i;

  if (parse_uri (value, &new_leg, err, errlen) == -1)
    return -1;
  if (config_nr_legs (c) >= MAX_LEGS)
    return bad_uri (err, errlen, value, "too many legs (at most %d%s)",
                    MAX_LEGS,
                    c->local_leg0 ? ", the local leg 0 included" : "");
  for (i = 0; i < c->nr_uris; i++) {
    parse_uri (c->uris[i], &old_leg, NULL, 0);
    if (same_leg (&new_leg, &old_leg))
      return bad_uri (err, errlen, value,
                      "duplicate leg: leg %zu is the same as leg %zu (%s)",
                      leg_index (c, c->nr_uris), leg_index (c, i),
                      c->uris[i]);
  }
  c->uris[c->nr_uris++] = value;
  return 0;
}

/* Index of key in key_names[], or -1. */
static int
find_key (const char *key)
{
  size_t i;

  for (i = 0; i < NR_KEYS; i++)
    if (strcmp (key, key_names[i]) == 0)
      return i;
  return -1;
}

/* Parse and store the value of key k. */
static int
set_key (struct config *c, enum key k, const char *key, const char *value,
         char *err, size_t errlen)
{
  int i;

  switch (k) {
  case KEY_REPLICA:
    return add_replica (c, value, err, errlen);
  case KEY_CONNECTIONS:
    return set_unsigned (key, value, 1, CONNECTIONS_MAX, &c->connections,
                         err, errlen);
  case KEY_QUORUM:
    return set_quorum (c, key, value, err, errlen);
  case KEY_READ:
    i = parse_choice (key, value, read_names, 0, ARRAY_SIZE (read_names),
                      err, errlen);
    if (i == -1)
      return -1;
    c->read = i;
    return 0;
  case KEY_TIMEOUT:
    return set_seconds (key, value, true, TIMEOUT_MAX, &c->timeout,
                        err, errlen);
  case KEY_CONTROL:
    return set_control (c, key, value, err, errlen);
  case KEY_CHUNK:
    return set_pow2_size (key, value, CHUNK_MIN, CHUNK_MAX, &c->chunk,
                          err, errlen);
  case KEY_MAX_LEGS:
    return set_unsigned (key, value, 1, MAX_LEGS, &c->max_legs, err, errlen);
  case KEY_AL_EXTENT:
    return set_pow2_size (key, value, CHUNK_MIN, AL_EXTENT_MAX,
                          &c->al_extent, err, errlen);
  case KEY_AL_EXTENTS:
    return set_unsigned (key, value, 1, AL_MAX_EXTENTS, &c->al_extents,
                         err, errlen);
  case KEY_RESYNC_RATE:
    return set_size (key, value, &c->resync_rate, err, errlen);
  case KEY_RESYNC_MIN_RATE:
    return set_size (key, value, &c->resync_min_rate, err, errlen);
  case KEY_VERIFY_RATE:
    return set_size (key, value, &c->verify_rate, err, errlen);
  case KEY_INIT:
    i = parse_choice (key, value, init_names, INIT_COPY,
                      ARRAY_SIZE (init_names), err, errlen);
    if (i == -1)
      return -1;
    c->init = i;
    return 0;
  case KEY_WAIT:
    return set_seconds (key, value, false, WAIT_MAX, &c->wait, err, errlen);
  case KEY_FORCE:
    return set_bool (key, value, &c->force, err, errlen);
  case KEY_PREFER:
    return set_int (key, value, MAX_LEGS - 1, &c->prefer, err, errlen);
  case KEY_METADATA:
    i = parse_choice (key, value, metadata_names, 0,
                      ARRAY_SIZE (metadata_names), err, errlen);
    if (i == -1)
      return -1;
    c->metadata = i;
    return 0;
  case KEY_UBLK:
    return set_int (key, value, UBLK_ID_MAX, &c->ublk_id, err, errlen);
  case KEY_UBLK_QUEUES:
    return set_unsigned (key, value, 1, UBLK_QUEUES_MAX, &c->ublk_queues,
                         err, errlen);
  case KEY_UBLK_DEPTH:
    return set_unsigned (key, value, 1, UBLK_DEPTH_MAX, &c->ublk_depth,
                         err, errlen);
  case KEY_UBLK_KEEP:
    return set_bool (key, value, &c->ublk_keep, err, errlen);
  case NR_KEYS:
    break;
  }
  abort ();
}

/* Fill in the defaults. */
void
config_init (struct config *c, bool local_leg0)
{
  memset (c, 0, sizeof *c);
  c->local_leg0 = local_leg0;
  c->connections = 4;
  c->quorum = 1;
  c->read = READ_LEAST_BUSY;
  c->timeout = 10;
  c->chunk = 64 * 1024;
  c->max_legs = 8;
  c->al_extent = 4 * 1024 * 1024;
  c->al_extents = 1024;
  c->resync_rate = 0;
  c->resync_min_rate = 4 * 1024 * 1024;
  c->verify_rate = 64 * 1024 * 1024;
  c->init = INIT_NONE;
  c->wait = 10;
  c->force = false;
  c->prefer = -1;
  c->metadata = METADATA_INTERNAL;
  c->ublk_id = -1;
  c->ublk_queues = 1;
  c->ublk_depth = 128;
}

/* Apply key=value: 0, -1 with a message, or 1 if the key is not ours. */
int
config_set (struct config *c, const char *key, const char *value,
            char *err, size_t errlen)
{
  int k = find_key (key);

  clear (err, errlen);
  if (k == -1)
    return 1;
  if (k != KEY_REPLICA && (c->seen & key_bit (k)) != 0) {
    fail (err, errlen, "%s given twice: %s=", key, key);
    append_quoted (err, errlen, value);
    return -1;
  }
  if (set_key (c, k, key, value, err, errlen) == -1)
    return -1;
  c->seen |= key_bit (k);
  return 0;
}

/* Was key k given? */
static bool
given (const struct config *c, enum key k)
{
  return (c->seen & key_bit (k)) != 0;
}

/* Let defaults yield to the explicit values they conflict with. */
static void
adjust_defaults (struct config *c)
{
  size_t legs = config_nr_legs (c);

  if (!given (c, KEY_MAX_LEGS) && c->max_legs < legs)
    c->max_legs = legs;
  if (!given (c, KEY_AL_EXTENT) && c->al_extent < c->chunk)
    c->al_extent = c->chunk;
  if (!given (c, KEY_RESYNC_MIN_RATE) && c->resync_rate != 0 &&
      c->resync_min_rate > c->resync_rate)
    c->resync_min_rate = c->resync_rate;
}

/* Adjust defaults, resolve quorum=majority, and cross-check keys. */
int
config_check (struct config *c, char *err, size_t errlen)
{
  size_t legs = config_nr_legs (c);
  char a[32], b[32];

  clear (err, errlen);
  if (legs == 0)
    return fail (err, errlen,
                 "no legs: give at least one replica=URI (or a bare URI)");
  adjust_defaults (c);
  if (c->max_legs < legs)
    return fail (err, errlen,
                 "max-legs=%u is smaller than the number of legs (%zu)",
                 c->max_legs, legs);
  if (c->quorum_majority)
    c->quorum = legs / 2 + 1;
  if (c->quorum > legs)
    return fail (err, errlen,
                 "quorum=%u is larger than the number of legs (%zu)",
                 c->quorum, legs);
  if (c->prefer >= 0 && (size_t) c->prefer >= legs)
    return fail (err, errlen,
                 "prefer=%d is not a leg (the legs are 0 to %zu)",
                 c->prefer, legs - 1);
  if (c->al_extent < c->chunk)
    return fail (err, errlen, "al-extent=%s is smaller than chunk=%s",
                 format_size (c->al_extent, a, sizeof a),
                 format_size (c->chunk, b, sizeof b));
  if (c->resync_rate != 0 && c->resync_min_rate > c->resync_rate)
    return fail (err, errlen,
                 "resync-min-rate=%s is larger than resync-rate=%s",
                 format_size (c->resync_min_rate, a, sizeof a),
                 format_size (c->resync_rate, b, sizeof b));
  if (c->ublk_id == -1 &&
      (given (c, KEY_UBLK_QUEUES) || given (c, KEY_UBLK_DEPTH) ||
       given (c, KEY_UBLK_KEEP)))
    return fail (err, errlen, "%s is given without ublk=ID",
                 given (c, KEY_UBLK_QUEUES) ? "ublk-queues" :
                 given (c, KEY_UBLK_DEPTH) ? "ublk-depth" : "ublk-keep");
  return 0;
}

/* Total number of legs, the local one included. */
size_t
config_nr_legs (const struct config *c)
{
  return c->nr_uris + c->local_leg0;
}

/* names[i], or "unknown" if i is out of range. */
static const char *
name_of (const char *const *names, size_t n, int i)
{
  return i >= 0 && (size_t) i < n ? names[i] : "unknown";
}

/* The read= spelling of p. */
const char *
read_policy_name (enum read_policy p)
{
  return name_of (read_names, ARRAY_SIZE (read_names), p);
}

/* The init= spelling of m ("none" for the default). */
const char *
init_mode_name (enum init_mode m)
{
  return name_of (init_names, ARRAY_SIZE (init_names), m);
}
