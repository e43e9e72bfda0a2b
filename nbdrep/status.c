/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep status [--json] CTL: the state of a volume and its legs.
 *
 * Human output: one line for the volume (uuid, size, state, generation,
 * quorum), a few indented lines of detail, then a table with one row
 * per leg.  --json prints the controller's reply itself, indented, with
 * every field it has, for scripts.  Either way the exit status says
 * whether the volume is healthy (0) or not (3: degraded, readonly,
 * failed, or a state word this nbdrep does not know).
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "nbdrep.h"

/* The volume's first line. */
static void
print_volume_line (const json_t *vol)
{
  const char *uuid = jstr (vol, "uuid");
  const char *state = jstr (vol, "state");

  printf ("volume %s  size %s  state %s  generation %" PRId64
          "  quorum %" PRId64 "\n",
          uuid ? uuid : "(none: metadata=none)",
          human_size (jcount (vol, "size")).s,
          state ? state : "?", jint (vol, "generation", 0),
          jint (vol, "quorum", 0));
}

/* A rate limit: a rate, or "unlimited" for 0. */
static struct hstr
rate_limit (int64_t rate)
{
  struct hstr h;

  if (rate <= 0)
    snprintf (h.s, sizeof h.s, "unlimited");
  else
    h = human_rate ((double) rate);
  return h;
}

/* The detail lines under the volume line. */
static void
print_volume_details (const json_t *vol)
{
  const json_t *al = jobj (vol, "activity_log");
  const char *md = jstr (vol, "metadata"), *rd = jstr (vol, "read");

  printf ("  %" PRId64 "/%" PRId64 " legs uptodate, metadata %s, "
          "chunk %s, read %s\n",
          jint (vol, "uptodate", 0), jint (vol, "legs", 0),
          md ? md : "?", human_size (jcount (vol, "chunk")).s,
          rd ? rd : "?");
  if (al)
    printf ("  activity log %" PRId64 "/%" PRId64 " extents hot, %" PRId64
            " log writes\n", jint (al, "hot", 0), jint (al, "capacity", 0),
            jint (al, "writes", 0));
  printf ("  resync rate %s, min %s",
          rate_limit (jint (vol, "resync_rate", 0)).s,
          rate_limit (jint (vol, "resync_min_rate", 0)).s);
  if (json_object_get (vol, "verify_rate"))
    printf ("; verify rate %s", rate_limit (jint (vol, "verify_rate", 0)).s);
  putchar ('\n');
}

/* The ublk line, if the controller serves a ublk device (ublk=ID). */
static void
print_ublk (const json_t *u)
{
  const char *device = jstr (u, "device"), *state = jstr (u, "state");

  printf ("  ublk %s %s, %" PRId64 " queue(s) x %" PRId64 ", %" PRId64
          " in flight, %" PRId64 " requests (%" PRId64 " without a worker)"
          "%s%s\n",
          device ? device : "?", state ? state : "?",
          jint (u, "queues", 0), jint (u, "depth", 0),
          jint (u, "inflight", 0), jint (u, "requests", 0),
          jint (u, "direct", 0),
          jbool (u, "recovered", false) ? ", recovered" : "",
          jbool (u, "keep", false) ? ", kept at stop" : "");
}

/* One line per kernel device connected by nbdrep attach. */
static void
print_kernel (const json_t *devices)
{
  size_t i;
  const json_t *d;

  json_array_foreach (devices, i, d) {
    const char *device = jstr (d, "device");
    printf ("  kernel %s attached (nbdrep attach), %" PRId64
            " connection(s)\n", device ? device : "?",
            jint (d, "connections", 0));
  }
}

/* The backup line, if a backup runs. */
static void
print_backup (const json_t *b)
{
  const char *consistency = jstr (b, "consistency");
  int64_t leg = jint (b, "leg", -1);
  int64_t lapses = jint (b, "lapses", -1);
  int64_t left = lapses - (int64_t) time (NULL);

  printf ("  backup %s running: %s", jstr (b, "token"),
          consistency ? consistency : "?");
  if (leg >= 0)
    printf (", leg %" PRId64 " held as its source", leg);
  if (lapses >= 0)
    printf (", lapses in %" PRId64 " s unless renewed", left > 0 ? left : 0);
  putchar ('\n');
}

/* The verify line, if a verify ran. */
static void
print_verify (const json_t *vf)
{
  const char *state = jstr (vf, "state"), *err = jstr (vf, "error");
  uint64_t done = jcount (vf, "done");
  uint64_t total = jcount (vf, "total");

  printf ("  verify%s %s: %.1f%% %s/%s, %s mismatched, %s repaired",
          jbool (vf, "repair", false) ? " --repair" : "",
          state ? state : "?", percent (done, total), human_size (done).s,
          human_size (total).s,
          human_size (jcount (vf, "mismatched_bytes")).s,
          human_size (jcount (vf, "repaired_bytes")).s);
  if (state && strcmp (state, "running") == 0)
    printf (", %s, ETA %s", human_rate (jnum (vf, "rate", 0)).s,
            human_duration (jnum (vf, "eta", -1)).s);
  if (err)
    printf (", error: %s", err);
  putchar ('\n');
}

