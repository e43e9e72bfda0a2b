/* SPDX-License-Identifier: BSD-3-Clause */
/* Minimal helpers for the C unit tests: CHECK reports the failing
 * expression with its line and counts failures; unit_exit prints a
 * summary and returns the exit status automake expects.
 */

#ifndef REPLICATE_UNIT_H
#define REPLICATE_UNIT_H

#include <stdio.h>
#include <stdlib.h>

static unsigned unit_failures, unit_checks;

#define CHECK(expr)                                                     \
  do {                                                                  \
    unit_checks++;                                                      \
    if (!(expr)) {                                                      \
      unit_failures++;                                                  \
      fprintf (stderr, "%s:%d: check failed: %s\n",                     \
               __FILE__, __LINE__, #expr);                              \
    }                                                                   \
  } while (0)

/* Like CHECK, with a printf-style note saying which table row failed. */
#define CHECKF(expr, ...)                                               \
  do {                                                                  \
    unit_checks++;                                                      \
    if (!(expr)) {                                                      \
      unit_failures++;                                                  \
      fprintf (stderr, "%s:%d: check failed: %s: ",                     \
               __FILE__, __LINE__, #expr);                              \
      fprintf (stderr, __VA_ARGS__);                                    \
      fputc ('\n', stderr);                                             \
    }                                                                   \
  } while (0)

/* Print the summary and return the process exit status. */
static inline int
unit_exit (const char *name)
{
  printf ("%s: %u checks, %u failed\n", name, unit_checks, unit_failures);
  return unit_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* REPLICATE_UNIT_H */
