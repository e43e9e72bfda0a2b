/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of crc32c: published check values, and that chaining the
 * CRC over the pieces of a buffer gives the one-shot result for every
 * split point (which exercises the 8-byte and tail paths at every
 * alignment).
 */

#include <config.h>

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "crc32c.h"
#include "unit.h"

enum pattern { ASCII_123456789, ZEROS, ONES, ASCENDING, DESCENDING, EMPTY };

struct vector {
  const char *name;
  enum pattern pattern;
  size_t len;
  uint32_t crc;
};

/* The standard check value and the iSCSI vectors of RFC 3720 B.4. */
static const struct vector vectors[] = {
  { "\"123456789\"",        ASCII_123456789, 9,  0xe3069283 },
  { "32 zero bytes",        ZEROS,           32, 0x8a9136aa },
  { "32 0xff bytes",        ONES,            32, 0x62a8ab43 },
  { "bytes 0..31",          ASCENDING,       32, 0x46dd794e },
  { "bytes 31..0",          DESCENDING,      32, 0x113fdb5c },
  { "empty",                EMPTY,           0,  0 },
};

/* Fill buf with len bytes of the pattern. */
static void
fill (uint8_t *buf, enum pattern pattern, size_t len)
{
  size_t i;

  for (i = 0; i < len; i++) {
    switch (pattern) {
    case ASCII_123456789: buf[i] = '1' + i; break;
    case ZEROS:           buf[i] = 0; break;
    case ONES:            buf[i] = 0xff; break;
    case ASCENDING:       buf[i] = i; break;
    case DESCENDING:      buf[i] = len - 1 - i; break;
    case EMPTY:           break;
    }
  }
}

/* Check every published vector, one shot. */
static void
test_vectors (void)
{
  size_t i;
  uint8_t buf[64];

  for (i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
    const struct vector *v = &vectors[i];
    uint32_t got;

    fill (buf, v->pattern, v->len);
    got = crc32c (0, buf, v->len);
    CHECKF (got == v->crc, "%s: got 0x%08x, expected 0x%08x",
            v->name, got, v->crc);
  }
  CHECK (crc32c (0, NULL, 0) == 0);
  CHECK (crc32c (0x12345678, "", 0) == 0x12345678);
}

/* For every split of buf into two and three pieces, chaining must give
 * the one-shot CRC.
 */
static void
test_pieces (void)
{
  uint8_t buf[67];
  size_t i, j;
  uint32_t whole, crc;

  for (i = 0; i < sizeof buf; i++)
    buf[i] = (i * 37 + 11) ^ (i >> 3);
  whole = crc32c (0, buf, sizeof buf);

  for (i = 0; i <= sizeof buf; i++) {
    crc = crc32c (0, buf, i);
    crc = crc32c (crc, buf + i, sizeof buf - i);
    CHECKF (crc == whole, "split at %zu: 0x%08x != 0x%08x", i, crc, whole);

    for (j = i; j <= sizeof buf; j++) {
      crc = crc32c (0, buf, i);
      crc = crc32c (crc, buf + i, j - i);
      crc = crc32c (crc, buf + j, sizeof buf - j);
      CHECKF (crc == whole, "split at %zu, %zu: 0x%08x != 0x%08x",
              i, j, crc, whole);
    }
  }
}

/* A misaligned copy of a vector must give the same value. */
static void
test_alignment (void)
{
  uint8_t buf[32 + 8];
  size_t shift;

  for (shift = 0; shift < 8; shift++) {
    fill (buf + shift, ASCENDING, 32);
    CHECKF (crc32c (0, buf + shift, 32) == 0x46dd794e, "shift %zu", shift);
  }
}

int
main (void)
{
  test_vectors ();
  test_pieces ();
  test_alignment ();
  return unit_exit ("unit-crc32c");
}
