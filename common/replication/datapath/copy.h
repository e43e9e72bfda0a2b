/* SPDX-License-Identifier: BSD-3-Clause */
/* Copying a range from one leg to others, zeroes as zeroes (copy.c). */

#ifndef REPLICATE_COPY_H
#define REPLICATE_COPY_H

#include <stdint.h>

#include "internal.h"

/* A leg, reached through its shared connections (conn NULL) or a
 * private one (a resync's own handles).
 */
struct endpoint {
  struct leg *leg;
  struct conn *conn;
};

struct copy_result {
  uint64_t data;                /* bytes read and written */
  uint64_t zero;                /* bytes written as zeroes */
  int failed;                   /* -1 none, 0 the source, i+1 dst i */
  int err;                      /* its errno */
};

/* Copy [offset, offset+len) from src to each of the nr_dst legs of dst
 * (len <= COPY_MAX).  Where the source's block status says zero the
 * targets get write-zeroes (holes stay holes); everything else is read
 * into buf (COPY_MAX bytes) and written.  Returns 0, or -1 with the
 * failing endpoint in res.
 */
#define COPY_MAX (4 * 1024 * 1024)
extern int copy_range (struct volume *v, const struct endpoint *src,
                       const struct endpoint *dst, size_t nr_dst,
                       uint64_t offset, uint32_t len, void *buf,
                       struct copy_result *res);

#endif /* REPLICATE_COPY_H */
