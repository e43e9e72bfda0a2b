/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of select_read_leg (common/replication/select.c).
 *
 * Each row of a table is a sequence of calls sharing one rotating
 * position (rr_next): the policy, the candidate mask, the legs'
 * requests in flight, the number of legs, the position before the
 * first call, and the leg each call must return.  After the sequence,
 * the position must have advanced by exactly one per call for
 * round-robin and least-busy, and not at all for read=first and for
 * calls without a candidate.
 *
 * Covered: read=first (lowest candidate, ignores load and position);
 * round-robin (the next candidate from the position, wrapping, skipping
 * non-candidates); least-busy (fewest in flight, non-candidates ignored
 * even when idler, ties broken by rotating over the tied legs only);
 * no candidate (-1); candidate bits at or beyond nr_legs (ignored, as if
 * absent); the full 16 legs.
 */

#include <config.h>

#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "unit.h"

#define MAX_CALLS 8
#define END (-2)              /* ends a row's list of expected legs */

struct select_case {
  const char *name;
  enum read_policy policy;
  uint16_t candidates;
  unsigned inflight[MAX_LEGS];
  size_t nr_legs;
  unsigned rr_start;
  int expect[MAX_CALLS];      /* one per call, terminated by END */
  unsigned rr_advance;        /* expected change of rr_next per call */
};

static const struct select_case cases[] = {
  /* read=first */
  { "first: lowest candidate", READ_FIRST, 0x6, { 0 }, 3, 0,
    { 1, 1, 1, END }, 0 },
  { "first: ignores load", READ_FIRST, 0x7, { 9, 0, 0 }, 3, 5,
    { 0, 0, END }, 0 },
  { "first: only the last leg", READ_FIRST, 0x4, { 0 }, 3, 0,
    { 2, END }, 0 },
  { "first: leg 15 of 16", READ_FIRST, 0x8000, { 0 }, 16, 0,
    { 15, END }, 0 },

  /* read=round-robin */
  { "round-robin: all three", READ_ROUND_ROBIN, 0x7, { 0 }, 3, 0,
    { 0, 1, 2, 0, 1, 2, 0, END }, 1 },
  { "round-robin: from position 2", READ_ROUND_ROBIN, 0x7, { 0 }, 3, 2,
    { 2, 0, 1, END }, 1 },
  { "round-robin: skips leg 1", READ_ROUND_ROBIN, 0x5, { 0 }, 3, 0,
    { 0, 2, 2, 0, 2, 2, END }, 1 },
  { "round-robin: ignores load", READ_ROUND_ROBIN, 0x3, { 100, 0 }, 2, 0,
    { 0, 1, 0, 1, END }, 1 },
  { "round-robin: one candidate", READ_ROUND_ROBIN, 0x2, { 0 }, 4, 0,
    { 1, 1, 1, 1, 1, END }, 1 },
  { "round-robin: 16 legs wrap", READ_ROUND_ROBIN, 0x8001, { 0 }, 16, 14,
    { 15, 15, 0, 0, END }, 1 },

  /* read=least-busy */
  { "least-busy: the idlest", READ_LEAST_BUSY, 0x7, { 3, 1, 2 }, 3, 0,
    { 1, 1, 1, 1, END }, 1 },
  { "least-busy: idler non-candidate", READ_LEAST_BUSY, 0x6, { 0, 4, 2 }, 3,
    0, { 2, 2, 2, END }, 1 },
  { "least-busy: all tied rotate", READ_LEAST_BUSY, 0x7, { 0, 0, 0 }, 3, 0,
    { 0, 1, 2, 0, 1, 2, END }, 1 },
  { "least-busy: tied busy legs rotate", READ_LEAST_BUSY, 0x7, { 5, 5, 5 },
    3, 1, { 1, 2, 0, 1, END }, 1 },
  { "least-busy: tie of 1 and 2 only", READ_LEAST_BUSY, 0x7, { 5, 1, 1 }, 3,
    0, { 1, 1, 2, 1, 1, 2, END }, 1 },
  { "least-busy: tie among candidates", READ_LEAST_BUSY, 0xb, { 0, 0, 0, 0 },
    4, 0, { 0, 1, 3, 3, 0, 1, END }, 1 },
  { "least-busy: 16 legs, one idle", READ_LEAST_BUSY, 0xffff,
    { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1 }, 16, 7,
    { 13, 13, 13, END }, 1 },

  /* No candidate: -1, the position does not move. */
  { "empty: first", READ_FIRST, 0, { 0 }, 3, 4, { -1, -1, END }, 0 },
  { "empty: round-robin", READ_ROUND_ROBIN, 0, { 0 }, 3, 4,
    { -1, -1, END }, 0 },
  { "empty: least-busy", READ_LEAST_BUSY, 0, { 0 }, 3, 4, { -1, -1, END }, 0 },
  { "empty: no legs", READ_LEAST_BUSY, 0x7, { 0 }, 0, 0, { -1, END }, 0 },

  /* Candidate bits beyond nr_legs are ignored. */
  { "beyond: first, only leg 3 of 3", READ_FIRST, 0x8, { 0 }, 3, 0,
    { -1, END }, 0 },
  { "beyond: round-robin, only leg 5", READ_ROUND_ROBIN, 0x20, { 0 }, 3, 0,
    { -1, END }, 0 },
  { "beyond: least-busy, only leg 15", READ_LEAST_BUSY, 0x8000, { 0 }, 2, 0,
    { -1, END }, 0 },
  { "beyond: first, leg 1 and leg 3", READ_FIRST, 0xa, { 0 }, 3, 0,
    { 1, END }, 0 },
  { "beyond: round-robin, leg 1 and 3", READ_ROUND_ROBIN, 0xa, { 0 }, 3, 0,
    { 1, 1, 1, 1, END }, 1 },
  { "beyond: least-busy, idle leg 3", READ_LEAST_BUSY, 0xa,
    { 0, 7, 0, 0 }, 3, 0, { 1, 1, 1, END }, 1 },
};

/* Run one row; report each wrong answer with the row and the call. */
static void
run_case (const struct select_case *c)
{
  unsigned inflight[MAX_LEGS];
  unsigned rr = c->rr_start;
  unsigned calls = 0;
  size_t k;

  memcpy (inflight, c->inflight, sizeof inflight);
  for (k = 0; k < MAX_CALLS && c->expect[k] != END; ++k) {
    unsigned before = rr;
    int got = select_read_leg (c->policy, c->candidates, inflight,
                               c->nr_legs, &rr);
    CHECKF (got == c->expect[k], "%s: call %zu (rr_next %u) chose %d, "
            "expected %d", c->name, k, before, got, c->expect[k]);
    calls++;
  }
  CHECKF (rr == c->rr_start + calls * c->rr_advance,
          "%s: rr_next is %u after %u calls, expected %u", c->name, rr,
          calls, c->rr_start + calls * c->rr_advance);
  CHECKF (memcmp (inflight, c->inflight, sizeof inflight) == 0,
          "%s: the in-flight counts were modified", c->name);
}

int
main (void)
{
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    run_case (&cases[i]);
  return unit_exit ("unit-select");
}
