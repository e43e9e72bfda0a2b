/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep metrics CTL: the status as Prometheus metrics.
 *
 * Prometheus text exposition format 0.0.4, rendered from one status
 * reply, for node_exporter's textfile collector or a scrape wrapper.
 * Rules of the format we keep: every family has # HELP and # TYPE and
 * all its samples together; counters end in _total; units are base
 * units (bytes, seconds) and say so in the name; label values escape
 * backslash, double quote and newline.
 *
 * States are one gauge per state word (1 for the current state, 0 for
 * the others), so a query never has to know the previous word.  Legs
 * are labelled leg="INDEX"; the URI and leg UUID appear only on the
 * _info gauge (join on leg), so a changed URI does not start new
 * series for every metric.  --volume=NAME puts volume="NAME" first on
 * every sample, so that the files of several volumes can sit in one
 * textfile directory (node_exporter refuses a series seen twice).
 * Resync and verify gauges are 0 when none runs.  The latency
 * histogram comes from the leg's "latency" object: its counts are per
 * bucket, made cumulative here, bounds converted from microseconds to
 * seconds; _count is the +Inf bucket.
 *
 * The tables below are the list of metrics; nbdrep(1) documents them.
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "nbdrep.h"

#define PREFIX "nbdkit_replicate_"

/* The label of --volume (volume="NAME"), or "". */
static char volume_label[256];

/* A metric read from a number field of an object: of the status's
 * volume (or its sub-object sub) or of each leg (or its sub-object).
 */
struct number_metric {
  const char *name, *type, *help;
  const char *sub;              /* NULL: the object itself */
  const char *field;
  bool optional;                /* field absent: no family at all */
};

/* A state gauge family: one sample per word. */
struct state_metric {
  const char *name, *help;
  const char *const *words;
};

static const char *const volume_states[] = {
  "healthy", "degraded", "readonly", "failed", NULL
};
static const char *const leg_states[] = {
  "uptodate", "syncing", "failed", "stale", "removed", NULL
};
static const char *const async_states[] = {
  "replicating", "behind", "catching-up", "failed", NULL
};
static const char *const verify_states[] = {
  "running", "done", "stopped", "failed", NULL
};

static const struct number_metric volume_metrics[] = {
  { "volume_generation", "gauge",
    "Generation counter of the volume (bumped at every membership "
    "change).", NULL, "generation", false },
  { "volume_size_bytes", "gauge", "Size of the exported volume.",
    NULL, "size", false },
  { "volume_legs", "gauge", "Number of legs (all states).",
    NULL, "legs", false },
  { "volume_uptodate_legs", "gauge", "Number of uptodate legs.",
    NULL, "uptodate", false },
  { "volume_quorum_legs", "gauge",
    "Uptodate legs needed to accept writes.", NULL, "quorum", false },
  { "volume_chunk_bytes", "gauge", "Out-of-sync bitmap granularity.",
    NULL, "chunk", false },
  { "resync_rate_limit_bytes_per_second", "gauge",
    "Resync bandwidth cap (0 = unlimited).", NULL, "resync_rate", false },
  { "resync_min_rate_bytes_per_second", "gauge",
    "Resync bandwidth kept under client load.", NULL, "resync_min_rate",
    false },
  { "verify_rate_limit_bytes_per_second", "gauge",
    "Verify bandwidth cap (0 = unlimited).", NULL, "verify_rate", true },
  { "activity_log_hot_extents", "gauge",
    "Extents hot in the activity log.", "activity_log", "hot", true },
  { "activity_log_capacity_extents", "gauge",
    "Capacity of the activity log.", "activity_log", "capacity", true },
  { "activity_log_writes_total", "counter",
    "Activity-log writes (an extent became hot or cooled).",
    "activity_log", "writes", true },
  { "verify_done_bytes", "gauge", "Bytes compared by the last verify.",
    "verify", "done", false },
  { "verify_total_bytes", "gauge", "Bytes the last verify compares.",
    "verify", "total", false },
  { "verify_mismatched_bytes", "gauge",
    "Bytes found different by the last verify.",
    "verify", "mismatched_bytes", false },
  { "verify_repaired_bytes", "gauge",
    "Bytes repaired by the last verify.", "verify", "repaired_bytes",
    false },
};

