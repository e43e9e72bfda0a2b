/* SPDX-License-Identifier: BSD-3-Clause */
/* The two nbdkit functions the engine uses, for unit tests: errors go
 * to stderr, debug messages only when REPLICATE_TEST_DEBUG is set.
 */

#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>

void nbdkit_error (const char *fs, ...) __attribute__ ((format (printf, 1, 2)));
void nbdkit_debug (const char *fs, ...) __attribute__ ((format (printf, 1, 2)));

/* Print an error message on stderr, preserving errno. */
void
nbdkit_error (const char *fs, ...)
{
  int e = errno;
  va_list ap;

  va_start (ap, fs);
  fputs ("error: ", stderr);
  vfprintf (stderr, fs, ap);
  fputc ('\n', stderr);
  va_end (ap);
  errno = e;
}

/* Print a debug message if REPLICATE_TEST_DEBUG is set. */
void
nbdkit_debug (const char *fs, ...)
{
  int e = errno;
  va_list ap;

  if (getenv ("REPLICATE_TEST_DEBUG") == NULL)
    return;
  va_start (ap, fs);
  fputs ("debug: ", stderr);
  vfprintf (stderr, fs, ap);
  fputc ('\n', stderr);
  va_end (ap);
  errno = e;
}
