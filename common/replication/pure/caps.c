/* SPDX-License-Identifier: BSD-3-Clause */
/* What the client is told, from what the legs can do (pure, unit
 * tested).
 *
 * Block sizes: the largest of the legs' minimum and preferred sizes,
 * the smallest of their maximums (a request must suit every leg).  A
 * leg that says nothing (0) constrains nothing.  What the client sees
 * then gets a floor and defaults: minimum 1, preferred at least 4096
 * (what nbd-client -b 4096 and the page cache use), maximum 32 MiB
 * when no leg gives one or one gives more (nbdkit's blocksize filter
 * says 4 GiB - 1, but nbdkit and libnbd refuse a data request above
 * 64 MiB), and the preferred size clamped between the two.  The
 * maximum is rounded down to a power of two (legal NBD either way, but
 * nbdublk refuses a server whose maximum is not one), unless that
 * would take it below the minimum.
 *
 * Trim is forwarded as write-zeroes that may punch holes, so it is
 * advertised only if every leg zeroes natively: emulating it with
 * writes of zeroes would turn an fstrim into a write of the whole disk.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include "caps.h"

#define MAX_ADVERTISED (32 * 1024 * 1024)   /* the largest maximum told */

/* Combine the capabilities of n legs. */
void
caps_combine (const struct leg_caps *const *legs, size_t n,
              struct caps_summary *out)
{
  size_t i;

  out->trim = n > 0;
  out->min_block = out->pref_block = out->max_block = 0;
  for (i = 0; i < n; ++i) {
    const struct leg_caps *c = legs[i];
    out->trim &= c->can_zero;
    if (c->min_block > out->min_block)
      out->min_block = c->min_block;
    if (c->pref_block > out->pref_block)
      out->pref_block = c->pref_block;
    if (c->max_block &&
        (out->max_block == 0 || c->max_block < out->max_block))
      out->max_block = c->max_block;
  }
}

/* The largest power of two not above x (x > 0). */
static uint32_t
pow2_floor (uint32_t x)
{
  return UINT32_C (1) << (31 - __builtin_clz (x));
}

/* The block sizes the client is told (see the design note). */
void
caps_block_size (const struct caps_summary *c, uint32_t *minimum,
                 uint32_t *preferred, uint32_t *maximum)
{
  *minimum = c->min_block ? c->min_block : 1;
  *maximum = c->max_block && c->max_block < MAX_ADVERTISED
    ? c->max_block : MAX_ADVERTISED;
  if (pow2_floor (*maximum) >= *minimum)
    *maximum = pow2_floor (*maximum);
  *preferred = c->pref_block > 4096 ? c->pref_block : 4096;
  if (*preferred < *minimum)
    *preferred = *minimum;
  if (*preferred > *maximum)
    *preferred = *maximum;
}

/* The largest request the engine sends to a leg (see caps.h). */
uint32_t
caps_request_max (const struct caps_summary *c)
{
  uint32_t minimum, preferred, maximum;

  caps_block_size (c, &minimum, &preferred, &maximum);
  return maximum;
}

/* Does a leg joining later honour what the client was told? */
bool
caps_leg_fits (const struct caps_summary *c, const struct leg_caps *leg,
               char *why, size_t len)
{
  uint32_t minimum, preferred, maximum;

  caps_block_size (c, &minimum, &preferred, &maximum);
  if (leg->min_block > minimum) {
    snprintf (why, len, "its minimum block size %" PRIu32 " is above the "
              "%" PRIu32 " the volume's clients were told (serve it with "
              "sizes that fit, or restart the controller)", leg->min_block,
              minimum);
    return false;
  }
  if (leg->max_block != 0 && leg->max_block < maximum) {
    snprintf (why, len, "its maximum block size %" PRIu32 " is below the "
              "%" PRIu32 " the volume's clients were told (serve it with "
              "sizes that fit, or restart the controller)", leg->max_block,
              maximum);
    return false;
  }
  return true;
}
