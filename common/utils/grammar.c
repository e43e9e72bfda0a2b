/* SPDX-License-Identifier: BSD-3-Clause */
/* Sizes and booleans in nbdkit's grammar (see grammar.h).
 *
 * nbdkit reads the number with strtoimax (base 10), so leading white
 * space and a '+' are taken and leading zeros are not octal; a fraction,
 * "KB", "KiB" or trailing white space are not.  The suffix letters
 * and the INT64_MAX bound are nbdkit's; what nbdkit 1.32 does with each
 * row of tests/unit-params.c's size table was measured with
 * `nbdkit memory size=...`.
 */

#include <config.h>

#include <ctype.h>
#include <stddef.h>
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
