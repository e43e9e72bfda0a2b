/* SPDX-License-Identifier: BSD-3-Clause */
/* Verify and repair (see verify.c). */

#ifndef REPLICATE_VERIFY_H
#define REPLICATE_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct volume;

/* Start comparing every uptodate leg in the background; repair from the
 * majority (or from leg repair_from >= 0); rate >= 0 sets verify-rate
 * (only if the verify starts).  Returns 0, or -1 with the reason in
 * err.
 */
extern int verify_start (struct volume *v, bool repair, int repair_from,
                         int64_t rate, char *err, size_t errlen);

/* Ask the running verify to stop.  Returns 0 or -1 with the reason. */
extern int verify_stop (struct volume *v, char *err, size_t errlen);

/* Stop and free the verify (engine stop). */
extern void verify_shutdown (struct volume *v);

/* Status: the "verify" object, or null if none ever ran. */
extern json_t *verify_json (struct volume *v);

#endif /* REPLICATE_VERIFY_H */
