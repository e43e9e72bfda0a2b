/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep watch CTL: live progress of resyncs and verifies.
 *
 * Every interval, one status request on a connection kept open, and
 * one update: on a terminal a header line and a bar per item, redrawn
 * in place; otherwise the plain lines of progress.c, or "idle" when
 * nothing runs, flushed at once so a pipe sees them as they come.
 * --count stops after N updates, --until-idle at the first update with
 * nothing running (legs that are failed or stale, waiting to resync,
 * do not count as running).  Losing the controller is an error.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "nbdrep.h"

struct watch_opts {
  double interval;              /* seconds */
  unsigned long count;          /* updates; 0 = no limit */
  bool until_idle;
};

/* The terminal's header line: volume state and the time. */
static void
header_line (const json_t *status, char *buf, size_t len)
{
  const json_t *vol = jobj (status, "volume");
  const char *state = jstr (vol, "state");
  time_t now = time (NULL);
  char clock[16] = "";
  struct tm tm;

  if (localtime_r (&now, &tm))
    strftime (clock, sizeof clock, "%H:%M:%S", &tm);
  snprintf (buf, len, "volume %s  generation %" PRId64 "  %" PRId64 "/%"
            PRId64 " legs uptodate  %s", state ? state : "?",
            jint (vol, "generation", 0), jint (vol, "uptodate", 0),
            jint (vol, "legs", 0), clock);
}

/* Draw one update on a terminal. */
static void
draw_terminal (struct screen *scr, const json_t *status,
               const struct progress_item *items, size_t n)
{
  char lines[MAX_PROGRESS_ITEMS + 1][256];
  size_t i;

  header_line (status, lines[0], sizeof lines[0]);
  for (i = 0; i < n; ++i)
    progress_format_bar (&items[i], lines[i + 1], sizeof lines[i + 1]);
  if (n == 0)
    snprintf (lines[1], sizeof lines[1], "idle");
  screen_draw (scr, stdout, lines, n == 0 ? 2 : n + 1);
}

/* Print one update as plain lines. */
static void
print_plain (const struct progress_item *items, size_t n)
{
  size_t i;

  for (i = 0; i < n; ++i)
    progress_print_line (stdout, &items[i]);
  if (n == 0)
    puts ("idle");
  fflush (stdout);
}

/* Poll and show updates until told to stop; the exit status. */
static int
watch_loop (struct ctl *c, const struct watch_opts *o)
{
  struct progress_item items[MAX_PROGRESS_ITEMS];
  struct screen scr = { 0 };
  bool tty = isatty (STDOUT_FILENO);
  unsigned long updates;
  size_t n;

  for (updates = 1;; ++updates) {
    json_t *status = ctl_status (c);

    if (status == NULL)
      return EXIT_ERROR;
    n = progress_items (status, false, items);
    if (tty)
      draw_terminal (&scr, status, items, n);
    else
      print_plain (items, n);
    json_decref (status);
    if ((o->until_idle && n == 0) || (o->count && updates >= o->count))
      return EXIT_OK;
    sleep_seconds (o->interval);
  }
}

/* Parse --count: a whole number from 1 (up to UINT_MAX, as
 * nbdkit_parse_unsigned).
 */
static unsigned long
parse_count (const struct subcommand *cmd, const char *str)
{
  uint64_t n;

  if (!parse_whole (str, 1, UINT_MAX, &n))
    usage_error (cmd, "--count '%s' is not a whole number from 1 to %u",
                 str, UINT_MAX);
  return (unsigned long) n;
}

/* nbdrep watch. */
static int
run_watch (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "interval", required_argument, NULL, 'i' },
    { "count", required_argument, NULL, 'c' },
    { "until-idle", no_argument, NULL, 'u' },
    COMMON_LONG_OPTIONS
  };
  struct watch_opts o = { .interval = 1 };
  struct ctl *c;
  int opt, r;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    switch (opt) {
    case 'i':
      o.interval = parse_seconds_arg (cmd, "--interval", optarg);
      break;
    case 'c':
      o.count = parse_count (cmd, optarg);
      break;
    case 'u':
      o.until_idle = true;
      break;
    default:
      other_option (cmd, opt);
    }
  }
  need_operands (cmd, argc, argv, optind, 1, 1);

  c = ctl_open (argv[optind]);
  if (c == NULL)
    return EXIT_ERROR;
  r = watch_loop (c, &o);
  ctl_close (c);
  return r;
}

const struct subcommand cmd_watch = {
  .name = "watch",
  .run = run_watch,
  .synopsis = "CTL [--interval=SECS] [--count=N] [--until-idle]",
  .summary = "Show the progress of resyncs and of a verify as they run.",
  .description =
  "On a terminal, a bar per item redrawn in place; otherwise one line\n"
  "per item and update, e.g.\n"
  "  leg 1 resync full 42.0% 1234567/2939203 bytes 310.2 MiB/s eta 5s\n"
  "or \"idle\" when nothing runs.\n",
  .options =
  "  --interval=SECS   Seconds between updates (default 1).\n"
  "  --count=N         Stop after N updates.\n"
  "  --until-idle      Stop (exit 0) once no resync and no verify runs.\n",
};
