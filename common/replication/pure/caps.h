/* SPDX-License-Identifier: BSD-3-Clause */
/* What the client is told of the legs' capabilities (pure). See caps.c. */

#ifndef REPLICATE_CAPS_H
#define REPLICATE_CAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a leg's server can do, read when it connects. */
struct leg_caps {
  uint64_t size;
  bool can_write;
  bool can_flush;
  bool can_fua;             /* native FUA */
  bool can_zero;            /* native write-zeroes */
  bool can_cache;
  bool can_extents;
  bool can_multi_conn;
  uint32_t min_block, pref_block, max_block;   /* 0 = no information */
};

/* The legs' capabilities combined (caps.c). */
struct caps_summary {
  bool trim;                    /* every leg zeroes natively */
  uint32_t min_block, pref_block, max_block;   /* combined, 0 = none */
};

/* Combine the capabilities of n legs. */
extern void caps_combine (const struct leg_caps *const *legs, size_t n,
                          struct caps_summary *out);

/* The block sizes the client is told. */
extern void caps_block_size (const struct caps_summary *c,
                             uint32_t *minimum, uint32_t *preferred,
                             uint32_t *maximum);

/* The largest request the engine sends to a leg with a payload or a
 * reply of that size (read, write, block status): the maximum the
 * client is told, which every leg accepts (caps_leg_fits).
 */
extern uint32_t caps_request_max (const struct caps_summary *c);

/* Does a leg that connects after the client was told c (a leg added,
 * or one coming back from a restart of its server) honour every request
 * that c allows?  Its minimum block size must not be above the one the
 * client was told, nor its maximum below.  If not, why says so.
 */
extern bool caps_leg_fits (const struct caps_summary *c,
                           const struct leg_caps *leg, char *why,
                           size_t len);

#endif /* REPLICATE_CAPS_H */
