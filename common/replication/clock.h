/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's clock, read by every layer: inline, so that it adds no
 * call and no dependency between files.
 */

#ifndef REPLICATE_CLOCK_H
#define REPLICATE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Clock id's time in nanoseconds. */
static inline uint64_t
clock_ns (clockid_t id)
{
  struct timespec ts;

  clock_gettime (id, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}

/* Monotonic time in nanoseconds. */
static inline uint64_t
now_ns (void)
{
  return clock_ns (CLOCK_MONOTONIC);
}

#endif /* REPLICATE_CLOCK_H */