static const struct number_metric leg_metrics[] = {
  { "leg_reads_total", "counter", "Read requests sent to the leg.",
    NULL, "reads", false },
  { "leg_writes_total", "counter", "Write requests sent to the leg.",
    NULL, "writes", false },
  { "leg_zeroes_total", "counter", "Zero and trim requests sent to the leg.",
    NULL, "zeroes", false },
  { "leg_flushes_total", "counter", "Flush requests sent to the leg.",
    NULL, "flushes", false },
  { "leg_errors_total", "counter", "Requests to the leg that failed.",
    NULL, "errors", false },
  { "leg_read_bytes_total", "counter", "Bytes read from the leg.",
    NULL, "bytes_read", false },
  { "leg_written_bytes_total", "counter", "Bytes written to the leg.",
    NULL, "bytes_written", false },
  { "leg_inflight_requests", "gauge", "Requests in flight on the leg.",
    NULL, "inflight", false },
  { "leg_connections", "gauge", "NBD connections to the leg.",
    NULL, "connections", false },
  { "leg_size_bytes", "gauge", "Size of the leg (data and metadata).",
    NULL, "size", false },
  { "leg_resync_done_bytes", "gauge",
    "Bytes copied by the running resync of the leg.",
    "resync", "done", false },
  { "leg_resync_total_bytes", "gauge",
    "Bytes the running resync of the leg copies.",
    "resync", "total", false },
  { "leg_resync_rate_bytes_per_second", "gauge",
    "Copy rate of the running resync of the leg.",
    "resync", "rate", false },
};

/* The number families of asynchronous legs (the "async" object). */
static const struct number_metric async_metrics[] = {
  { "leg_async_lag_bytes", "gauge",
    "Bytes an asynchronous leg may lack (queued and unflushed, and its "
    "bitmap while behind or catching up).", "async", "lag_bytes", false },
  { "leg_async_lag_seconds", "gauge",
    "Age of the oldest write an asynchronous leg does not surely hold "
    "(its recovery point).", "async", "lag_seconds", false },
  { "leg_async_buffer_used_bytes", "gauge",
    "Bytes queued or in flight for an asynchronous leg.",
    "async", "buffer_used", false },
  { "leg_async_buffer_size_bytes", "gauge",
    "An asynchronous leg's buffer (async-buffer).", "async", "buffer_size",
    false },
  { "leg_async_pull_aheads_total", "counter",
    "Times an asynchronous leg fell behind (its buffer was full).",
    "async", "pull_aheads", false },
};

/* Print the HELP and TYPE lines of a family. */
static void
family (const char *name, const char *type, const char *help)
{
  printf ("# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n",
          name, help, name, type);
}

/* Append label name="value" (escaped) to labels, comma-separated. */
static void
add_label (char *labels, size_t len, const char *name, const char *value)
{
  size_t used = strlen (labels);
  const char *p;

  used += (size_t) snprintf (labels + used, len - used, "%s%s=\"",
                             used ? "," : "", name);
  if (used >= len)
    used = len - 1;
  for (p = value ? value : ""; *p && used + 3 < len; ++p) {
    if (*p == '\\' || *p == '"')
      labels[used++] = '\\';
    if (*p == '\n') {
      labels[used++] = '\\';
      labels[used++] = 'n';
    }
    else
      labels[used++] = *p;
  }
  if (used + 1 < len)
    labels[used++] = '"';
  labels[used] = '\0';
}

/* Print a sample line: name{labels} value (integers without a
 * fraction or exponent).
 */
static void
sample (const char *name, const char *labels, double value)
{
  const char *sep = volume_label[0] && labels[0] ? "," : "";
  bool any = volume_label[0] || labels[0];

  printf (PREFIX "%s%s%s%s%s%s ", name, any ? "{" : "", volume_label, sep,
          labels, any ? "}" : "");
  if (value > -9e18 && value < 9e18 && value == (double) (int64_t) value)
    printf ("%" PRId64 "\n", (int64_t) value);
  else
    printf ("%.15g\n", value);
}

/* The value of a number metric on obj (0 if absent). */
static double
number_value (const struct number_metric *m, const json_t *obj)
{
  const json_t *src = m->sub ? jobj (obj, m->sub) : obj;

  return jnum (src, m->field, 0);
}

