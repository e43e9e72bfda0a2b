/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of random.c: UUID parsing (a table of valid and invalid
 * strings), format/parse round trips, the version 4 and variant bits,
 * uuid_is_zero, and the random sources (non-zero, different, large
 * requests filled to the end).
 */

#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "random.h"
#include "unit.h"

#define N_RANDOM 10000

struct parse_case {
  const char *str;
  bool valid;
  uint8_t uuid[16];     /* expected, when valid */
};

static const struct parse_case parse_cases[] = {
  { "00000000-0000-0000-0000-000000000000", true, { 0 } },
  { "01234567-89ab-cdef-0123-456789abcdef", true,
    { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
      0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef } },
  { "01234567-89AB-CDEF-0123-456789ABCDEF", true,
    { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
      0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef } },
  { "fFfFfFfF-ffff-FFFF-ffff-ffffffffffff", true,
    { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff } },
  { "6ba7b810-9dad-11d1-80b4-00c04fd430c8", true,
    { 0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1,
      0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8 } },
  { "", false, { 0 } },
  { "01234567-89ab-cdef-0123-456789abcde", false, { 0 } },     /* short */
  { "01234567-89ab-cdef-0123-456789abcdef0", false, { 0 } },   /* long */
  { "01234567-89ab-cdef-0123-456789abcdef ", false, { 0 } },
  { " 01234567-89ab-cdef-0123-456789abcdef", false, { 0 } },
  { "0123456789abcdef0123456789abcdef", false, { 0 } },        /* no dashes */
  { "01234567089ab-cdef-0123-456789abcdef", false, { 0 } },    /* dash moved */
  { "01234567-89ab0cdef-0123-456789abcdef", false, { 0 } },
  { "01234567-89ab-cdef00123-456789abcdef", false, { 0 } },
  { "01234567-89ab-cdef-01230456789abcdef", false, { 0 } },
  { "0123456-789ab-cdef-0123-456789abcdef", false, { 0 } },
  { "01234567-89ab-cdef-0123-456789abcdeg", false, { 0 } },    /* non-hex */
  { "g1234567-89ab-cdef-0123-456789abcdef", false, { 0 } },
  { "01234567-89ab-cdef-0123-456789abcd-f", false, { 0 } },
  { "01234567-89ab-cdef-0123-45678 abcdef", false, { 0 } },
  { "01234567-89ab-cdef-0123-456789abcd+f", false, { 0 } },
  { "01234567-89ab-cdef-0123-45678:abcdef", false, { 0 } },    /* '9'+1 */
  { "01234567-89ab-cdef-0123-45678/abcdef", false, { 0 } },    /* '0'-1 */
  { "01234567-89ab-cdef-0123-456789`bcdef", false, { 0 } },    /* 'a'-1 */
  { "01234567-89ab-cdef-0123-456789@bcdef", false, { 0 } },    /* 'A'-1 */
  { "01234567-89ab-cdef-0123-456789Gbcdef", false, { 0 } },
  { "{01234567-89ab-cdef-0123-456789abcde}", false, { 0 } },
};

/* Parse every row of the table; failures must leave the output alone. */
static void
test_parse_table (void)
{
  size_t i;

  for (i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
    const struct parse_case *c = &parse_cases[i];
    uint8_t uuid[16];
    int r;

    memset (uuid, 0x5a, sizeof uuid);
    r = uuid_parse (c->str, uuid);
    if (c->valid) {
      CHECKF (r == 0, "row %zu \"%s\" rejected", i, c->str);
      CHECKF (memcmp (uuid, c->uuid, 16) == 0,
              "row %zu \"%s\" parsed wrong", i, c->str);
    }
    else {
      uint8_t untouched[16];

      memset (untouched, 0x5a, sizeof untouched);
      CHECKF (r == -1, "row %zu \"%s\" accepted", i, c->str);
      CHECKF (memcmp (uuid, untouched, 16) == 0,
              "row %zu \"%s\" wrote the output on failure", i, c->str);
    }
  }
}

/* Format gives lower case, and formatting the valid rows gives the
 * input back up to case.
 */
static void
test_format_table (void)
{
  size_t i, j;

  for (i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
    const struct parse_case *c = &parse_cases[i];
    char out[37];

    if (!c->valid)
      continue;
    memset (out, 'x', sizeof out);
    uuid_format (c->uuid, out);
    CHECKF (out[36] == '\0', "row %zu not terminated", i);
    CHECKF (strcasecmp (out, c->str) == 0, "row %zu: %s", i, out);
    for (j = 0; j < 36; j++)
      CHECKF (out[j] < 'A' || out[j] > 'Z', "row %zu: %s not lower case",
              i, out);
  }
}

