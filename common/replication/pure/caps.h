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

#endif /* REPLICATE_CAPS_H */
