/* SPDX-License-Identifier: BSD-3-Clause */
/* Random numbers and UUIDs from the kernel's random source. */

#ifndef REPLICATE_RANDOM_H
#define REPLICATE_RANDOM_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* Fill buf with random bytes (getrandom; aborts if the kernel cannot
 * supply them, which does not happen after boot).
 */
extern void random_bytes (void *buf, size_t len);

/* A random non-zero 64-bit number. */
extern uint64_t random_u64 (void);

/* A random (version 4) UUID. */
extern void uuid_generate (uint8_t uuid[16]);

/* Format as 8-4-4-4-12 lower-case hex; out has room for 37 bytes. */
extern void uuid_format (const uint8_t uuid[16], char *out);

/* Parse the 8-4-4-4-12 form.  Returns 0 or -1. */
extern int uuid_parse (const char *str, uint8_t uuid[16]);

extern bool uuid_is_zero (const uint8_t uuid[16]);

#endif /* REPLICATE_RANDOM_H */
