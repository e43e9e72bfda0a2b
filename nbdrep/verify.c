/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep verify CTL: compare the uptodate legs, optionally repair.
 *
 * Starts (or with --stop stops) a verify on the controller, which runs
 * it in the background.  --stop returns once the verify has stopped
 * (the controller stops it asynchronously), so that a new one can be
 * started right after.  With --wait we poll the status until the
 * verify is no longer running (the controller marks it running before
 * it answers the start request), showing a bar when stdout is a
 * terminal, then print the mismatching ranges and the totals.  The exit
 * status tells a script what it needs: 0 nothing mismatches any more
 * (clean, or every mismatch repaired), 3 mismatches remain, 1 the
 * verify failed or was stopped before the end.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "nbdrep.h"

#define POLL_INTERVAL 0.5       /* seconds between status polls */
#define LISTED_MISMATCHES 1000  /* the controller lists the first 1000 */

struct verify_opts {
  bool repair, stop, wait;
  int repair_from;              /* -1: none */
  int64_t rate;                 /* bytes/s, -1: the controller's default */
};

/* The request that starts or stops the verify (a new object). */
static json_t *
verify_request (const struct verify_opts *o)
{
  if (o->stop)
    return json_pack ("{s:s, s:s}", "cmd", "verify", "action", "stop");
  return json_pack ("{s:s, s:s, s:b, s:o, s:o}", "cmd", "verify",
                    "action", "start", "repair", o->repair,
                    "repair_from", o->repair_from >= 0
                    ? json_integer (o->repair_from) : json_null (),
                    "rate", o->rate >= 0 ? json_integer (o->rate)
                                         : json_null ());
}

/* Poll until the verify is not running; returns the last status (with
 * a verify object) or NULL after an error.
 */
static json_t *
wait_for_verify (struct ctl *c)
{
  struct progress_item item;
  struct screen scr = { 0 };
  bool tty = isatty (STDOUT_FILENO);

  for (;;) {
    json_t *status = ctl_status (c);
    char line[1][256];

    if (status == NULL)
      return NULL;
    if (jobj (jobj (status, "volume"), "verify") == NULL) {
      nbdrep_error ("the controller reports no verify");
      json_decref (status);
      return NULL;
    }
    if (progress_items (status, true, &item) == 0)
      return status;
    if (tty) {
      progress_format_bar (&item, line[0], sizeof line[0]);
      screen_draw (&scr, stdout, line, 1);
    }
    json_decref (status);
    sleep_seconds (POLL_INTERVAL);
  }
}

/* A list of leg indexes as "0,2". */
static void
format_legs (const json_t *legs, char *buf, size_t len)
{
  const json_t *leg;
  size_t i, used = 0;

  buf[0] = '\0';
  json_array_foreach (legs, i, leg)
    if (used < len)
      used += (size_t) snprintf (buf + used, len - used,
                                 "%s%" JSON_INTEGER_FORMAT, i ? "," : "",
                                 json_integer_value (leg));
}

/* Print the mismatching ranges. */
static void
print_mismatches (const json_t *list)
{
  static const char *const headers[] = { "OFFSET", "LENGTH", "LEGS" };
  struct table *t = table_new (3, headers);
  const json_t *m;
  size_t i;

  json_array_foreach (list, i, m) {
    char offset[24], length[24], legs[128];
    const char *cells[3] = { offset, length, legs };
    snprintf (offset, sizeof offset, "%" PRId64, jint (m, "offset", 0));
    snprintf (length, sizeof length, "%" PRId64, jint (m, "length", 0));
    format_legs (jarr (m, "legs"), legs, sizeof legs);
    table_add_row (t, cells);
  }
  table_print (t, stdout, "");
  table_free (t);
  if (json_array_size (list) >= LISTED_MISMATCHES)
    printf ("(only the first %d ranges are listed)\n", LISTED_MISMATCHES);
}

/* Print the result of a finished verify; its exit status. */
static int
report_verify (const json_t *vf)
{
  const char *state = jstr (vf, "state"), *err = jstr (vf, "error");
  const json_t *list = jarr (vf, "mismatches");
  uint64_t mismatched = jcount (vf, "mismatched_bytes");
  uint64_t repaired = jcount (vf, "repaired_bytes");

  if (list && json_array_size (list) > 0)
    print_mismatches (list);
  printf ("verify %s: %s of %s checked, %s mismatched, %s repaired\n",
          state ? state : "?",
          human_size (jcount (vf, "done")).s,
          human_size (jcount (vf, "total")).s,
          human_size (mismatched).s, human_size (repaired).s);
  if (state == NULL || strcmp (state, "done") != 0) {
    nbdrep_error ("the verify did not finish (%s)%s%s", state ? state : "?",
                  err ? ": " : "", err ? err : "");
    return EXIT_ERROR;
  }
  return mismatched > repaired ? EXIT_UNHEALTHY : EXIT_OK;
}

