/* SPDX-License-Identifier: BSD-3-Clause */
/* Sizes, booleans and whole numbers in nbdkit's grammar (see
 * grammar.h).  nbdrep and the pure modules cannot call nbdkit, so this
 * file says again what nbdkit's server/public.c does; the tables of
 * tests/unit-params.c and tests/unit-grammar.c hold what nbdkit 1.32
 * does with each of their strings, and tests/test-parse-grammar.sh
 * checks every row against nbdkit itself.
 *
 * Sizes: nbdkit reads the number with strtoimax (base 10), so leading
 * white space and a '+' are taken and leading zeros are not octal; a
 * fraction, "KB", "KiB" or trailing white space are not.  The suffix
 * letters and the INT64_MAX bound are nbdkit's.
 *
 * Whole numbers mirror nbdkit_parse_unsigned and its kin: they skip
 * white space, refuse a '-' (strtoul would negate it), then take
 * strtoull with base 0, so "0x10" is 16 and "010" is 8 (and "08" has
 * trailing garbage); nothing may follow the digits, trailing white
 * space included.  A value above the type's maximum is out of range
 * as strtoull's own overflow is.  The refusals are nbdkit's four, in
 * nbdkit's order (range before empty before trailing), with its words.
 */

#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grammar.h"

/* The shift of a size suffix (s: 9, k: 10 ... e: 60), or -1. */
static int
suffix_shift (char c)
{
  static const char letters[] = "bskmgtpe";
  static const int shifts[] = { 0, 9, 10, 20, 30, 40, 50, 60 };
  const char *p;

  if (c == '\0')
    return 0;
  p = strchr (letters, tolower ((unsigned char) c));
  return p == NULL ? -1 : shifts[p - letters];
}

/* Parse a size in nbdkit's grammar. */
int
grammar_parse_size (const char *str, uint64_t *r)
{
  const char *p = str;
  uint64_t n = 0;
  int shift;

  while (isspace ((unsigned char) *p))
    p++;
  if (*p == '+')
    p++;
  if (!isdigit ((unsigned char) *p))
    return -1;
  for (; isdigit ((unsigned char) *p); p++) {
    if (n > (INT64_MAX - (uint64_t) (*p - '0')) / 10)
      return -1;
    n = n * 10 + (uint64_t) (*p - '0');
  }
  shift = suffix_shift (*p);
  if (shift == -1 || (*p != '\0' && p[1] != '\0'))
    return -1;
  if (n > (uint64_t) INT64_MAX >> shift)
    return -1;
  *r = n << shift;
  return 0;
}

/* Parse a boolean in nbdkit's grammar. */
int
grammar_parse_bool (const char *str)
{
  static const char *const spellings[][2] = {
    { "0", "1" }, { "false", "true" }, { "f", "t" }, { "no", "yes" },
    { "n", "y" }, { "off", "on" },
  };
  size_t i, v;

  for (i = 0; i < sizeof spellings / sizeof spellings[0]; i++)
    for (v = 0; v < 2; v++)
      if (strcasecmp (str, spellings[i][v]) == 0)
        return (int) v;
  return -1;
}

/* Is c white space to nbdkit (isspace in the C locale)? */
static bool
is_ascii_space (char c)
{
  return c != '\0' && strchr (" \t\n\v\f\r", c) != NULL;
}

/* str past the white space nbdkit skips before a number. */
static const char *
skip_space (const char *str)
{
  while (is_ascii_space (*str))
    str++;
  return str;
}

/* Parse a whole number in nbdkit's grammar, keeping errno. */
int
grammar_parse_unsigned (const char *str, uint64_t max, uint64_t *r)
{
  const char *p = skip_space (str);
  int saved = errno, refusal = 0;
  unsigned long long n;
  char *end;

  if (*p == '-')
    return GRAMMAR_NEGATIVE;
  errno = 0;
  n = strtoull (p, &end, 0);
  if (errno == ERANGE || n > max)
    refusal = GRAMMAR_RANGE;
  else if (end == p)
    refusal = GRAMMAR_EMPTY;
  else if (*end != '\0')
    refusal = GRAMMAR_TRAILING;
  else
    *r = n;
  errno = saved;
  return refusal;
}

/* nbdkit's message for a refused whole number. */
void
grammar_refusal_message (char *buf, size_t len, const char *what,
                         const char *str, int refusal)
{
  str = skip_space (str);
  switch (refusal) {
  case GRAMMAR_EMPTY:
    snprintf (buf, len, "%s: empty string where we expected a number", what);
    break;
  case GRAMMAR_NEGATIVE:
    snprintf (buf, len, "%s: negative numbers are not allowed", what);
    break;
  case GRAMMAR_RANGE:
    snprintf (buf, len, "%s: could not parse number: \"%s\": %s", what, str,
              strerror (ERANGE));
    break;
  default:
    snprintf (buf, len, "%s: could not parse number: \"%s\": trailing "
              "garbage", what, str);
  }
}
