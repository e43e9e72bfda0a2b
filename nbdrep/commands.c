/* SPDX-License-Identifier: BSD-3-Clause */
/* The one-request subcommands: add, remove, fail, resync, set.
 *
 * Each checks its operands (a bad index, key or size is a usage error,
 * exit 2, before anything is sent), sends one request and exits 0 if
 * the controller said "ok": true, 1 otherwise (the controller's message
 * is printed).  They print nothing on success except add, which prints
 * the index of the new leg for scripts.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "nbdrep.h"

/* Parse a command line with only the common options and between min
 * and max operands; returns the index of the first operand.
 */
static int
parse_plain (const struct subcommand *cmd, int argc, char **argv,
             int min, int max)
{
  static const struct option longopts[] = { COMMON_LONG_OPTIONS };
  int opt;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1)
    other_option (cmd, opt);
  need_operands (cmd, argc, argv, optind, min, max);
  return optind;
}

/* Send req (stolen) to the controller at ctl; the exit status. */
static int
send_simple (const char *ctl, json_t *req)
{
  json_t *reply = ctl_call (ctl, req);

  json_decref (req);
  if (reply == NULL)
    return EXIT_ERROR;
  json_decref (reply);
  return EXIT_OK;
}

/* nbdrep add CTL URI [--async]. */
static int
run_add (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "async", no_argument, NULL, 'a' },
    COMMON_LONG_OPTIONS
  };
  bool async = false;
  json_t *req, *reply, *index;
  int opt, i;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    if (opt == 'a')
      async = true;
    else
      other_option (cmd, opt);
  }
  need_operands (cmd, argc, argv, optind, 2, 2);
  i = optind;
  req = json_pack ("{s:s, s:s}", "cmd", "add-leg", "uri", argv[i + 1]);
  /* Only when said: an older controller refuses the field. */
  if (req != NULL && async)
    json_object_set_new (req, "async", json_true ());
  reply = ctl_call (argv[i], req);

  json_decref (req);
  if (reply == NULL)
    return EXIT_ERROR;
  index = json_object_get (reply, "index");
  if (json_is_integer (index))
    printf ("%" JSON_INTEGER_FORMAT "\n", json_integer_value (index));
  json_decref (reply);
  return EXIT_OK;
}

/* A command taking CTL INDEX: send {"cmd": request, "index": INDEX}. */
static int
run_index_command (const struct subcommand *cmd, int argc, char **argv,
                   const char *request)
{
  int i = parse_plain (cmd, argc, argv, 2, 2);
  unsigned index = parse_index (cmd, "INDEX", argv[i + 1]);

  return send_simple (argv[i], json_pack ("{s:s, s:I}", "cmd", request,
                                          "index", (json_int_t) index));
}

/* nbdrep remove CTL INDEX. */
static int
run_remove (const struct subcommand *cmd, int argc, char **argv)
{
  return run_index_command (cmd, argc, argv, "remove-leg");
}

/* nbdrep fail CTL INDEX. */
static int
run_fail (const struct subcommand *cmd, int argc, char **argv)
{
  return run_index_command (cmd, argc, argv, "fail-leg");
}

/* nbdrep resync CTL INDEX [--full] [--server-restarted]. */
static int
run_resync (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "full", no_argument, NULL, 'f' },
    { "server-restarted", no_argument, NULL, 'S' },
    COMMON_LONG_OPTIONS
  };
  bool full = false, restarted = false;
  json_t *req;
  unsigned index;
  int opt;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    if (opt == 'f')
      full = true;
    else if (opt == 'S')
      restarted = true;
    else
      other_option (cmd, opt);
  }
  need_operands (cmd, argc, argv, optind, 2, 2);
  index = parse_index (cmd, "INDEX", argv[optind + 1]);
  req = json_pack ("{s:s, s:I, s:b}", "cmd", "resync",
                   "index", (json_int_t) index, "full", full);
  /* Only when said: an older controller refuses the field. */
  if (req != NULL && restarted)
    json_object_set_new (req, "server_restarted", json_true ());
  return send_simple (argv[optind], req);
}

/* Is key one of the settings set may change? */
static bool
known_setting (const char *key)
{
  static const char *const keys[] = {
    "resync-rate", "resync-min-rate", "verify-rate",
  };
  size_t i;

  for (i = 0; i < sizeof keys / sizeof keys[0]; ++i)
    if (strcmp (key, keys[i]) == 0)
      return true;
  return false;
}

/* nbdrep set CTL KEY VALUE. */
static int
run_set (const struct subcommand *cmd, int argc, char **argv)
{
  int i = parse_plain (cmd, argc, argv, 3, 3);
  const char *key = argv[i + 1], *value = argv[i + 2];

  if (!known_setting (key))
    usage_error (cmd, "unknown setting '%s' (resync-rate, resync-min-rate "
                 "or verify-rate)", key);
  parse_size_arg (cmd, key, value);
  return send_simple (argv[i], json_pack ("{s:s, s:s, s:s}", "cmd", "set",
                                          "key", key, "value", value));
}

const struct subcommand cmd_add = {
  .name = "add",
  .run = run_add,
  .synopsis = "CTL URI [--async]",
  .summary = "Add a leg (an NBD URI); it joins with a full resync.",
  .options =
  "  --async           An asynchronous leg (as async=URI): the client\n"
  "                    never waits for it.\n",
  .description = "Prints the index of the new leg.\n",
};

const struct subcommand cmd_remove = {
  .name = "remove",
  .run = run_remove,
  .synopsis = "CTL INDEX",
  .summary = "Take leg INDEX out of the volume for good (state removed).",
};

const struct subcommand cmd_fail = {
  .name = "fail",
  .run = run_fail,
  .synopsis = "CTL INDEX",
  .summary = "Fail leg INDEX for maintenance (it comes back by resync).",
  .description =
  "The leg is dropped as after an error; the controller reconnects it\n"
  "and resyncs what it missed, as after any failure.\n",
};

const struct subcommand cmd_resync = {
  .name = "resync",
  .run = run_resync,
  .synopsis = "CTL INDEX [--full] [--server-restarted]",
  .summary = "Resync leg INDEX now (incremental unless --full).",
  .options =
  "  --full            Copy every chunk, not only the out-of-sync ones\n"
  "                    (this also rebuilds an uptodate leg).\n"
  "  --server-restarted\n"
  "                    The leg's server has been restarted, or its host\n"
  "                    is gone: stop waiting for it to close the\n"
  "                    connections the controller aborted (a reset or\n"
  "                    timed-out TCP connection cannot tell; the leg's\n"
  "                    last_error says when this is needed).\n",
};

const struct subcommand cmd_set = {
  .name = "set",
  .run = run_set,
  .synopsis = "CTL KEY VALUE",
  .summary = "Change a setting of the running volume.",
  .description =
  "KEY is resync-rate, resync-min-rate or verify-rate; VALUE a rate in\n"
  "bytes per second with an optional K, M, G ... suffix (10M), 0 for\n"
  "unlimited.\n",
};
