/* SPDX-License-Identifier: BSD-3-Clause */
/* One negotiated NBD connection to hand to the kernel (nbdneg.c). */

#ifndef NBDREP_NBDNEG_H
#define NBDREP_NBDNEG_H

#include <stdint.h>

/* What the export said at negotiation. */
struct nbdneg_export {
  int64_t size;
  int64_t block_min, block_pref;  /* 0 when the server gave none */
  uint64_t flags;                 /* NBD_FLAG_* the kernel understands */
  char volume[37];                /* the volume's UUID, "" if none */
};

/* Connect to target (a Unix socket path, or an nbd:// or nbd+unix://
 * URI without TLS), ask for export_name, negotiate within timeout_ms
 * and return the
 * connected socket, ready for transmission (blocking, close-on-exec),
 * with what the export said in *exp.  -1 on failure, with the reason
 * in why (a message for the log, at most why_len bytes).
 */
extern int nbdneg_connect (const char *target, const char *export_name,
                           int timeout_ms,
                           struct nbdneg_export *exp,
                           char *why, size_t why_len);

/* The volume's UUID from an export description; "" if the description
 * is not that of an nbdkit-replicate controller.
 */
extern void nbdneg_parse_label (const char *description, char volume[37]);

#endif /* NBDREP_NBDNEG_H */
