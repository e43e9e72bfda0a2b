/* SPDX-License-Identifier: BSD-3-Clause */
/* Random numbers and UUIDs from getrandom(2).
 *
 * getrandom may return fewer bytes than asked (large requests, or a
 * signal) and may fail with EINTR; random_bytes loops until the buffer
 * is full.  Any other failure means the kernel cannot give us
 * randomness, which we cannot work without: print why and abort.
 *
 * UUIDs are RFC 4122 version 4: 122 random bits, the version nibble
 * (high nibble of byte 6) set to 4 and the variant (top two bits of
 * byte 8) set to binary 10.  The text form is 8-4-4-4-12 hex digits;
 * we write lower case and accept either case, nothing else.
 */

#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/random.h>

#include "random.h"

#define UUID_TEXT_LEN 36

/* Fill buf with random bytes (see random.h). */
void
random_bytes (void *buf, size_t len)
{
  unsigned char *p = buf;

  while (len > 0) {
    ssize_t r = getrandom (p, len, 0);

    if (r < 0) {
      if (errno == EINTR)
        continue;
      perror ("getrandom");
      abort ();
    }
    p += r;
    len -= r;
  }
}

/* A random non-zero 64-bit number. */
uint64_t
random_u64 (void)
{
  uint64_t r;

  do
    random_bytes (&r, sizeof r);
  while (r == 0);
  return r;
}

/* A random version 4 UUID. */
void
uuid_generate (uint8_t uuid[16])
{
  random_bytes (uuid, 16);
  uuid[6] = (uuid[6] & 0x0f) | 0x40;
  uuid[8] = (uuid[8] & 0x3f) | 0x80;
}

/* Where the two hex digits of each byte start in the text form. */
static const size_t hex_pos[16] = {
  0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34
};
/* Where the dashes are. */
static const size_t dash_pos[4] = { 8, 13, 18, 23 };

/* Format as 8-4-4-4-12 lower-case hex into out (37 bytes). */
void
uuid_format (const uint8_t uuid[16], char *out)
{
  static const char hex[] = "0123456789abcdef";
  size_t i;

  for (i = 0; i < 16; i++) {
    out[hex_pos[i]] = hex[uuid[i] >> 4];
    out[hex_pos[i] + 1] = hex[uuid[i] & 0xf];
  }
  for (i = 0; i < 4; i++)
    out[dash_pos[i]] = '-';
  out[UUID_TEXT_LEN] = '\0';
}

/* The value of hex digit c, or -1 if c is not one. */
static int
hex_value (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Parse the 8-4-4-4-12 form; uuid is only written on success. */
int
uuid_parse (const char *str, uint8_t uuid[16])
{
  uint8_t out[16];
  size_t i;

  if (strnlen (str, UUID_TEXT_LEN + 1) != UUID_TEXT_LEN)
    return -1;
  for (i = 0; i < 4; i++)
    if (str[dash_pos[i]] != '-')
      return -1;
  for (i = 0; i < 16; i++) {
    int hi = hex_value (str[hex_pos[i]]);
    int lo = hex_value (str[hex_pos[i] + 1]);

    if (hi < 0 || lo < 0)
      return -1;
    out[i] = hi << 4 | lo;
  }
  memcpy (uuid, out, sizeof out);
  return 0;
}

/* Is every byte of uuid zero? */
bool
uuid_is_zero (const uint8_t uuid[16])
{
  size_t i;

  for (i = 0; i < 16; i++)
    if (uuid[i] != 0)
      return false;
  return true;
}
