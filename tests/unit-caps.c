/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/replication/pure/caps.c: what the client is
 * told, from what the legs can do.  Each row gives the legs' capabilities
 * (can_zero, minimum, preferred, maximum block size) and the expected
 * trim flag and block sizes the client sees.
 */

#include <config.h>

#include <stdint.h>
#include <string.h>

#include "caps.h"
#include "unit.h"

#define MIB (1024 * 1024)

struct leg_row {
  bool zero;
  uint32_t min, pref, max;
};

struct caps_case {
  const char *name;
  size_t nr_legs;
  struct leg_row legs[4];
  bool trim;
  uint32_t min, pref, max;
};

static const struct caps_case cases[] = {
  { "no legs: no trim, defaults", 0, { { 0 } },
    false, 1, 4096, 32 * MIB },
  { "one leg saying nothing", 1, { { true, 0, 0, 0 } },
    true, 1, 4096, 32 * MIB },
  { "one leg without native zero: no trim", 1, { { false, 0, 0, 0 } },
    false, 1, 4096, 32 * MIB },
  { "one leg without zero among three", 3,
    { { true, 0, 0, 0 }, { false, 0, 0, 0 }, { true, 0, 0, 0 } },
    false, 1, 4096, 32 * MIB },
  { "largest minimum wins", 3,
    { { true, 512, 0, 0 }, { true, 4096, 0, 0 }, { true, 1, 0, 0 } },
    true, 4096, 4096, 32 * MIB },
  { "largest preferred wins", 2,
    { { true, 0, 65536, 0 }, { true, 0, 8192, 0 } },
    true, 1, 65536, 32 * MIB },
  { "smallest maximum wins, zero ignored", 3,
    { { true, 0, 0, 0 }, { true, 0, 0, 4 * MIB }, { true, 0, 0, 16 * MIB } },
    true, 1, 4096, 4 * MIB },
  { "preferred below 4096 is raised", 1, { { true, 512, 512, 0 } },
    true, 512, 4096, 32 * MIB },
  { "preferred raised to the minimum", 1, { { true, 65536, 4096, 0 } },
    true, 65536, 65536, 32 * MIB },
  { "preferred clamped to the maximum", 2,
    { { true, 0, 1 * MIB, 0 }, { true, 0, 0, 65536 } },
    true, 1, 65536, 65536 },
  { "maximum below 4096 clamps the preferred", 1, { { true, 512, 0, 2048 } },
    true, 512, 2048, 2048 },
  { "maximum rounded down to a power of two", 2,
    { { true, 0, 0, 3 * MIB }, { true, 0, 0, 0 } },
    true, 1, 4096, 2 * MIB },
  { "maximum rounded down to the minimum", 1,
    { { true, 65536, 0, 98304 } },
    true, 65536, 65536, 65536 },
  { "maximum not rounded below an odd minimum", 1,
    { { true, 49152, 0, 57344 } },
    true, 49152, 49152, 57344 },
  { "a maximum above 32 MiB is capped", 2,
    { { true, 0, 0, UINT32_C (0xffffffff) }, { true, 0, 0, 64 * MIB } },
    true, 1, 4096, 32 * MIB },
  { "mixed legs", 4,
    { { true, 512, 4096, 32 * MIB }, { true, 4096, 65536, 0 },
      { true, 1, 0, 2 * MIB }, { true, 0, 0, 0 } },
    true, 4096, 65536, 2 * MIB },
};

/* Run one row. */
static void
run_case (const struct caps_case *c)
{
  struct leg_caps caps[4];
  const struct leg_caps *p[4];
  struct caps_summary sum;
  uint32_t min, pref, max;
  size_t i;

  memset (caps, 0, sizeof caps);
  for (i = 0; i < c->nr_legs; ++i) {
    caps[i].can_zero = c->legs[i].zero;
    caps[i].min_block = c->legs[i].min;
    caps[i].pref_block = c->legs[i].pref;
    caps[i].max_block = c->legs[i].max;
    p[i] = &caps[i];
  }
  caps_combine (p, c->nr_legs, &sum);
  caps_block_size (&sum, &min, &pref, &max);
  CHECKF (sum.trim == c->trim, "%s: trim %d", c->name, sum.trim);
  CHECKF (min == c->min, "%s: minimum %u", c->name, min);
  CHECKF (pref == c->pref, "%s: preferred %u", c->name, pref);
  CHECKF (max == c->max, "%s: maximum %u", c->name, max);
  CHECKF (min <= pref && pref <= max, "%s: %u <= %u <= %u", c->name,
          min, pref, max);
}

/* caps_leg_fits and caps_request_max: a leg joining later must honour
 * the block sizes the client was told.
 */
static void
check_leg_fits (void)
{
  struct leg_caps a = { .can_zero = true }, b = a;
  const struct leg_caps *p[1] = { &a };
  struct caps_summary sum;
  char why[256];

  caps_combine (p, 1, &sum);                   /* told 1, 32 MiB */
  CHECK (caps_request_max (&sum) == 32 * MIB);
  CHECK (caps_leg_fits (&sum, &b, why, sizeof why));
  b.min_block = 512;
  CHECKF (!caps_leg_fits (&sum, &b, why, sizeof why), "min 512 fits");
  CHECK (strstr (why, "minimum block size 512") != NULL);
  b.min_block = 0;
  b.max_block = 64 * MIB;
  CHECK (caps_leg_fits (&sum, &b, why, sizeof why));
  b.max_block = 16 * MIB;
  CHECKF (!caps_leg_fits (&sum, &b, why, sizeof why), "max 16M fits");
  CHECK (strstr (why, "maximum block size 16777216") != NULL);

  a.min_block = 4096;
  a.max_block = 65536;
  caps_combine (p, 1, &sum);                   /* told 4096, 64 KiB */
  CHECK (caps_request_max (&sum) == 65536);
  b.min_block = 512;
  b.max_block = 0;
  CHECK (caps_leg_fits (&sum, &b, why, sizeof why));
  b.max_block = 65536;
  CHECK (caps_leg_fits (&sum, &b, why, sizeof why));
  b.min_block = 8192;
  CHECK (!caps_leg_fits (&sum, &b, why, sizeof why));
}

/* Run every row. */
int
main (void)
{
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    run_case (&cases[i]);
  check_leg_fits ();
  return unit_exit ("unit-caps");
}
