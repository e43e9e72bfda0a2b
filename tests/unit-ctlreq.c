/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/replication/pure/ctlreq.c: framing a request
 * line, decoding it with strict types (each row a line and the request or
 * the error it gives), and error replies that can always be encoded.
 */

#include <config.h>

#include <stdint.h>
#include <string.h>

#include "ctlreq.h"
#include "unit.h"

struct frame_case {
  const char *name;
  const char *data;
  size_t len;                   /* 0: strlen (data) */
  enum ctl_frame want;
  size_t line_len;
};

static const struct frame_case frames[] = {
  { "empty", "", 0, CTL_FRAME_PARTIAL, 0 },
  { "no newline yet", "{\"cmd\"", 0, CTL_FRAME_PARTIAL, 0 },
  { "a line", "{}\nxyz", 0, CTL_FRAME_LINE, 2 },
  { "an empty line", "\n{}", 0, CTL_FRAME_LINE, 0 },
  { "NUL before the newline", "{\0}\n", 4, CTL_FRAME_NUL, 0 },
  { "NUL without a newline", "{\0", 2, CTL_FRAME_NUL, 0 },
  { "NUL after the newline is the next line's", "{}\n\0", 4,
    CTL_FRAME_LINE, 2 },
};

/* Frame a buffer of n bytes of 'a', then newline if nl. */
static enum ctl_frame
frame_long (size_t n, bool nl, size_t *line_len)
{
  static char buf[CTL_MAX_LINE + 2];

  memset (buf, 'a', n);
  if (nl)
    buf[n++] = '\n';
  return ctlreq_frame (buf, n, line_len);
}

static void
test_frames (void)
{
  size_t i, n = 0;

  for (i = 0; i < sizeof frames / sizeof frames[0]; ++i) {
    const struct frame_case *f = &frames[i];
    size_t len = f->len ? f->len : strlen (f->data);
    enum ctl_frame got = ctlreq_frame (f->data, len, &n);
    CHECKF (got == f->want, "%s: got %d", f->name, got);
    if (got == CTL_FRAME_LINE)
      CHECKF (n == f->line_len, "%s: line of %zu", f->name, n);
  }
  CHECK (frame_long (CTL_MAX_LINE, false, &n) == CTL_FRAME_PARTIAL);
  CHECK (frame_long (CTL_MAX_LINE, true, &n) == CTL_FRAME_LINE &&
         n == CTL_MAX_LINE);
  CHECK (frame_long (CTL_MAX_LINE + 1, false, &n) == CTL_FRAME_TOO_LONG);
  CHECK (frame_long (CTL_MAX_LINE + 1, true, &n) == CTL_FRAME_TOO_LONG);
}

struct decode_case {
  const char *line;
  enum ctl_cmd cmd;
  int64_t index, hold, repair_from, rate;
  bool flag;                    /* full, repair or done */
  bool restarted;               /* resync: server_restarted */
};

#define DH CTL_DEFAULT_HOLD

static const struct decode_case decodes[] = {
  { "{\"cmd\": \"status\"}", CTL_STATUS, -1, DH, -1, -1, false, false },
  { "{\"cmd\": \"resync\", \"index\": 2}", CTL_RESYNC, 2, DH, -1, -1, false,
    false },
  { "{\"cmd\": \"resync\", \"index\": 2, \"full\": true}", CTL_RESYNC, 2, DH,
    -1, -1, true, false },
  { "{\"cmd\": \"resync\", \"index\": 1, \"server_restarted\": true}",
    CTL_RESYNC, 1, DH, -1, -1, false, true },
  { "{\"cmd\": \"verify\", \"repair\": true, \"repair_from\": null, "
    "\"rate\": 0}", CTL_VERIFY, -1, DH, -1, 0, true, false },
  { "{\"cmd\": \"verify\", \"repair_from\": 1, \"rate\": 9007199254740993}",
    CTL_VERIFY, -1, DH, 1, 9007199254740993, false, false },
  { "{\"cmd\": \"backup-begin\", \"base\": null, \"hold\": 86400}",
    CTL_BACKUP_BEGIN, -1, 86400, -1, -1, false, false },
  { "{\"cmd\": \"backup-end\", \"token\": \"t\", \"result\": \"done\"}",
    CTL_BACKUP_END, -1, DH, -1, -1, true, false },
};

struct refuse_case {
  const char *line;
  const char *error;
};

