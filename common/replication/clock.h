/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's clock, read by every layer, and the pauses of the -D
 * flags for tests: inline, so that they add no call and no dependency
 * between files.
 */

#ifndef REPLICATE_CLOCK_H
#define REPLICATE_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "nbdkit-calls.h"

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

/* The timespec of time ns (nanoseconds, as clock_ns), the deadline
 * pthread_cond_timedwait takes on a condition variable of that clock.
 */
static inline struct timespec
ns_to_timespec (uint64_t ns)
{
  return (struct timespec) {
    .tv_sec = (time_t) (ns / 1000000000),
    .tv_nsec = (long) (ns % 1000000000),
  };
}

/* The deadline ns nanoseconds from now on clock id. */
static inline struct timespec
deadline_after (clockid_t id, uint64_t ns)
{
  return ns_to_timespec (clock_ns (id) + ns);
}

/* Sleep ms milliseconds if a -D replicate.FLAG pause for tests is set,
 * saying so in the debug log ("WHERE: pausing MS ms WHAT", then
 * "WHERE: pause over").
 */
static inline void
debug_pause (int ms, const char *where, const char *what, const char *flag)
{
  if (ms <= 0)
    return;
  nbdkit_debug ("%s: pausing %d ms %s (-D replicate.%s)", where, ms, what,
                flag);
  nanosleep (&(struct timespec) {
      .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L }, NULL);
  nbdkit_debug ("%s: pause over", where);
}

/* debug_pause, the first time only that *done is still false. */
static inline void
debug_pause_once (atomic_bool *done, int ms, const char *where,
                  const char *what, const char *flag)
{
  if (ms > 0 && !atomic_exchange (done, true))
    debug_pause (ms, where, what, flag);
}

#endif /* REPLICATE_CLOCK_H */