/* Does obj have the field of a number metric? */
static bool
has_value (const struct number_metric *m, const json_t *obj)
{
  const json_t *src = m->sub ? jobj (obj, m->sub) : obj;

  return json_is_number (json_object_get (src, m->field));
}

/* The volume's number metrics. */
static void
print_volume_numbers (const json_t *vol)
{
  size_t i;

  for (i = 0; i < sizeof volume_metrics / sizeof volume_metrics[0]; ++i) {
    const struct number_metric *m = &volume_metrics[i];
    if (m->optional && !has_value (m, vol))
      continue;
    family (m->name, m->type, m->help);
    sample (m->name, "", number_value (m, vol));
  }
}

/* A state family's samples for one object (labels may be empty). */
static void
print_state_samples (const char *name, const char *const *words,
                     const char *labels, const char *current)
{
  size_t i;

  for (i = 0; words[i]; ++i) {
    char l[512];
    snprintf (l, sizeof l, "%s", labels);
    add_label (l, sizeof l, "state", words[i]);
    sample (name, l, current && strcmp (current, words[i]) == 0);
  }
}

/* The labels identifying a leg. */
static void
leg_labels (const json_t *leg, char *labels, size_t len)
{
  char index[24];

  labels[0] = '\0';
  snprintf (index, sizeof index, "%" PRId64, jint (leg, "index", -1));
  add_label (labels, len, "leg", index);
}

/* The volume's own families. */
static void
print_volume (const json_t *vol)
{
  const json_t *vf = jobj (vol, "verify");
  char labels[512] = "";

  family ("volume_info", "gauge",
          "Volume identity (always 1): uuid, metadata mode, read policy.");
  add_label (labels, sizeof labels, "uuid", jstr (vol, "uuid"));
  add_label (labels, sizeof labels, "metadata", jstr (vol, "metadata"));
  add_label (labels, sizeof labels, "read", jstr (vol, "read"));
  sample ("volume_info", labels, 1);
  family ("volume_state", "gauge",
          "Volume state: 1 for the current state word, 0 for the others.");
  print_state_samples ("volume_state", volume_states, "", jstr (vol, "state"));
  family ("verify_state", "gauge",
          "State of the last verify: 1 for the current word (all 0 if "
          "none ran).");
  print_state_samples ("verify_state", verify_states, "",
                       vf ? jstr (vf, "state") : NULL);
  print_volume_numbers (vol);
}

/* The _info family of the legs. */
static void
print_leg_info (const json_t *legs)
{
  const json_t *leg;
  size_t i;

  family ("leg_info", "gauge",
          "Leg identity (always 1): NBD URI and leg UUID.");
  json_array_foreach (legs, i, leg) {
    char labels[1024];
    leg_labels (leg, labels, sizeof labels);
    add_label (labels, sizeof labels, "uri", jstr (leg, "uri"));
    add_label (labels, sizeof labels, "uuid", jstr (leg, "uuid"));
    sample ("leg_info", labels, 1);
  }
}

/* The state family of the legs. */
static void
print_leg_states (const json_t *legs)
{
  const json_t *leg;
  size_t i;

  family ("leg_state", "gauge",
          "Leg state: 1 for the current state word, 0 for the others.");
  json_array_foreach (legs, i, leg) {
    char labels[512];
    leg_labels (leg, labels, sizeof labels);
    print_state_samples ("leg_state", leg_states, labels, jstr (leg, "state"));
  }
}

/* The number families of the legs. */
static void
print_leg_numbers (const json_t *legs)
{
  const json_t *leg;
  size_t m, i;

  for (m = 0; m < sizeof leg_metrics / sizeof leg_metrics[0]; ++m) {
    family (leg_metrics[m].name, leg_metrics[m].type, leg_metrics[m].help);
    json_array_foreach (legs, i, leg) {
      char labels[512];
      leg_labels (leg, labels, sizeof labels);
      sample (leg_metrics[m].name, labels,
              number_value (&leg_metrics[m], leg));
    }
  }
}