/* Generated UUIDs: version and variant bits, round trip, all differ
 * from the previous one, and each of the other bits takes both values.
 */
static void
test_generate (void)
{
  uint8_t prev[16] = { 0 }, or_all[16] = { 0 }, and_all[16];
  size_t i, j;

  memset (and_all, 0xff, sizeof and_all);
  for (i = 0; i < N_RANDOM; i++) {
    uint8_t uuid[16], back[16];
    char text[37];

    uuid_generate (uuid);
    CHECKF ((uuid[6] & 0xf0) == 0x40, "version nibble 0x%02x", uuid[6]);
    CHECKF ((uuid[8] & 0xc0) == 0x80, "variant bits 0x%02x", uuid[8]);
    CHECKF (memcmp (uuid, prev, 16) != 0, "same UUID twice at %zu", i);
    CHECK (!uuid_is_zero (uuid));

    uuid_format (uuid, text);
    CHECKF (text[14] == '4', "%s", text);
    CHECKF (strchr ("89ab", text[19]) != NULL, "%s", text);
    CHECKF (uuid_parse (text, back) == 0, "%s", text);
    CHECKF (memcmp (uuid, back, 16) == 0, "round trip of %s", text);

    for (j = 0; j < 16; j++) {
      or_all[j] |= uuid[j];
      and_all[j] &= uuid[j];
    }
    memcpy (prev, uuid, 16);
  }
  /* Bits other than version and variant are random: each was seen as 1
   * and as 0 over N_RANDOM UUIDs.
   */
  for (j = 0; j < 16; j++) {
    uint8_t free_bits = j == 6 ? 0x0f : j == 8 ? 0x3f : 0xff;

    CHECKF ((or_all[j] & free_bits) == free_bits,
            "byte %zu: some bit never 1 (0x%02x)", j, or_all[j]);
    CHECKF ((and_all[j] & free_bits) == 0,
            "byte %zu: some bit never 0 (0x%02x)", j, and_all[j]);
  }
}

/* uuid_is_zero: true only when all 16 bytes are zero. */
static void
test_is_zero (void)
{
  uint8_t uuid[16] = { 0 };
  size_t i;

  CHECK (uuid_is_zero (uuid));
  for (i = 0; i < 16; i++) {
    uuid[i] = 0x01;
    CHECKF (!uuid_is_zero (uuid), "byte %zu set", i);
    uuid[i] = 0x80;
    CHECKF (!uuid_is_zero (uuid), "byte %zu top bit set", i);
    uuid[i] = 0;
  }
  CHECK (uuid_is_zero (uuid));
}

/* random_u64 is never 0 and does not repeat itself. */
static void
test_u64 (void)
{
  uint64_t prev = 0, or_all = 0, and_all = UINT64_MAX;
  size_t i;

  for (i = 0; i < N_RANDOM; i++) {
    uint64_t r = random_u64 ();

    CHECKF (r != 0, "call %zu", i);
    CHECKF (r != prev, "call %zu repeated 0x%016llx", i,
            (unsigned long long) r);
    or_all |= r;
    and_all &= r;
    prev = r;
  }
  CHECK (or_all == UINT64_MAX);
  CHECK (and_all == 0);
}

/* A request larger than some kernels return from one getrandom call
 * (32 MiB - 1) is filled to its last byte.
 */
static void
test_large_request (void)
{
  const size_t len = 33 * 1024 * 1024 + 13;
  const size_t tail = 4096;
  uint8_t *buf = calloc (len, 1);
  size_t i, nonzero = 0;

  CHECK (buf != NULL);
  if (buf == NULL)
    return;
  random_bytes (buf, len);
  for (i = len - tail; i < len; i++)
    nonzero += buf[i] != 0;
  /* Expect ~ 4080 non-zero bytes; 3800 leaves a huge margin. */
  CHECKF (nonzero > 3800, "only %zu of the last %zu bytes are non-zero",
          nonzero, tail);
  free (buf);
}

int
main (void)
{
  test_parse_table ();
  test_format_table ();
  test_generate ();
  test_is_zero ();
  test_u64 ();
  test_large_request ();
  return unit_exit ("unit-random");
}
