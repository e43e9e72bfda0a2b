/* SPDX-License-Identifier: BSD-3-Clause */
/* CRC-32C (Castagnoli), slicing by 8.
 *
 * The reflected polynomial 0x82F63B78, initial value and final xor all
 * ones, hidden inside crc32c so that callers chain pieces with
 * crc = crc32c (crc, piece, len) starting from 0.
 *
 * tables[0] is the classic byte-at-a-time table: the CRC of the byte i
 * followed by nothing.  tables[k][i] is the CRC contribution of byte i
 * followed by k zero bytes, so eight bytes are folded in with eight
 * look-ups.  The tables are computed once, on first use, under
 * pthread_once; afterwards they are only read.
 *
 * Input words are assembled byte by byte (little-endian by
 * construction), so the code does not depend on host byte order or on
 * the alignment of buf.
 */

#include <config.h>

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "crc32c.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t tables[8][256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Compute the eight slicing tables. */
static void
init_tables (void)
{
  unsigned i, k, bit;

  for (i = 0; i < 256; i++) {
    uint32_t c = i;

    for (bit = 0; bit < 8; bit++)
      c = (c >> 1) ^ (c & 1 ? CRC32C_POLY : 0);
    tables[0][i] = c;
  }
  for (k = 1; k < 8; k++)
    for (i = 0; i < 256; i++)
      tables[k][i] = (tables[k - 1][i] >> 8)
        ^ tables[0][tables[k - 1][i] & 0xff];
}

/* Read a little-endian 32-bit word from p. */
static inline uint32_t
load_le32 (const unsigned char *p)
{
  return (uint32_t) p[0] | (uint32_t) p[1] << 8
    | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

/* Fold eight bytes at p into the (inverted) register crc. */
static inline uint32_t
fold8 (uint32_t crc, const unsigned char *p)
{
  uint32_t lo = crc ^ load_le32 (p);
  uint32_t hi = load_le32 (p + 4);

  return tables[7][lo & 0xff] ^ tables[6][(lo >> 8) & 0xff]
    ^ tables[5][(lo >> 16) & 0xff] ^ tables[4][lo >> 24]
    ^ tables[3][hi & 0xff] ^ tables[2][(hi >> 8) & 0xff]
    ^ tables[1][(hi >> 16) & 0xff] ^ tables[0][hi >> 24];
}

/* Continue a CRC-32C over buf (see crc32c.h). */
uint32_t
crc32c (uint32_t crc, const void *buf, size_t len)
{
  const unsigned char *p = buf;

  pthread_once (&tables_once, init_tables);

  crc = ~crc;
  for (; len >= 8; len -= 8, p += 8)
    crc = fold8 (crc, p);
  for (; len > 0; len--, p++)
    crc = (crc >> 8) ^ tables[0][(crc ^ *p) & 0xff];
  return ~crc;
}
