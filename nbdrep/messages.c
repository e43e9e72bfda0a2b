/* SPDX-License-Identifier: BSD-3-Clause */
/* Messages and command-line checks shared by every subcommand.
 *
 * Errors go to stderr prefixed "nbdrep: " and make the command exit 1;
 * usage errors (a bad option or operand) print one line saying what is
 * wrong and one line pointing at --help, and exit 2 at once.  Debug
 * messages, ours and the engine library's, appear only with -v.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "params.h"

#include "nbdrep.h"

bool debug_enabled;

/* Print prefix and a formatted message with a newline on stderr,
 * keeping errno.
 */
static void
vmessage (const char *prefix, const char *fs, va_list ap)
{
  int e = errno;

  fputs (prefix, stderr);
  vfprintf (stderr, fs, ap);
  fputc ('\n', stderr);
  errno = e;
}

/* Print an error message. */
void
nbdrep_error (const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  vmessage ("nbdrep: ", fs, ap);
  va_end (ap);
}

/* Print a debug message if -v was given. */
void
nbdrep_debug (const char *fs, ...)
{
  va_list ap;

  if (!debug_enabled)
    return;
  va_start (ap, fs);
  vmessage ("nbdrep: debug: ", fs, ap);
  va_end (ap);
}

/* The engine library's error function: an error message. */
void
nbdkit_error (const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  vmessage ("nbdrep: ", fs, ap);
  va_end (ap);
}

/* The engine library's debug function: a debug message with -v. */
void
nbdkit_debug (const char *fs, ...)
{
  va_list ap;

  if (!debug_enabled)
    return;
  va_start (ap, fs);
  vmessage ("nbdrep: debug: ", fs, ap);
  va_end (ap);
}

/* Print a usage error and the hint, and exit 2. */
void
usage_error (const struct subcommand *cmd, const char *fs, ...)
{
  const char *name = cmd ? cmd->name : NULL;
  va_list ap;

  fprintf (stderr, "nbdrep%s%s: ", name ? " " : "", name ? name : "");
  va_start (ap, fs);
  vfprintf (stderr, fs, ap);
  va_end (ap);
  fprintf (stderr, "\nTry 'nbdrep%s%s --help' for more information.\n",
           name ? " " : "", name ? name : "");
  exit (EXIT_USAGE);
}

/* Print a subcommand's help and exit 0. */
void
subcommand_help (const struct subcommand *cmd)
{
  printf ("Usage: nbdrep %s %s\n\n%s\n", cmd->name, cmd->synopsis,
          cmd->summary);
  if (cmd->description)
    printf ("\n%s", cmd->description);
  printf ("\nOptions:\n%s", cmd->options ? cmd->options : "");
  printf ("  -v, --verbose     Print debug messages on stderr.\n"
          "  -h, --help        Print this help and exit.\n"
          "\n"
          "See nbdrep(1) for the exit status and the output.\n");
  exit (EXIT_OK);
}

/* Handle an option that is not the subcommand's own: --help (exits
 * 0), --verbose, or a bad one (getopt has said what; exits 2).
 */
void
other_option (const struct subcommand *cmd, int c)
{
  switch (c) {
  case 'h':
    subcommand_help (cmd);
  case 'v':
    debug_enabled = true;
    return;
  default:
    fprintf (stderr, "Try 'nbdrep %s --help' for more information.\n",
             cmd->name);
    exit (EXIT_USAGE);
  }
}

/* Check the number of operands. */
void
need_operands (const struct subcommand *cmd, int argc, char **argv,
               int optind_, int min, int max)
{
  int n = argc - optind_;

  if (n < min)
    usage_error (cmd, "missing operand (usage: nbdrep %s %s)",
                 cmd->name, cmd->synopsis);
  if (n > max)
    usage_error (cmd, "unexpected operand '%s' (usage: nbdrep %s %s)",
                 argv[optind_ + max], cmd->name, cmd->synopsis);
}

/* Parse a whole number in [min, max] as nbdkit reads numbers (see
 * grammar.h: 0x10 and 010 too); false if str is not one.
 */
bool
parse_whole (const char *str, uint64_t min, uint64_t max, uint64_t *r)
{
  return grammar_parse_unsigned (str, max, r) == 0 && *r >= min;
}

/* Parse a leg index: a whole number up to INT_MAX (the protocol's). */
unsigned
parse_index (const struct subcommand *cmd, const char *what, const char *str)
{
  uint64_t n;

  if (!parse_whole (str, 0, INT_MAX, &n))
    usage_error (cmd, "%s '%s' is not a leg index (a whole number from 0 "
                 "to %d)", what, str, INT_MAX);
  return (unsigned) n;
}

/* Parse a size as nbdkit does: bytes or a number with a suffix. */
uint64_t
parse_size_arg (const struct subcommand *cmd, const char *what,
                const char *str)
{
  uint64_t r;

  if (config_parse_size (str, &r) == -1)
    usage_error (cmd, "%s '%s' is not a size (bytes, or a number with a "
                 "b, s, K, M, G, T, P or E suffix; 0 = unlimited)", what, str);
  return r;
}

/* Parse a positive number of seconds. */
double
parse_seconds_arg (const struct subcommand *cmd, const char *what,
                   const char *str)
{
  double r;

  if (config_parse_seconds (str, &r) == -1 || r <= 0)
    usage_error (cmd, "%s '%s' is not a positive number of seconds",
                 what, str);
  return r;
}
