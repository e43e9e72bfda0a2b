/* SPDX-License-Identifier: BSD-3-Clause */
/* Progress of what runs in the background: resyncs and verifies.
 *
 * A status reply is turned into items (one per syncing leg, one for a
 * running verify), and an item is shown one of two ways:
 *
 * - on a terminal, a bar redrawn in place: the cursor goes back up over
 *   the lines drawn last time (ESC [ N A), each line is cleared
 *   (ESC [ 2 K) and rewritten, and what is left of a longer previous
 *   drawing is cleared (ESC [ J);
 * - otherwise one plain line per item and update, fixed words and
 *   plain numbers a script can split on spaces:
 *     leg 1 resync full 42.0% 1234567/2939203 bytes 310.2 MiB/s eta 5s
 *     verify repair 10.0% 1048576/10485760 bytes 4.0 MiB/s eta 2s
 *       mismatched 65536 repaired 65536
 *   (the verify line is one line; eta is whole seconds or "?").
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "nbdrep.h"

#define BAR_WIDTH 24

/* Fill the common numbers of an item from a progress object. */
static void
fill_numbers (struct progress_item *it, const json_t *p)
{
  it->done = jcount (p, "done");
  it->total = jcount (p, "total");
  it->rate = jnum (p, "rate", 0);
  it->eta = jnum (p, "eta", -1);
}

/* The item of a syncing leg (its resync may not have begun: null). */
void
progress_leg_item (struct progress_item *it, const json_t *leg)
{
  const json_t *rs = jobj (leg, "resync");
  const char *kind = rs ? jstr (rs, "kind") : NULL;

  memset (it, 0, sizeof *it);
  snprintf (it->kind, sizeof it->kind, "%s", kind ? kind : "starting");
  snprintf (it->label, sizeof it->label, "leg %" PRId64 " resync %s",
            jint (leg, "index", -1), it->kind);
  it->eta = -1;
  if (rs)
    fill_numbers (it, rs);
}

/* The item of a running verify. */
static void
verify_item (struct progress_item *it, const json_t *vf)
{
  memset (it, 0, sizeof *it);
  snprintf (it->kind, sizeof it->kind, "%s",
            jbool (vf, "repair", false) ? "repair" : "check");
  snprintf (it->label, sizeof it->label, "verify %s", it->kind);
  fill_numbers (it, vf);
  it->is_verify = true;
  it->mismatched = jcount (vf, "mismatched_bytes");
  it->repaired = jcount (vf, "repaired_bytes");
}

/* Every syncing leg and a running verify. */
size_t
progress_items (const json_t *status, bool verify_only,
                struct progress_item *items)
{
  const json_t *volume = jobj (status, "volume");
  const json_t *vf = jobj (volume, "verify");
  const json_t *leg;
  size_t n = 0, i;

  if (!verify_only)
    json_array_foreach (jarr (status, "legs"), i, leg) {
      const char *state = jstr (leg, "state");
      if (n < MAX_PROGRESS_ITEMS && state && strcmp (state, "syncing") == 0)
        progress_leg_item (&items[n++], leg);
    }
  if (vf && n < MAX_PROGRESS_ITEMS) {
    const char *state = jstr (vf, "state");
    if (state && strcmp (state, "running") == 0)
      verify_item (&items[n++], vf);
  }
  return n;
}

/* Print the plain line of an item. */
void
progress_print_line (FILE *fp, const struct progress_item *it)
{
  fprintf (fp, "%s %.1f%% %" PRIu64 "/%" PRIu64 " bytes %s eta ",
           it->label, percent (it->done, it->total), it->done, it->total,
           human_rate (it->rate).s);
  if (it->eta >= 0)
    fprintf (fp, "%.0fs", it->eta);
  else
    fputc ('?', fp);
  if (it->is_verify)
    fprintf (fp, " mismatched %" PRIu64 " repaired %" PRIu64,
             it->mismatched, it->repaired);
  fputc ('\n', fp);
}

/* Format the bar line of an item. */
void
progress_format_bar (const struct progress_item *it, char *buf, size_t len)
{
  double pct = percent (it->done, it->total);
  size_t filled = (size_t) (pct / 100 * BAR_WIDTH), i;
  char bar[BAR_WIDTH + 1];
  int n;

  for (i = 0; i < BAR_WIDTH; ++i)
    bar[i] = i < filled ? '#' : '.';
  bar[BAR_WIDTH] = '\0';
  n = snprintf (buf, len, "%-20s [%s] %5.1f%%  %s/%s  %s  ETA %s",
                it->label, bar, pct, human_size (it->done).s,
                human_size (it->total).s, human_rate (it->rate).s,
                human_duration (it->eta).s);
  if (it->is_verify && n > 0 && (size_t) n < len)
    snprintf (buf + n, len - (size_t) n, "  mismatched %s",
              human_size (it->mismatched).s);
}

/* Format the numbers of an item compactly: 42% 1.2 GiB/2.9 GiB
 * 310.2 MiB/s ETA 5s.
 */
void
progress_format_compact (const struct progress_item *it, char *buf,
                         size_t len)
{
  snprintf (buf, len, "%d%% %s/%s %s ETA %s",
            (int) percent (it->done, it->total), human_size (it->done).s,
            human_size (it->total).s, human_rate (it->rate).s,
            human_duration (it->eta).s);
}

/* Redraw the screen's lines in place. */
void
screen_draw (struct screen *scr, FILE *fp, char lines[][256], size_t n)
{
  size_t i;

  if (scr->lines > 0)
    fprintf (fp, "\033[%uA", scr->lines);
  for (i = 0; i < n; ++i)
    fprintf (fp, "\r\033[2K%s\n", lines[i]);
  if (n < scr->lines)
    fputs ("\033[J", fp);
  scr->lines = (unsigned) n;
  fflush (fp);
}

/* Sleep, resuming after signals. */
void
sleep_seconds (double seconds)
{
  struct timespec ts = {
    .tv_sec = (time_t) seconds,
    .tv_nsec = (long) ((seconds - (double) (time_t) seconds) * 1e9),
  };

  while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
    ;
}
