/* SPDX-License-Identifier: BSD-3-Clause */
/* Numbers for humans: sizes, rates, durations, percentages.
 *
 * Sizes are binary (KiB = 1024 bytes) with one decimal from KiB on,
 * the unit chosen so that the number stays below 1024: "512 B",
 * "1.5 KiB", "2.9 GiB".  Results are small structs returned by value
 * so that several can appear in one printf.
 */

#include <config.h>

#include <stdio.h>
#include <inttypes.h>

#include "nbdrep.h"

static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB",
                                     "PiB", "EiB" };
#define NR_UNITS (sizeof units / sizeof units[0])

/* Format a non-negative amount of bytes followed by suffix. */
static struct hstr
format_bytes (double bytes, const char *suffix)
{
  struct hstr h;
  size_t u = 0;

  if (!(bytes >= 0))            /* also catches NaN */
    bytes = 0;
  while (bytes >= 1024 && u < NR_UNITS - 1) {
    bytes /= 1024;
    u++;
  }
  /* 1023.96 KiB would print as "1024.0 KiB": move up a unit. */
  if (u > 0 && bytes >= 1023.95 && u < NR_UNITS - 1) {
    bytes /= 1024;
    u++;
  }
  if (u == 0)
    snprintf (h.s, sizeof h.s, "%" PRIu64 " %s%s", (uint64_t) bytes,
              units[u], suffix);
  else
    snprintf (h.s, sizeof h.s, "%.1f %s%s", bytes, units[u], suffix);
  return h;
}

/* A size in bytes. */
struct hstr
human_size (uint64_t bytes)
{
  return format_bytes ((double) bytes, "");
}

/* A rate in bytes per second. */
struct hstr
human_rate (double bytes_per_second)
{
  return format_bytes (bytes_per_second, "/s");
}

/* A duration, at most two units: 5s, 2m05s, 1h02m, 3d04h. */
struct hstr
human_duration (double seconds)
{
  struct hstr h;
  uint64_t s;

  if (!(seconds >= 0) || seconds > 1e12) {
    snprintf (h.s, sizeof h.s, "?");
    return h;
  }
  s = (uint64_t) (seconds + 0.5);
  if (s < 60)
    snprintf (h.s, sizeof h.s, "%" PRIu64 "s", s);
  else if (s < 3600)
    snprintf (h.s, sizeof h.s, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
  else if (s < 86400)
    snprintf (h.s, sizeof h.s, "%" PRIu64 "h%02" PRIu64 "m",
              s / 3600, s / 60 % 60);
  else
    snprintf (h.s, sizeof h.s, "%" PRIu64 "d%02" PRIu64 "h",
              s / 86400, s / 3600 % 24);
  return h;
}

/* done / total as a percentage in [0, 100], rounded down to one
 * decimal so that 100.0 means finished.
 */
double
percent (uint64_t done, uint64_t total)
{
  double tenths;

  if (total == 0)
    return 0;
  if (done >= total)
    return 100;
  tenths = (double) (uint64_t) (1000.0 * (double) done / (double) total);
  return tenths / 10;
}