/* The RESYNC cell of a leg: progress while syncing, else the last one. */
static void
resync_cell (const json_t *leg, char *buf, size_t len)
{
  const json_t *last = jobj (leg, "last_resync");
  const char *kind = jstr (last, "kind");
  struct progress_item it;
  char numbers[128];

  if (jobj (leg, "resync")) {
    progress_leg_item (&it, leg);
    progress_format_compact (&it, numbers, sizeof numbers);
    snprintf (buf, len, "%s %s", it.kind, numbers);
  }
  else if (last)
    snprintf (buf, len, "last: %s %s in %s", kind ? kind : "?",
              human_size (jcount (last, "bytes")).s,
              human_duration (jnum (last, "seconds", 0)).s);
  else
    snprintf (buf, len, "-");
}

/* The STATE cell of a leg: its word, a backup's hold, and for an
 * asynchronous leg its own state, lag and buffer use.
 */
static void
state_cell (const json_t *leg, const char *word, const char *hold,
            char *buf, size_t len)
{
  const json_t *a = jobj (leg, "async");

  if (a == NULL) {
    snprintf (buf, len, "%s%s%s", word ? word : "?",
              hold ? ", held for " : "", hold ? hold : "");
    return;
  }
  snprintf (buf, len, "async %s, lag %s %s, buffer %s",
            jstr (a, "state") ? jstr (a, "state") : "?",
            human_size (jcount (a, "lag_bytes")).s,
            human_duration (jnum (a, "lag_seconds", 0)).s,
            human_size (jcount (a, "buffer_used")).s);
}

/* The table of legs. */
static void
print_legs (const json_t *legs)
{
  static const char *const headers[] = {
    "LEG", "STATE", "RESYNC", "READS", "WRITES", "ERRORS", "LAST ERROR", "URI"
  };
  struct table *t = table_new (8, headers);
  const json_t *leg;
  size_t i;

  json_array_foreach (legs, i, leg) {
    char index[24], state[160], resync[256], reads[24], writes[24];
    char errors[24];
    const char *word = jstr (leg, "state"), *hold = jstr (leg, "hold");
    const char *last_error = jstr (leg, "last_error");
    const char *cells[8] = {
      index, state, resync, reads, writes, errors,
      last_error ? last_error : "-", jstr (leg, "uri"),
    };
    snprintf (index, sizeof index, "%" PRId64, jint (leg, "index", -1));
    state_cell (leg, word, hold, state, sizeof state);
    resync_cell (leg, resync, sizeof resync);
    snprintf (reads, sizeof reads, "%" PRId64, jint (leg, "reads", 0));
    snprintf (writes, sizeof writes, "%" PRId64, jint (leg, "writes", 0));
    snprintf (errors, sizeof errors, "%" PRId64, jint (leg, "errors", 0));
    table_add_row (t, cells);
  }
  table_print (t, stdout, "");
  table_free (t);
}

/* Print the status as text. */
static void
print_status (const json_t *status)
{
  const json_t *vol = jobj (status, "volume");
  const json_t *vf = jobj (vol, "verify");

  print_volume_line (vol);
  print_volume_details (vol);
  if (jobj (vol, "ublk"))
    print_ublk (jobj (vol, "ublk"));
  if (jarr (vol, "kernel"))
    print_kernel (jarr (vol, "kernel"));
  if (vf)
    print_verify (vf);
  if (jobj (vol, "backup"))
    print_backup (jobj (vol, "backup"));
  putchar ('\n');
  print_legs (jarr (status, "legs"));
}

/* Print the reply as indented JSON. */
static int
print_json (const json_t *status)
{
  char *s = json_dumps (status, JSON_INDENT (2));

  if (s == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  puts (s);
  free (s);
  return 0;
}

/* The exit status for a status reply: 0 healthy, 3 anything else. */
static int
health_exit (const json_t *status)
{
  const char *state = jstr (jobj (status, "volume"), "state");

  return state && strcmp (state, "healthy") == 0 ? EXIT_OK : EXIT_UNHEALTHY;
}

/* nbdrep status. */
static int
run_status (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "json", no_argument, NULL, 'j' },
    COMMON_LONG_OPTIONS
  };
  bool json = false;
  json_t *status;
  int opt, r;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    if (opt == 'j')
      json = true;
    else
      other_option (cmd, opt);
  }
  need_operands (cmd, argc, argv, optind, 1, 1);

  status = ctl_get_status (argv[optind]);
  if (status == NULL)
    return EXIT_ERROR;
  if (!json)
    print_status (status);
  r = json && print_json (status) == -1 ? EXIT_ERROR : health_exit (status);
  json_decref (status);
  return r;
}

const struct subcommand cmd_status = {
  .name = "status",
  .run = run_status,
  .synopsis = "[--json] CTL",
  .summary = "Show the state of the volume and of each leg.",
  .description =
  "CTL is the controller's control socket (its control=PATH).  Exits 0\n"
  "when the volume is healthy, 3 when it is not.\n",
  .options =
  "  --json            Print the controller's status reply as JSON.\n",
};
