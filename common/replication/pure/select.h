/* SPDX-License-Identifier: BSD-3-Clause */
/* Which leg serves a read (pure). See select.c. */

#ifndef REPLICATE_SELECT_H
#define REPLICATE_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "params.h"

/* Choose a leg among candidates (a mask of leg indexes below nr_legs),
 * given each leg's requests in flight.
 */
extern int select_read_leg (enum read_policy policy, uint16_t candidates,
                            const unsigned *inflight, size_t nr_legs,
                            unsigned *rr_next);

#endif /* REPLICATE_SELECT_H */
