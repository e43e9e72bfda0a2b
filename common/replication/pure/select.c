/* SPDX-License-Identifier: BSD-3-Clause */
/* Which uptodate leg serves a read (pure, unit tested).
 *
 * read=first: the lowest index (with the filter, the local leg).
 * read=round-robin: the next candidate after the previous choice (a
 * leg that is out does not hand its turn to its neighbour).
 * read=least-busy: the fewest requests in flight; ties are broken by
 * rotating the starting point, so an idle volume at queue depth 1
 * still spreads its reads over every leg.
 */

#include <config.h>

#include "select.h"

/* The first candidate at or after start, wrapping; -1 if none. */
static int
next_candidate (uint16_t candidates, size_t nr_legs, unsigned start)
{
  size_t i;

  for (i = 0; i < nr_legs; ++i) {
    unsigned leg = (start + i) % nr_legs;
    if (candidates & (1u << leg))
      return (int) leg;
  }
  return -1;
}

/* Choose a leg among candidates (a mask of leg indexes below
 * nr_legs), given each leg's requests in flight.  *rr_next is the
 * rotating position: after the chosen leg for round-robin, one further
 * for least-busy.  Returns -1 if there is no candidate.
 */
int
select_read_leg (enum read_policy policy, uint16_t candidates,
                 const unsigned *inflight, size_t nr_legs, unsigned *rr_next)
{
  unsigned start;
  int best = -1;
  size_t i;

  candidates &= (uint16_t) ((1u << nr_legs) - 1);
  if (candidates == 0)
    return -1;
  if (policy == READ_FIRST)
    return __builtin_ctz (candidates);

  start = *rr_next % nr_legs;
  if (policy == READ_ROUND_ROBIN) {
    best = next_candidate (candidates, nr_legs, start);
    *rr_next = (unsigned) best + 1;
    return best;
  }
  (*rr_next)++;

  for (i = 0; i < nr_legs; ++i) {
    unsigned leg = (start + i) % nr_legs;
    if (!(candidates & (1u << leg)))
      continue;
    if (best == -1 || inflight[leg] < inflight[best])
      best = (int) leg;
  }
  return best;
}
