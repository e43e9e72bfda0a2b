/* SPDX-License-Identifier: BSD-3-Clause */
/* Parameters of a volume: parsing and validation (pure).
 *
 * config_set looks the key up in key_names[] (its index is also its
 * bit in c->seen) and parses the value with one small helper per kind
 * of value: whole numbers, sizes, seconds, choices, booleans, paths
 * and URIs (uri.c).  config_check then checks what depends on several
 * keys.
 *
 * Messages name the parameter as KEY=VALUE, quoted safely
 * (params-text.c).  Whole numbers, sizes and booleans are read in
 * nbdkit's grammar, by nbdkit's own functions in the plugin and filter
 * (config_use_parsers): a whole number may have white space and '+'
 * first and be hexadecimal (0x10) or octal (010), as with
 * nbdkit_parse_unsigned; our messages then give the range.  Seconds
 * have no nbdkit parser: they are DIGITS[.DIGITS] (no sign, space or
 * unit), parsed with strtod after checking that form; strtod follows
 * LC_NUMERIC, which is "C" in nbdkit (the server never calls
 * setlocale): other callers must not change LC_NUMERIC either.
 *
 * Defaults yield to explicit values.  When a key was not given and its
 * default conflicts with a key that was, config_check adjusts the
 * default (max-legs is raised to the number of legs, al-extent to the
 * chunk, resync-min-rate lowered to resync-rate).  Two explicit values
 * that conflict are an error.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "params-text.h"
#include "meta.h"
#include "grammar.h"

#define CONNECTIONS_MAX 64
#define CHUNK_MIN 4096
#define CHUNK_MAX (64u << 20)
#define AL_EXTENT_MAX (1u << 30)
#define TIMEOUT_MAX 3600.0
#define WAIT_MAX 86400.0
#define UBLK_ID_MAX 1048575
#define UBLK_QUEUES_MAX 64
#define UBLK_DEPTH_MAX 4096
#define ASYNC_BUFFER_MIN (1024 * 1024)
#define ASYNC_BUFFER_DEFAULT (64 * 1024 * 1024)

/* The keys.  A key's index is its bit in struct config's seen. */
enum key {
  KEY_REPLICA, KEY_CONNECTIONS, KEY_QUORUM, KEY_READ, KEY_TIMEOUT,
  KEY_CONTROL, KEY_CHUNK, KEY_MAX_LEGS, KEY_AL_EXTENT, KEY_AL_EXTENTS,
  KEY_RESYNC_RATE, KEY_RESYNC_MIN_RATE, KEY_VERIFY_RATE, KEY_INIT, KEY_WAIT, KEY_FORCE,
  KEY_PREFER, KEY_METADATA, KEY_UBLK, KEY_UBLK_QUEUES, KEY_UBLK_DEPTH,
  KEY_UBLK_KEEP, KEY_SCHED, KEY_ASYNC, KEY_ASYNC_BUFFER, KEY_ASYNC_FULL,
  /* The TLS keys, together (config_set_tls). */
  KEY_TLS, KEY_TLS_CERTIFICATES, KEY_TLS_VERIFY, KEY_TLS_USERNAME, KEY_TLS_PSK,
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
  [KEY_SCHED] = "sched",
  [KEY_ASYNC] = "async",
  [KEY_ASYNC_BUFFER] = "async-buffer",
  [KEY_ASYNC_FULL] = "async-full",
  [KEY_TLS] = "tls",
  [KEY_TLS_CERTIFICATES] = "tls-certificates",
  [KEY_TLS_VERIFY] = "tls-verify",
  [KEY_TLS_USERNAME] = "tls-username",
  [KEY_TLS_PSK] = "tls-psk",
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

static const char *const async_full_names[] = {
  [ASYNC_FULL_PULL_AHEAD] = "pull-ahead",
  [ASYNC_FULL_BLOCK] = "block",
};

static const char *const sched_names[] = {
  [SCHED_MODE_AUTO] = "auto",
  [SCHED_MODE_KEEP] = "keep",
};

/* Bit of key k in struct config's seen. */
static uint32_t
key_bit (enum key k)
{
  return UINT32_C (1) << k;
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

/* A whole number in nbdkit's grammar, silently: the parser outside
 * nbdkit (the form config_use_parsers takes).
 */
static int
grammar_number (const char *what, const char *str, uint64_t *r)
{
  (void) what;
  return grammar_parse_unsigned (str, UINT64_MAX, r) == 0 ? 0 : -1;
}

/* The parsers of whole numbers, sizes and booleans: nbdkit's own once
 * the plugin or filter has called config_use_parsers (engine_new), the
 * same grammar from common/utils/grammar.c before that and outside
 * nbdkit.  Set once, before any parameter is parsed.
 */
static int (*number_parser) (const char *what, const char *str,
                             uint64_t *r) = grammar_number;
static int (*size_parser) (const char *str, uint64_t *r) = grammar_parse_size;
static int (*bool_parser) (const char *str) = grammar_parse_bool;

/* Parse whole numbers, sizes and booleans with these from now on. */
void
config_use_parsers (int (*number) (const char *what, const char *str,
                                   uint64_t *r),
                    int (*size) (const char *str, uint64_t *r),
                    int (*boolean) (const char *str))
{
  number_parser = number;
  size_parser = size;
  bool_parser = boolean;
}

/* Parse KEY=VALUE as a whole number in [min, max]. */
static int
parse_number (const char *key, const char *value, uint64_t min, uint64_t max,
              uint64_t *r, char *err, size_t errlen)
{
  uint64_t n = 0;

  if (number_parser (key, value, &n) == -1)
    return msg_bad_value (err, errlen, key, value,
                          "must be a whole number between %" PRIu64
                          " and %" PRIu64, min, max);
  if (n < min || n > max)
    return msg_bad_value (err, errlen, key, value,
                          "must be between %" PRIu64 " and %" PRIu64,
                          min, max);
  *r = n;
  return 0;
}

/* Set an unsigned field from a whole number in [min, max]. */
static int
set_unsigned (const char *key, const char *value, unsigned min, unsigned max,
              unsigned *dst, char *err, size_t errlen)
{
  uint64_t n = 0;

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
  uint64_t n = 0;

  if (parse_number (key, value, 0, max, &n, err, errlen) == -1)
    return -1;
  *dst = n;
  return 0;
}

/* Parse a size in nbdkit's grammar. */
int
config_parse_size (const char *str, uint64_t *r)
{
  return size_parser (str, r);
}

/* Set a uint64_t field from a size. */
static int
set_size (const char *key, const char *value, uint64_t *dst,
          char *err, size_t errlen)
{
  if (config_parse_size (value, dst) == -1)
    return msg_bad_value (err, errlen, key, value,
                          "not a size (bytes, or a number with a b, s, K, M, "
                          "G, T, P or E suffix)");
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
    return msg_bad_value (err, errlen, key, value,
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
    return msg_bad_value (err, errlen, key, value,
                          "not a number of seconds (such as 10 or 0.5, "
                          "without a unit)");
  if (positive && d <= 0)
    return msg_bad_value (err, errlen, key, value,
                          "must be more than 0 and at most %g seconds", max);
  if (d > max)
    return msg_bad_value (err, errlen, key, value,
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
  msg_begin_value (err, errlen, key, value);
  msg_append (err, errlen, "must be ");
  msg_append_list (err, errlen, names + first, n - first);
  return -1;
}

/* Set a bool field from 1/0, true/false, yes/no, on/off ... */
static int
set_bool (const char *key, const char *value, bool *dst,
          char *err, size_t errlen)
{
  int b = bool_parser (value);

  if (b == -1)
    return msg_bad_value (err, errlen, key, value,
                          "must be 1/0, true/false, yes/no or on/off");
  *dst = b;
  return 0;
}

/* Set control=PATH: non-empty, short enough for a Unix socket. */
static int
set_control (struct config *c, const char *key, const char *value,
             char *err, size_t errlen)
{
  if (value[0] == '\0')
    return msg_bad_value (err, errlen, key, value, "must not be empty");
  if (strlen (value) > SUN_PATH_MAX)
    return msg_bad_value (err, errlen, key, value,
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
  uint64_t n = 0;

  c->quorum_given = true;
  if (strcmp (value, "majority") == 0) {
    c->quorum_majority = true;
    c->quorum = 0;
    return 0;
  }
  if (number_parser (key, value, &n) == -1 || n < 1 || n > MAX_LEGS)
    return msg_bad_value (err, errlen, key, value,
                          "must be majority or a number of legs between 1 "
                          "and %d", MAX_LEGS);
  c->quorum_majority = false;
  c->quorum = n;
  return 0;
}

/* Leg index of the i'th URI. */
static size_t
leg_index (const struct config *c, size_t i)
{
  return i + c->local_leg0;
}

/* Add replica=URI (or async=URI: an asynchronous leg) as the next
 * leg.
 */
static int
add_replica (struct config *c, enum key k, const char *value, char *err,
             size_t errlen)
{
  const char *key = key_names[k];
  size_t i;

  if (config_check_uri (value, err, errlen) == -1)
    return -1;
  if (config_nr_legs (c) >= MAX_LEGS)
    return msg_bad_value (err, errlen, key, value,
                          "too many legs (at most %d%s)", MAX_LEGS,
                          c->local_leg0 ? ", the local leg 0 included" : "");
  for (i = 0; i < c->nr_uris; i++)
    if (config_same_leg (value, c->uris[i]))
      return msg_bad_value (err, errlen, key, value,
                            "duplicate leg: leg %zu is the same as leg %zu "
                            "(%s)", leg_index (c, c->nr_uris),
                            leg_index (c, i), c->uris[i]);
  if (k == KEY_ASYNC)
    c->async_legs |= (uint16_t) (1u << leg_index (c, c->nr_uris));
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

/* Set a string field from a value that must not be empty. */
static int
set_nonempty (const char *key, const char *value, const char **dst,
              char *err, size_t errlen)
{
  if (value[0] == '\0')
    return msg_bad_value (err, errlen, key, value, "must not be empty");
  *dst = value;
  return 0;
}

/* Parse and store the value of TLS key k: tls= is require or a
 * boolean (on, off ...), as in nbdkit-nbd-plugin.
 */
static int
set_tls_key (struct tls_params *t, enum key k, const char *key,
             const char *value, char *err, size_t errlen)
{
  bool b = false;

  switch (k) {
  case KEY_TLS:
    if (strcasecmp (value, "require") == 0) {
      t->mode = TLS_MODE_REQUIRE;
      return 0;
    }
    if (set_bool (key, value, &b, NULL, 0) == -1)
      return msg_bad_value (err, errlen, key, value,
                            "must be off, on or require");
    t->mode = b ? TLS_MODE_ON : TLS_MODE_OFF;
    return 0;
  case KEY_TLS_CERTIFICATES:
    return set_nonempty (key, value, &t->certificates, err, errlen);
  case KEY_TLS_VERIFY:
    if (set_bool (key, value, &b, err, errlen) == -1)
      return -1;
    t->verify = b;
    return 0;
  case KEY_TLS_USERNAME:
    return set_nonempty (key, value, &t->username, err, errlen);
  case KEY_TLS_PSK:
    return set_nonempty (key, value, &t->psk, err, errlen);
  default:
    abort ();
  }
}

/* Parse and store the value of key k. */
static int
set_key (struct config *c, enum key k, const char *key, const char *value,
         char *err, size_t errlen)
{
  int i;

  switch (k) {
  case KEY_REPLICA:
  case KEY_ASYNC:
    return add_replica (c, k, value, err, errlen);
  case KEY_ASYNC_BUFFER:
    if (set_size (key, value, &c->async_buffer, err, errlen) == -1)
      return -1;
    if (c->async_buffer < ASYNC_BUFFER_MIN)
      return msg_bad_value (err, errlen, key, value, "must be at least 1M");
    return 0;
  case KEY_ASYNC_FULL:
    i = parse_choice (key, value, async_full_names, 0,
                      ARRAY_SIZE (async_full_names), err, errlen);
    if (i == -1)
      return -1;
    c->async_full = i;
    return 0;
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
  case KEY_SCHED:
    i = parse_choice (key, value, sched_names, 0, ARRAY_SIZE (sched_names),
                      err, errlen);
    if (i == -1)
      return -1;
    c->sched = i;
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
  case KEY_TLS: case KEY_TLS_CERTIFICATES: case KEY_TLS_VERIFY:
  case KEY_TLS_USERNAME: case KEY_TLS_PSK:
    return set_tls_key (&c->tls, k, key, value, err, errlen);
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
  c->sched = SCHED_MODE_AUTO;
  c->ublk_id = -1;
  c->ublk_queues = 1;
  c->ublk_depth = 128;
  c->async_buffer = ASYNC_BUFFER_DEFAULT;
  c->async_full = ASYNC_FULL_PULL_AHEAD;
  config_tls_init (&c->tls);
}

/* The defaults of the TLS keys: none given. */
void
config_tls_init (struct tls_params *t)
{
  memset (t, 0, sizeof *t);
  t->mode = TLS_MODE_UNSET;
  t->verify = -1;
}

/* Apply one TLS key alone (nbdrep's --tls options): 0, -1 with a
 * message, or 1 if the key is not a TLS key.  A repeat replaces.
 */
int
config_set_tls (struct tls_params *t, const char *key, const char *value,
                char *err, size_t errlen)
{
  int k = find_key (key);

  msg_clear (err, errlen);
  if (k < KEY_TLS || k > KEY_TLS_PSK)
    return 1;
  return set_tls_key (t, k, key, value, err, errlen);
}

/* Apply key=value: 0, -1 with a message, or 1 if the key is not ours. */
int
config_set (struct config *c, const char *key, const char *value,
            char *err, size_t errlen)
{
  int k = find_key (key);

  msg_clear (err, errlen);
  if (k == -1)
    return 1;
  if (k != KEY_REPLICA && k != KEY_ASYNC && (c->seen & key_bit (k)) != 0) {
    msg_fail (err, errlen, "%s given twice: %s=", key, key);
    msg_append_quoted (err, errlen, value);
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
  size_t legs = config_nr_legs (c), sync = config_nr_sync_legs (c);
  char a[32], b[32];

  msg_clear (err, errlen);
  if (legs == 0)
    return msg_fail (err, errlen,
                     "no legs: give at least one replica=URI (or a bare URI)");
  adjust_defaults (c);
  if (c->max_legs < legs)
    return msg_fail (err, errlen,
                     "max-legs=%u is smaller than the number of legs (%zu)",
                     c->max_legs, legs);
  if (legs > 0 && sync == 0)
    return msg_fail (err, errlen,
                     "every leg is asynchronous (async=URI): give at least "
                     "one replica=URI");
  /* Asynchronous legs never count for quorum (DESIGN.md section 14). */
  if (c->quorum_majority)
    c->quorum = sync / 2 + 1;
  if (c->quorum > sync)
    return msg_fail (err, errlen,
                     "quorum=%u is larger than the number of %slegs (%zu)",
                     c->quorum, c->async_legs ? "synchronous " : "", sync);
  if (c->async_legs != 0 && c->metadata == METADATA_NONE)
    return msg_fail (err, errlen, "async=URI needs metadata=internal (an "
                     "asynchronous leg that falls behind records what it "
                     "missed in its bitmap)");
  if (c->async_legs == 0 &&
      (given (c, KEY_ASYNC_BUFFER) || given (c, KEY_ASYNC_FULL)))
    return msg_fail (err, errlen, "%s is given without async=URI",
                     given (c, KEY_ASYNC_BUFFER) ? "async-buffer"
                     : "async-full");
  if (c->prefer >= 0 && (size_t) c->prefer >= legs)
    return msg_fail (err, errlen,
                     "prefer=%d is not a leg (the legs are 0 to %zu)",
                     c->prefer, legs - 1);
  if (c->prefer >= 0 && (c->async_legs & (1u << c->prefer)) && !c->force)
    return msg_fail (err, errlen,
                     "prefer=%d names an asynchronous leg: promoting it "
                     "(a failover to it) needs force=true", c->prefer);
  if (c->al_extent < c->chunk)
    return msg_fail (err, errlen, "al-extent=%s is smaller than chunk=%s",
                     format_size (c->al_extent, a, sizeof a),
                     format_size (c->chunk, b, sizeof b));
  if (c->resync_rate != 0 && c->resync_min_rate > c->resync_rate)
    return msg_fail (err, errlen,
                     "resync-min-rate=%s is larger than resync-rate=%s",
                     format_size (c->resync_min_rate, a, sizeof a),
                     format_size (c->resync_rate, b, sizeof b));
  if (c->ublk_id == -1 &&
      (given (c, KEY_UBLK_QUEUES) || given (c, KEY_UBLK_DEPTH) ||
       given (c, KEY_UBLK_KEEP)))
    return msg_fail (err, errlen, "%s is given without ublk=ID",
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

/* Number of synchronous legs (the local one included). */
size_t
config_nr_sync_legs (const struct config *c)
{
  return config_nr_legs (c) -
    (size_t) __builtin_popcount ((unsigned) c->async_legs);
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

/* The async-full= spelling of f. */
const char *
async_full_name (enum async_full f)
{
  return name_of (async_full_names, ARRAY_SIZE (async_full_names), f);
}

/* The init= spelling of m ("none" for the default). */
const char *
init_mode_name (enum init_mode m)
{
  return name_of (init_names, ARRAY_SIZE (init_names), m);
}
