/* SPDX-License-Identifier: BSD-3-Clause */
/* Blocks: hashing, compression, all-zero detection.
 *
 * A block is named by the SHA-256 of its uncompressed bytes (OpenSSL's
 * libcrypto) and stored as one zstd frame that records its content
 * size.  Decoding checks both the size and the hash, so a stored block
 * that is damaged, truncated or another block's is never returned as
 * data.
 *
 * The functions are pure and thread-safe; a hash set (open addressing,
 * at most half full) belongs to its caller, who locks it if it is
 * shared (nbdrep backup does).
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <zstd.h>

#include "backupstore.h"

/* zstd's level: its default, fast and a good ratio on disk data. */
#define COMPRESSION_LEVEL 3

/* SHA-256 of data. */
int
bs_hash (const void *data, size_t len, uint8_t hash[BS_HASH_LEN])
{
  unsigned int mdlen = BS_HASH_LEN;
  char why[256];

  if (EVP_Digest (data, len, hash, &mdlen, EVP_sha256 (), NULL) != 1 ||
      mdlen != BS_HASH_LEN) {
    ERR_error_string_n (ERR_get_error (), why, sizeof why);
    nbdkit_error ("OpenSSL: SHA-256: %s", why);
    return -1;
  }
  return 0;
}

/* A hash in lower-case hex. */
void
bs_hash_to_hex (const uint8_t hash[BS_HASH_LEN], char hex[65])
{
  static const char digits[] = "0123456789abcdef";
  size_t i;

  for (i = 0; i < BS_HASH_LEN; ++i) {
    hex[2 * i] = digits[hash[i] >> 4];
    hex[2 * i + 1] = digits[hash[i] & 15];
  }
  hex[64] = '\0';
}

/* Parse 64 lower-case hex digits (the only spelling of a block's
 * name, so that a block has one key).
 */
int
bs_hash_from_hex (const char *hex, uint8_t hash[BS_HASH_LEN])
{
  size_t i;

  if (strlen (hex) != 2 * BS_HASH_LEN ||
      strspn (hex, "0123456789abcdef") != 2 * BS_HASH_LEN)
    return -1;
  for (i = 0; i < BS_HASH_LEN; ++i)
    if (sscanf (hex + 2 * i, "%2hhx", &hash[i]) != 1)
      return -1;
  return 0;
}

/* All zeroes?  Compares the buffer with itself shifted by one word. */
bool
bs_is_zero (const void *data, size_t len)
{
  const char *p = data;

  if (len == 0)
    return true;
  if (len < 16)
    return p[0] == 0 && memcmp (p, p + 1, len - 1) == 0;
  for (size_t i = 0; i < 16; ++i)
    if (p[i])
      return false;
  return memcmp (p, p + 16, len - 16) == 0;
}

/* Compress into a new buffer. */
int
bs_compress (const void *data, size_t len, void **out, size_t *outlen)
{
  size_t cap = ZSTD_compressBound (len), r;
  void *buf = ZSTD_isError (cap) ? NULL : malloc (cap);

  if (buf == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  r = ZSTD_compress (buf, cap, data, len, COMPRESSION_LEVEL);
  if (ZSTD_isError (r)) {
    nbdkit_error ("zstd: %s", ZSTD_getErrorName (r));
    free (buf);
    return -1;
  }
  *out = buf;
  *outlen = r;
  return 0;
}

/* Decompress and check. */
int
bs_decode (const void *comp, size_t complen, void *out, size_t len,
           const uint8_t hash[BS_HASH_LEN], const char **why)
{
  unsigned long long content = ZSTD_getFrameContentSize (comp, complen);
  uint8_t got[BS_HASH_LEN];
  size_t r;

  if (content == ZSTD_CONTENTSIZE_ERROR) {
    *why = "not a zstd frame";
    return -1;
  }
  if (content != len) {
    *why = "wrong uncompressed size";
    return -1;
  }
  r = ZSTD_decompress (out, len, comp, complen);
  if (ZSTD_isError (r) || r != len) {
    *why = "zstd cannot decompress it (damaged or truncated)";
    return -1;
  }
  if (bs_hash (out, len, got) == -1) {
    *why = "its SHA-256 cannot be computed";
    return -1;
  }
  if (memcmp (got, hash, BS_HASH_LEN) != 0) {
    *why = "its SHA-256 does not match its name";
    return -1;
  }
  return 0;
}

/* ---- sets of hashes ---------------------------------------------- */

struct bs_hashset {
  uint8_t (*slot)[BS_HASH_LEN];
  bool *used;
  size_t cap, n;                /* cap is a power of two */
};

/* A new empty set. */
struct bs_hashset *
bs_hashset_new (void)
{
  struct bs_hashset *h = calloc (1, sizeof *h);

  if (h == NULL)
    return NULL;
  h->cap = 1024;
  h->slot = malloc (h->cap * sizeof *h->slot);
  h->used = calloc (h->cap, sizeof *h->used);
  if (h->slot == NULL || h->used == NULL) {
    bs_hashset_free (h);
    return NULL;
  }
  return h;
}

/* Free a set. */
void
bs_hashset_free (struct bs_hashset *h)
{
  if (h == NULL)
    return;
  free (h->slot);
  free (h->used);
  free (h);
}

/* Where hash is, or the free slot where it would go. */
static size_t
probe (const struct bs_hashset *h, const uint8_t hash[BS_HASH_LEN])
{
  uint64_t start;
  size_t i;

  memcpy (&start, hash, sizeof start);  /* SHA-256 bits are uniform */
  for (i = (size_t) start & (h->cap - 1); h->used[i];
       i = (i + 1) & (h->cap - 1))
    if (memcmp (h->slot[i], hash, BS_HASH_LEN) == 0)
      break;
  return i;
}

/* Double the table. */
static int
grow (struct bs_hashset *h)
{
  struct bs_hashset bigger = { .cap = h->cap * 2 };
  size_t i;

  bigger.slot = malloc (bigger.cap * sizeof *bigger.slot);
  bigger.used = calloc (bigger.cap, sizeof *bigger.used);
  if (bigger.slot == NULL || bigger.used == NULL) {
    free (bigger.slot);
    free (bigger.used);
    return -1;
  }
  for (i = 0; i < h->cap; ++i)
    if (h->used[i]) {
      size_t j = probe (&bigger, h->slot[i]);
      memcpy (bigger.slot[j], h->slot[i], BS_HASH_LEN);
      bigger.used[j] = true;
    }
  free (h->slot);
  free (h->used);
  h->slot = bigger.slot;
  h->used = bigger.used;
  h->cap = bigger.cap;
  return 0;
}

/* Add a hash. */
int
bs_hashset_add (struct bs_hashset *h, const uint8_t hash[BS_HASH_LEN])
{
  size_t i;

  if ((h->n + 1) * 2 > h->cap && grow (h) == -1)
    return -1;
  i = probe (h, hash);
  if (h->used[i])
    return 0;
  memcpy (h->slot[i], hash, BS_HASH_LEN);
  h->used[i] = true;
  h->n++;
  return 1;
}

/* Is the hash in the set? */
bool
bs_hashset_contains (const struct bs_hashset *h,
                     const uint8_t hash[BS_HASH_LEN])
{
  return h->used[probe (h, hash)];
}

/* How many hashes. */
size_t
bs_hashset_size (const struct bs_hashset *h)
{
  return h->n;
}
