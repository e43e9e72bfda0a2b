/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep: operate nbdkit-replicate volumes (nbdrep(1)).
 *
 * main handles the options that come before the subcommand (-v,
 * --help, --version), then hands the rest of the command line to the
 * subcommand, whose argv[0] becomes "nbdrep NAME" so that getopt's
 * messages name it.  Options of a subcommand may come before or after
 * its operands (GNU getopt permutes them).
 */

#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbdrep.h"

static const struct subcommand *const subcommands[] = {
  &cmd_status, &cmd_watch, &cmd_add, &cmd_remove, &cmd_fail, &cmd_resync,
  &cmd_set, &cmd_verify, &cmd_metrics, &cmd_inspect, &cmd_backup,
  &cmd_backups, &cmd_backup_delete, &cmd_backup_verify, &cmd_attach,
  &cmd_detach,
};
#define NR_SUBCOMMANDS (sizeof subcommands / sizeof subcommands[0])

/* Print nbdrep --help and exit 0. */
static void __attribute__ ((noreturn))
main_help (void)
{
  size_t i;

  printf ("Usage: nbdrep [-v] SUBCOMMAND [OPTIONS] ARGS...\n"
          "\n"
          "Operate nbdkit-replicate volumes through their control socket "
          "(CTL),\ninspect the metadata of a leg offline, and back volumes "
          "up to S3 or WebDAV\nstores (TARGET).\n"
          "\n"
          "Subcommands:\n");
  for (i = 0; i < NR_SUBCOMMANDS; ++i)
    printf ("  nbdrep %s %s\n      %s\n", subcommands[i]->name,
            subcommands[i]->synopsis, subcommands[i]->summary);
  printf ("\n"
          "Options:\n"
          "  -v, --verbose     Print debug messages on stderr.\n"
          "  -h, --help        Print this help and exit.\n"
          "  -V, --version     Print the version and exit.\n"
          "\n"
          "'nbdrep SUBCOMMAND --help' describes a subcommand; nbdrep(1) "
          "has the rest.\n"
          "Exit status: 0 ok, 1 error, 2 usage error, 3 volume not healthy "
          "(status)\nor mismatches left (verify --wait) or bad blocks "
          "(backup-verify).\n");
  exit (EXIT_OK);
}

/* The subcommand called name, or NULL. */
static const struct subcommand *
find_subcommand (const char *name)
{
  size_t i;

  for (i = 0; i < NR_SUBCOMMANDS; ++i)
    if (strcmp (subcommands[i]->name, name) == 0)
      return subcommands[i];
  return NULL;
}

/* Parse the options before the subcommand; returns the index of the
 * subcommand's name in argv.
 */
static int
parse_main_options (int argc, char **argv)
{
  static const struct option longopts[] = {
    { "help", no_argument, NULL, 'h' },
    { "verbose", no_argument, NULL, 'v' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 }
  };
  int c;

  while ((c = getopt_long (argc, argv, "+hvV", longopts, NULL)) != -1) {
    switch (c) {
    case 'h':
      main_help ();
    case 'v':
      debug_enabled = true;
      break;
    case 'V':
      printf ("nbdrep %s\n", PACKAGE_VERSION);
      exit (EXIT_OK);
    default:
      fprintf (stderr, "Try 'nbdrep --help' for more information.\n");
      exit (EXIT_USAGE);
    }
  }
  if (optind >= argc)
    usage_error (NULL, "missing subcommand");
  return optind;
}

/* Run the subcommand named on the command line. */
int
main (int argc, char **argv)
{
  const struct subcommand *cmd;
  char progname[64];
  int first;

  first = parse_main_options (argc, argv);
  cmd = find_subcommand (argv[first]);
  if (cmd == NULL)
    usage_error (NULL, "unknown subcommand '%s'", argv[first]);
  snprintf (progname, sizeof progname, "nbdrep %s", cmd->name);
  argv[first] = progname;
  optind = 0;                   /* reinitialise getopt for the subcommand */
  return cmd->run (cmd, argc - first, argv + first);
}
