/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/utils/grammar.c's whole numbers, the grammar
 * of nbdkit_parse_unsigned and its kin for the code that cannot call
 * nbdkit (nbdrep, the backup store's options).
 *
 * number_cases hold what nbdkit 1.32's nbdkit_parse_unsigned does with
 * each string (unsigned is 32 bits here): accepted with its value, or
 * refused with nbdkit's message when the number is called "limit" (the
 * limit filter's limit= parameter is read by nbdkit_parse_unsigned).
 * tests/test-parse-grammar.sh gives every row to nbdkit itself (limit=
 * for the message, the random plugin's seed= for the value), to the
 * plugin (connections=) and to nbdrep (a leg index).  width_cases
 * check the other maxima (nbdkit_parse_uint64_t, _uint16_t).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "grammar.h"
#include "unit.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])

struct number_case {
  const char *str;
  bool ok;
  uint64_t value;
  const char *message;          /* nbdkit's, for what = "limit" */
};

/* Keep one row to a line, the value a plain decimal, the message a
 * single string or NULL: test-parse-grammar.sh reads the rows with a
 * regular expression.  No newline in a string (the shell reads lines).
 */
static const struct number_case number_cases[] = {
  { "0", true, 0, NULL },
  { "1", true, 1, NULL },
  { "10", true, 10, NULL },
  { "64", true, 64, NULL },
  { "+1", true, 1, NULL },
  { "+0", true, 0, NULL },
  { " 1", true, 1, NULL },
  { " +7", true, 7, NULL },
  { "\t\v\f\r 7", true, 7, NULL },
  { "0x10", true, 16, NULL },
  { "0X10", true, 16, NULL },
  { "0xff", true, 255, NULL },
  { "0xFf", true, 255, NULL },
  { "+0x3", true, 3, NULL },
  { " 0x40", true, 64, NULL },
  { "010", true, 8, NULL },
  { "0100", true, 64, NULL },
  { "0777", true, 511, NULL },
  { "00", true, 0, NULL },
  { "0x0", true, 0, NULL },
  { "0000000000000000000000000000000000000012", true, 10, NULL },
  { "4294967295", true, 4294967295, NULL },
  { "0xffffffff", true, 4294967295, NULL },
  { "037777777777", true, 4294967295, NULL },
  { "", false, 0, "limit: empty string where we expected a number" },
  { " ", false, 0, "limit: empty string where we expected a number" },
  { "+", false, 0, "limit: empty string where we expected a number" },
  { "x", false, 0, "limit: empty string where we expected a number" },
  { "abc", false, 0, "limit: empty string where we expected a number" },
  { "+ 1", false, 0, "limit: empty string where we expected a number" },
  { "++1", false, 0, "limit: empty string where we expected a number" },
  { "+-1", false, 0, "limit: empty string where we expected a number" },
  { "-1", false, 0, "limit: negative numbers are not allowed" },
  { "-0", false, 0, "limit: negative numbers are not allowed" },
  { " -1", false, 0, "limit: negative numbers are not allowed" },
  { "-x", false, 0, "limit: negative numbers are not allowed" },
  { "4294967296", false, 0,
    "limit: could not parse number: \"4294967296\": Numerical result out of "
    "range" },
  { "0x100000000", false, 0,
    "limit: could not parse number: \"0x100000000\": Numerical result out of "
    "range" },
  { "18446744073709551616", false, 0,
    "limit: could not parse number: \"18446744073709551616\": Numerical "
    "result out of range" },
  { "4294967296x", false, 0,
    "limit: could not parse number: \"4294967296x\": Numerical result out "
    "of range" },
  { "1 ", false, 0,
    "limit: could not parse number: \"1 \": trailing garbage" },
  { " 1x", false, 0,
    "limit: could not parse number: \"1x\": trailing garbage" },
  { "08", false, 0,
    "limit: could not parse number: \"08\": trailing garbage" },
  { "0779", false, 0,
    "limit: could not parse number: \"0779\": trailing garbage" },
  { "0x", false, 0,
    "limit: could not parse number: \"0x\": trailing garbage" },
  { "0xg", false, 0,
    "limit: could not parse number: \"0xg\": trailing garbage" },
  { "0x-1", false, 0,
    "limit: could not parse number: \"0x-1\": trailing garbage" },
  { "0b1", false, 0,
    "limit: could not parse number: \"0b1\": trailing garbage" },
  { "1.5", false, 0,
    "limit: could not parse number: \"1.5\": trailing garbage" },
  { "1e3", false, 0,
    "limit: could not parse number: \"1e3\": trailing garbage" },
  { "1K", false, 0,
    "limit: could not parse number: \"1K\": trailing garbage" },
  { "1,000", false, 0,
    "limit: could not parse number: \"1,000\": trailing garbage" },
  { "1_000", false, 0,
    "limit: could not parse number: \"1_000\": trailing garbage" },
  { "1-", false, 0,
    "limit: could not parse number: \"1-\": trailing garbage" },
};

/* The number table: value, refusal and message. */
static void
test_numbers (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (number_cases); row++) {
    const struct number_case *t = &number_cases[row];
    uint64_t v = 12345;
    char msg[256];
    int r;

    errno = EBADF;
    r = grammar_parse_unsigned (t->str, UINT_MAX, &v);
    CHECKF (errno == EBADF, "row %zu: '%s' changed errno", row, t->str);
    CHECKF ((r == 0) == t->ok, "row %zu: '%s' returned %d", row, t->str, r);
    if (t->ok) {
      CHECKF (v == t->value, "row %zu: '%s' is %" PRIu64, row, t->str, v);
      continue;
    }
    CHECKF (v == 12345, "row %zu: '%s' set the result", row, t->str);
    grammar_refusal_message (msg, sizeof msg, "limit", t->str, r);
    CHECKF (strcmp (msg, t->message) == 0, "row %zu: '%s': message '%s'",
            row, t->str, msg);
  }
}

struct width_case {
  const char *str;
  uint64_t max;
  int refusal;                  /* 0: accepted */
  uint64_t value;
};

/* Other maxima: uint64_t, uint16_t and a bound of our own. */
static const struct width_case width_cases[] = {
  { "18446744073709551615", UINT64_MAX, 0, UINT64_MAX },
  { "0xffffffffffffffff", UINT64_MAX, 0, UINT64_MAX },
  { "01777777777777777777777", UINT64_MAX, 0, UINT64_MAX },
  { "4294967296", UINT64_MAX, 0, UINT64_C (4294967296) },
  { "18446744073709551616", UINT64_MAX, GRAMMAR_RANGE, 0 },
  { "0x10000000000000000", UINT64_MAX, GRAMMAR_RANGE, 0 },
  { "-18446744073709551615", UINT64_MAX, GRAMMAR_NEGATIVE, 0 },
  { "65535", UINT16_MAX, 0, 65535 },
  { "0xffff", UINT16_MAX, 0, 65535 },
  { "65536", UINT16_MAX, GRAMMAR_RANGE, 0 },
  { "65536x", UINT16_MAX, GRAMMAR_RANGE, 0 },
  { "64", 64, 0, 64 },
  { "0x41", 64, GRAMMAR_RANGE, 0 },
  { "", 64, GRAMMAR_EMPTY, 0 },
  { "0x", 64, GRAMMAR_TRAILING, 0 },
};

/* The width table. */
static void
test_widths (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (width_cases); row++) {
    const struct width_case *t = &width_cases[row];
    uint64_t v = 0;
    int r = grammar_parse_unsigned (t->str, t->max, &v);

    CHECKF (r == t->refusal, "row %zu: '%s' (max %" PRIu64 ") returned %d",
            row, t->str, t->max, r);
    if (r == 0)
      CHECKF (v == t->value, "row %zu: '%s' is %" PRIu64, row, t->str, v);
  }
}

/* A message cut to a short buffer stays a string. */
static void
test_short_buffer (void)
{
  char msg[8];

  grammar_refusal_message (msg, sizeof msg, "connections", "1x",
                           GRAMMAR_TRAILING);
  CHECK (strcmp (msg, "connect") == 0);
}

int
main (void)
{
  test_numbers ();
  test_widths ();
  test_short_buffer ();
  return unit_exit ("unit-grammar");
}
