/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of select_read_leg (common/replication/pure/select.c).
 *
 * Each row of a table is a sequence of calls sharing one rotating
 * position (rr_next): the policy, the candidate mask, the legs'
 * requests in flight (never modified), the number of legs, the
 * position before the first call, and the leg each call must return.
 * Only the choices are asserted, not how rr_next counts.
 *
 * Covered: read=first (lowest candidate, ignores load and position);
 * round-robin ("the next candidate after the previous choice", as
 * select.c says: wrapping, and alternating evenly over the candidates
 * when a leg between them is not one); least-busy (fewest in flight,
 * non-candidates ignored even when idler, ties broken by rotating the
 * starting point); no candidate (-1); candidate bits at or beyond
 * nr_legs (ignored, as if absent); the full 16 legs.
 */

#include <config.h>

#include <stdint.h>
#include <string.h>

#include "select.h"
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
};

static const struct select_case cases[] = {
  /* read=first */
  { "first: lowest candidate", READ_FIRST, 0x6, { 0 }, 3, 0,
    { 1, 1, 1, END } },
  { "first: ignores load", READ_FIRST, 0x7, { 9, 0, 0 }, 3, 5,
    { 0, 0, END } },
  { "first: only the last leg", READ_FIRST, 0x4, { 0 }, 3, 0,
    { 2, END } },
  { "first: leg 15 of 16", READ_FIRST, 0x8000, { 0 }, 16, 0,
    { 15, END } },

  /* read=round-robin */
  { "round-robin: all three", READ_ROUND_ROBIN, 0x7, { 0 }, 3, 0,
    { 0, 1, 2, 0, 1, 2, 0, END } },
  { "round-robin: from position 2", READ_ROUND_ROBIN, 0x7, { 0 }, 3, 2,
    { 2, 0, 1, END } },
  { "round-robin: skips leg 1", READ_ROUND_ROBIN, 0x5, { 0 }, 3, 0,
    { 0, 2, 0, 2, 0, 2, END } },
  { "round-robin: ignores load", READ_ROUND_ROBIN, 0x3, { 100, 0 }, 2, 0,
    { 0, 1, 0, 1, END } },
  { "round-robin: one candidate", READ_ROUND_ROBIN, 0x2, { 0 }, 4, 0,
    { 1, 1, 1, 1, 1, END } },
  { "round-robin: 16 legs wrap", READ_ROUND_ROBIN, 0x8001, { 0 }, 16, 14,
    { 15, 0, 15, 0, END } },

  /* read=least-busy */
  { "least-busy: the idlest", READ_LEAST_BUSY, 0x7, { 3, 1, 2 }, 3, 0,
    { 1, 1, 1, 1, END } },
  { "least-busy: idler non-candidate", READ_LEAST_BUSY, 0x6, { 0, 4, 2 }, 3,
    0, { 2, 2, 2, END } },
  { "least-busy: all tied rotate", READ_LEAST_BUSY, 0x7, { 0, 0, 0 }, 3, 0,
    { 0, 1, 2, 0, 1, 2, END } },
  { "least-busy: tied busy legs rotate", READ_LEAST_BUSY, 0x7, { 5, 5, 5 },
    3, 1, { 1, 2, 0, 1, END } },
  { "least-busy: tie of 1 and 2 only", READ_LEAST_BUSY, 0x7, { 5, 1, 1 }, 3,
    0, { 1, 1, 2, 1, 1, 2, END } },
  { "least-busy: tie among candidates", READ_LEAST_BUSY, 0xb, { 0, 0, 0, 0 },
    4, 0, { 0, 1, 3, 3, 0, 1, END } },
  { "least-busy: 16 legs, one idle", READ_LEAST_BUSY, 0xffff,
    { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1 }, 16, 7,
    { 13, 13, 13, END } },

  /* No candidate: -1. */
  { "empty: first", READ_FIRST, 0, { 0 }, 3, 4, { -1, -1, END } },
  { "empty: round-robin", READ_ROUND_ROBIN, 0, { 0 }, 3, 4,
    { -1, -1, END } },
  { "empty: least-busy", READ_LEAST_BUSY, 0, { 0 }, 3, 4, { -1, -1, END } },
  { "empty: no legs", READ_LEAST_BUSY, 0x7, { 0 }, 0, 0, { -1, END } },

  /* Candidate bits beyond nr_legs are ignored. */
  { "beyond: first, only leg 3 of 3", READ_FIRST, 0x8, { 0 }, 3, 0,
    { -1, END } },
  { "beyond: round-robin, only leg 5", READ_ROUND_ROBIN, 0x20, { 0 }, 3, 0,
    { -1, END } },
  { "beyond: least-busy, only leg 15", READ_LEAST_BUSY, 0x8000, { 0 }, 2, 0,
    { -1, END } },
  { "beyond: first, leg 1 and leg 3", READ_FIRST, 0xa, { 0 }, 3, 0,
    { 1, END } },
  { "beyond: round-robin, leg 1 and 3", READ_ROUND_ROBIN, 0xa, { 0 }, 3, 0,
    { 1, 1, 1, 1, END } },
  { "beyond: least-busy, idle leg 3", READ_LEAST_BUSY, 0xa,
    { 0, 7, 0, 0 }, 3, 0, { 1, 1, 1, END } },
};

/* Run one row; report each wrong answer with the row and the call. */
static void
run_case (const struct select_case *c)
{
  unsigned inflight[MAX_LEGS];
  unsigned rr = c->rr_start;
  size_t k;

  memcpy (inflight, c->inflight, sizeof inflight);
  for (k = 0; k < MAX_CALLS && c->expect[k] != END; ++k) {
    unsigned before = rr;
    int got = select_read_leg (c->policy, c->candidates, inflight,
                               c->nr_legs, &rr);
    CHECKF (got == c->expect[k], "%s: call %zu (rr_next %u) chose %d, "
            "expected %d", c->name, k, before, got, c->expect[k]);
  }
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