/* The families of the asynchronous legs, if there are any. */
static void
print_async_legs (const json_t *legs)
{
  const json_t *leg;
  size_t m, i;
  bool any = false;

  json_array_foreach (legs, i, leg)
    any |= jobj (leg, "async") != NULL;
  if (!any)
    return;
  family ("leg_async_state", "gauge",
          "Asynchronous leg state: 1 for the current word, 0 for the "
          "others.");
  json_array_foreach (legs, i, leg) {
    char labels[512];
    if (jobj (leg, "async") == NULL)
      continue;
    leg_labels (leg, labels, sizeof labels);
    print_state_samples ("leg_async_state", async_states, labels,
                         jstr (jobj (leg, "async"), "state"));
  }
  for (m = 0; m < sizeof async_metrics / sizeof async_metrics[0]; ++m) {
    family (async_metrics[m].name, async_metrics[m].type,
            async_metrics[m].help);
    json_array_foreach (legs, i, leg) {
      char labels[512];
      if (jobj (leg, "async") == NULL)
        continue;
      leg_labels (leg, labels, sizeof labels);
      sample (async_metrics[m].name, labels,
              number_value (&async_metrics[m], leg));
    }
  }
}

/* A bucket bound in microseconds as exact decimal seconds. */
static void
format_le (int64_t us, char *buf, size_t len)
{
  size_t n;

  snprintf (buf, len, "%" PRId64 ".%06" PRId64, us / 1000000, us % 1000000);
  n = strlen (buf);
  while (buf[n - 1] == '0')
    buf[--n] = '\0';
  if (buf[n - 1] == '.')
    buf[--n] = '\0';
}

/* One leg's histogram samples. */
static void
print_leg_histogram (const json_t *leg, const char *name)
{
  const json_t *lat = jobj (leg, "latency");
  const json_t *bounds = jarr (lat, "bounds_us");
  const json_t *counts = jarr (lat, "counts");
  char labels[512], le[512], bound[32], base[96];
  double cumulative = 0;
  size_t b;

  if (bounds == NULL || counts == NULL)
    return;
  leg_labels (leg, labels, sizeof labels);
  snprintf (base, sizeof base, "%s_bucket", name);
  for (b = 0; b <= json_array_size (bounds); ++b) {
    const json_t *c = json_array_get (counts, b);
    cumulative += json_is_number (c) ? json_number_value (c) : 0;
    if (b < json_array_size (bounds))
      format_le (json_integer_value (json_array_get (bounds, b)),
                 bound, sizeof bound);
    else
      snprintf (bound, sizeof bound, "+Inf");
    snprintf (le, sizeof le, "%s", labels);
    add_label (le, sizeof le, "le", bound);
    sample (base, le, cumulative);
  }
  snprintf (base, sizeof base, "%s_sum", name);
  sample (base, labels, jnum (lat, "sum_us", 0) / 1e6);
  snprintf (base, sizeof base, "%s_count", name);
  sample (base, labels, cumulative);
}

/* The latency histogram family of the legs. */
static void
print_leg_latency (const json_t *legs)
{
  static const char name[] = "leg_request_duration_seconds";
  const json_t *leg;
  size_t i;

  family (name, "histogram",
          "Time legs took to answer NBD requests.");
  json_array_foreach (legs, i, leg)
    print_leg_histogram (leg, name);
}

/* nbdrep metrics. */
static int
run_metrics (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "volume", required_argument, NULL, 'V' },
    COMMON_LONG_OPTIONS
  };
  const json_t *legs;
  json_t *status;
  int opt;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    if (opt == 'V') {
      volume_label[0] = '\0';
      add_label (volume_label, sizeof volume_label, "volume", optarg);
    }
    else
      other_option (cmd, opt);
  }
  need_operands (cmd, argc, argv, optind, 1, 1);

  status = ctl_get_status (argv[optind]);
  if (status == NULL)
    return EXIT_ERROR;
  legs = jarr (status, "legs");
  print_volume (jobj (status, "volume"));
  print_leg_info (legs);
  print_leg_states (legs);
  print_leg_numbers (legs);
  print_async_legs (legs);
  print_leg_latency (legs);
  json_decref (status);
  return EXIT_OK;
}

const struct subcommand cmd_metrics = {
  .name = "metrics",
  .run = run_metrics,
  .synopsis = "CTL [--volume=NAME]",
  .summary = "Print the status as Prometheus metrics (text format 0.0.4).",
  .description =
  "Every metric is named nbdkit_replicate_*; per-leg metrics carry the\n"
  "label leg=\"INDEX\".  --volume=NAME adds the label volume=\"NAME\" to\n"
  "every sample.  See nbdrep(1) for the list.\n",
};
