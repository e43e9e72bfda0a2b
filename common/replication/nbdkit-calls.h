/* SPDX-License-Identifier: BSD-3-Clause */
/* The nbdkit functions the engine calls, declared here rather than
 * through nbdkit's headers so that the engine and its unit tests link
 * without nbdkit (tests/stub-nbdkit.c stands in for them).
 */

#ifndef REPLICATE_NBDKIT_CALLS_H
#define REPLICATE_NBDKIT_CALLS_H

#include <stdint.h>

extern void nbdkit_error (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
extern void nbdkit_debug (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
extern char *nbdkit_absolute_path (const char *path);
extern int64_t nbdkit_parse_size (const char *str);
extern int nbdkit_parse_bool (const char *str);
extern int nbdkit_parse_uint64_t (const char *what, const char *str,
                                  uint64_t *r);

#endif /* REPLICATE_NBDKIT_CALLS_H */
