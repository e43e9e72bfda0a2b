/* SPDX-License-Identifier: BSD-3-Clause */
/* The nbdkit functions the engine uses, for unit tests: errors go to
 * stderr, debug messages only when REPLICATE_TEST_DEBUG is set, a
 * relative path is made absolute against the working directory (as
 * nbdkit_absolute_path does), and sizes, booleans and whole numbers
 * are parsed in nbdkit's grammar (common/utils/grammar.c), with
 * nbdkit's messages.
 */

#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "grammar.h"

void nbdkit_error (const char *fs, ...) __attribute__ ((format (printf, 1, 2)));
void nbdkit_debug (const char *fs, ...) __attribute__ ((format (printf, 1, 2)));
char *nbdkit_absolute_path (const char *path);
int64_t nbdkit_parse_size (const char *str);
int nbdkit_parse_bool (const char *str);
int nbdkit_parse_uint64_t (const char *what, const char *str, uint64_t *r);

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

/* path made absolute (a new string), or NULL after an error. */
char *
nbdkit_absolute_path (const char *path)
{
  char *cwd, *r;

  if (path == NULL || *path == '\0') {
    nbdkit_error ("cannot convert null or empty path to an absolute path");
    return NULL;
  }
  if (*path == '/') {
    r = strdup (path);
    if (r == NULL)
      nbdkit_error ("strdup: %m");
    return r;
  }
  cwd = getcwd (NULL, 0);
  if (cwd == NULL) {
    nbdkit_error ("getcwd: %m");
    return NULL;
  }
  if (asprintf (&r, "%s/%s", cwd, path) == -1) {
    nbdkit_error ("asprintf: %m");
    r = NULL;
  }
  free (cwd);
  return r;
}

/* A size in nbdkit's grammar, or -1 after an error. */
int64_t
nbdkit_parse_size (const char *str)
{
  uint64_t r;

  if (grammar_parse_size (str, &r) == -1) {
    nbdkit_error ("could not parse size string (%s)", str);
    return -1;
  }
  return (int64_t) r;
}

/* A boolean in nbdkit's grammar, or -1 after an error. */
int
nbdkit_parse_bool (const char *str)
{
  int b = grammar_parse_bool (str);

  if (b == -1)
    nbdkit_error ("could not decipher boolean (%s)", str);
  return b;
}

/* A uint64_t in nbdkit's grammar (0x10, 010 ...), or -1 after an error. */
int
nbdkit_parse_uint64_t (const char *what, const char *str, uint64_t *r)
{
  int refusal = grammar_parse_unsigned (str, UINT64_MAX, r);
  char msg[256];

  if (refusal == 0)
    return 0;
  grammar_refusal_message (msg, sizeof msg, what, str, refusal);
  nbdkit_error ("%s", msg);
  return -1;
}