static const struct refuse_case refusals[] = {
  { "{\"cmd\": \"fail-leg\", \"index\": 2147483648}",
    "fail-leg: \"index\" must be a leg index (an integer from 0)" },
  { "{\"cmd\": \"fail-leg\", \"index\": 99999999999999999999}",
    "invalid request: too big integer near '99999999999999999999' "
    "(column 49)" },
  { "{\"cmd\": \"backup-begin\", \"hold\": 86401}",
    "backup-begin: \"hold\" must be seconds (an integer from 1 to 86400)" },
  { "{\"cmd\": \"resync\", \"index\": 1, \"full\": null}",
    "resync: \"full\" must be true or false" },
  { "{\"cmd\": \"resync\", \"index\": 1, \"server_restarted\": 1}",
    "resync: \"server_restarted\" must be true or false" },
  { "{\"cmd\": \"status\", \"cmd\": \"status\"}",
    "invalid request: duplicate object key near '\"cmd\"' (column 23)" },
  { "{\"cmd\": \"st\\u0000atus\"}",
    "invalid request: \\u0000 is not allowed without JSON_ALLOW_NUL "
    "near '\"st\\u0000atus\"' (column 22)" },
  { "{\"cmd\": \"status\"} {}",
    "invalid request: end of file expected near '{' (column 19)" },
  { "", "invalid request: '[' or '{' expected near end of file (column 0)" },
  { "\"status\"",
    "invalid request: '[' or '{' expected near '\"status\"' (column 8)" },
  { "[{\"cmd\": \"status\"}]", "invalid request: not a JSON object" },
};

/* The boolean a decode row checks for its command. */
static bool
flag_of (const struct ctlreq *r)
{
  switch (r->cmd) {
  case CTL_RESYNC:
    return r->full;
  case CTL_VERIFY:
    return r->repair;
  case CTL_BACKUP_END:
    return r->done;
  default:
    return false;
  }
}

static void
test_decodes (void)
{
  char err[512];
  size_t i;

  for (i = 0; i < sizeof decodes / sizeof decodes[0]; ++i) {
    const struct decode_case *d = &decodes[i];
    struct ctlreq r;

    if (ctlreq_parse (d->line, strlen (d->line), &r, err, sizeof err) == -1) {
      CHECKF (false, "%s: %s", d->line, err);
      continue;
    }
    CHECKF (r.cmd == d->cmd && r.index == d->index && r.hold == d->hold &&
            r.repair_from == d->repair_from && r.rate == d->rate &&
            flag_of (&r) == d->flag &&
            (r.cmd != CTL_RESYNC || r.server_restarted == d->restarted),
            "%s", d->line);
    ctlreq_free (&r);
  }
}

static void
test_refusals (void)
{
  struct ctlreq r;
  char err[512];
  size_t i;

  for (i = 0; i < sizeof refusals / sizeof refusals[0]; ++i) {
    const struct refuse_case *c = &refusals[i];
    int got = ctlreq_parse (c->line, strlen (c->line), &r, err, sizeof err);

    CHECKF (got == -1 && strcmp (err, c->error) == 0, "%s: %s", c->line,
            got == -1 ? err : "decoded");
    CHECK (r.json == NULL);
    if (got == 0)
      ctlreq_free (&r);
  }
  /* Not cut at a NUL: the whole length is looked at. */
  CHECK (ctlreq_parse ("{\"cmd\":\"status\"}\0", 17, &r, err,
                       sizeof err) == -1 &&
         strcmp (err, "request line with a NUL byte") == 0);
}

/* The error message of reply. */
static const char *
reply_error (json_t *reply)
{
  return json_string_value (json_object_get (reply, "error"));
}

static void
test_error_replies (void)
{
  char long_msg[600];
  json_t *r;
  const char *e;

  r = ctl_error_reply ("bad \xff byte, cut \xe2\x82 euro \xe2\x82\xac, "
                       "surrogate \xed\xa0\x80, overlong \xc0\xaf");
  e = reply_error (r);
  CHECK (e && strcmp (e, "bad ? byte, cut ?? euro \xe2\x82\xac, "
                      "surrogate ???, overlong ??") == 0);
  json_decref (r);
  /* Cut at 511 bytes in the middle of a three-byte character. */
  memset (long_msg, 'x', 510);
  strcpy (long_msg + 510, "\xe2\x82\xac");
  r = ctl_error_reply ("%s", long_msg);
  e = reply_error (r);
  CHECK (e && strlen (e) == 511 && e[510] == '?');
  json_decref (r);
}

int
main (void)
{
  test_frames ();
  test_decodes ();
  test_refusals ();
  test_error_replies ();
  return unit_exit ("unit-ctlreq");
}