/* Send the start or stop request.  Returns 0 or -1. */
static int
send_verify (struct ctl *c, const struct verify_opts *o)
{
  json_t *req = verify_request (o);
  json_t *reply = ctl_request (c, req);

  json_decref (req);
  if (reply == NULL)
    return -1;
  json_decref (reply);
  return 0;
}

/* Wait for the verify to end and report it; the exit status. */
static int
wait_and_report (struct ctl *c)
{
  json_t *status = wait_for_verify (c);
  int r;

  if (status == NULL)
    return EXIT_ERROR;
  r = report_verify (jobj (jobj (status, "volume"), "verify"));
  json_decref (status);
  return r;
}

/* Wait until a stopped verify has noticed (the controller stops it
 * asynchronously); the exit status.
 */
static int
wait_for_stop (struct ctl *c)
{
  json_t *status = wait_for_verify (c);

  json_decref (status);
  return status ? EXIT_OK : EXIT_ERROR;
}

/* Start or stop the verify, and wait if asked; the exit status. */
static int
do_verify (const char *path, const struct verify_opts *o)
{
  struct ctl *c = ctl_open (path);
  int r = EXIT_ERROR;

  if (c == NULL)
    return EXIT_ERROR;
  if (send_verify (c, o) == 0) {
    if (o->stop)
      r = wait_for_stop (c);
    else
      r = o->wait ? wait_and_report (c) : EXIT_OK;
  }
  ctl_close (c);
  return r;
}

/* Parse the options of verify. */
static void
parse_verify_options (const struct subcommand *cmd, int argc, char **argv,
                      struct verify_opts *o)
{
  static const struct option longopts[] = {
    { "repair", no_argument, NULL, 'r' },
    { "repair-from", required_argument, NULL, 'f' },
    { "rate", required_argument, NULL, 'R' },
    { "wait", no_argument, NULL, 'w' },
    { "stop", no_argument, NULL, 's' },
    COMMON_LONG_OPTIONS
  };
  int opt;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    switch (opt) {
    case 'r':
      o->repair = true;
      break;
    case 'f':
      o->repair = true;
      o->repair_from = (int) parse_index (cmd, "--repair-from", optarg);
      break;
    case 'R':
      o->rate = (int64_t) parse_size_arg (cmd, "--rate", optarg);
      break;
    case 'w':
      o->wait = true;
      break;
    case 's':
      o->stop = true;
      break;
    default:
      other_option (cmd, opt);
    }
  }
  if (o->stop && (o->repair || o->wait || o->rate >= 0))
    usage_error (cmd, "--stop takes no other option");
  need_operands (cmd, argc, argv, optind, 1, 1);
}

/* nbdrep verify. */
static int
run_verify (const struct subcommand *cmd, int argc, char **argv)
{
  struct verify_opts o = { .repair_from = -1, .rate = -1 };

  parse_verify_options (cmd, argc, argv, &o);
  return do_verify (argv[optind], &o);
}

const struct subcommand cmd_verify = {
  .name = "verify",
  .run = run_verify,
  .synopsis = "CTL [--repair] [--repair-from=INDEX] [--rate=SIZE] [--wait] "
              "| --stop",
  .summary = "Compare the uptodate legs chunk by chunk (and repair).",
  .description =
  "Starts a verify in the controller and returns, or with --wait waits\n"
  "for it, then lists the mismatching ranges (offset, length, legs that\n"
  "differ) and exits 0 if nothing mismatches any more, 3 if mismatches\n"
  "remain, 1 if the verify failed or was stopped.\n",
  .options =
  "  --repair          Rewrite the minority from the majority.\n"
  "  --repair-from=INDEX  Repair from leg INDEX (needed without a strict\n"
  "                    majority, e.g. two legs); implies --repair.\n"
  "  --rate=SIZE       Bytes per second (10M; 0 = unlimited); the\n"
  "                    controller keeps it as its verify-rate.\n"
  "  --wait            Wait for the end and report the mismatches.\n"
  "  --stop            Stop a running verify (returns once it stopped).\n",
};
