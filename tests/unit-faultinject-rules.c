/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the fault-injection filter's rules (faultinject-rules.c).
 *
 * - A table of lines: each parses to the expected fields, or fails with
 *   an error naming the expected word.
 * - A table of requests matched against parsed rules (op, range with
 *   bounds from the end, fua, flush ignoring the range).
 * - fi_select: first match wins, skip= passes requests (and stops the
 *   search), count= exhausts a rule so that the next one fires.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "faultinject-rules.h"
#include "unit.h"

#define KiB 1024ull
#define MiB (1024 * KiB)
#define SIZE (64 * MiB)                 /* the export of the match table */

/* A size parser like nbdkit_parse_size for plain numbers, K and M. */
static int64_t
test_parse_size (const char *s)
{
  char *end;
  long long v = strtoll (s, &end, 10);

  if (end == s || v < 0)
    return -1;
  if (strcmp (end, "K") == 0)
    return v * KiB;
  if (strcmp (end, "M") == 0)
    return v * MiB;
  return *end == '\0' ? v : -1;
}

struct parse_case {
  const char *line;
  int ret;                      /* fi_parse_rule's result */
  const char *id;               /* or, on error, a word the error names */
  unsigned ops;
  enum fi_phase phase;
  int error;
  uint64_t skip, count;
};

/* A line with no rule, and one whose error names WORD. */
#define NONE(text) { .line = text, .ret = 0 }
#define BAD(text, word) { .line = text, .ret = -1, .id = word }

static const struct parse_case parse_cases[] = {
  NONE (""),
  NONE ("   # only a comment"),
  { "phase=refuse", 1, "rule7", FI_ANY, FI_REFUSE, 0, 0, 1 },
  { "id=a op=write,zero phase=apply-error error=ENOSPC", 1, "a",
    FI_WRITE | FI_ZERO, FI_APPLY_ERROR, ENOSPC, 0, 1 },
  { "id=b op=flush phase=hold secs=0.5 skip=2 count=0 # note", 1, "b",
    FI_FLUSH, FI_HOLD, 0, 2, 0 },
  { "id=c\top=any phase=apply-exit range=-4M-\r\n", 1, "c",
    FI_ANY, FI_APPLY_EXIT, 0, 0, 1 },
  { "id=d phase=drop error=EROFS fua=yes", 1, "d",
    FI_ANY, FI_DROP, EROFS, 0, 1 },
  { "id=e op=write phase=torn-exit range=172K-220K", 1, "e",
    FI_WRITE, FI_TORN_EXIT, 0, 0, 1 },
  BAD ("phase=sleep", "phase=sleep"),
  BAD ("op=write,bogus", "op=write,bogus"),
  BAD ("error=EAGAIN", "error=EAGAIN"),
  BAD ("range=1M", "range=1M"),
  BAD ("range=2M-1M", "range=2M-1M"),
  BAD ("range=x-1M", "range=x-1M"),
  BAD ("range=--", "range=--"),
  BAD ("secs=-1", "secs=-1"),
  BAD ("secs=nan", "secs=nan"),
  BAD ("delay=-1", "delay=-1"),
  BAD ("count=-1", "count=-1"),
  BAD ("skip=3x", "skip=3x"),
  BAD ("fua=maybe", "fua=maybe"),
  BAD ("id=", "id="),
  BAD ("colour=red", "colour=red"),
  BAD ("phase=refuse justaword", "justaword"),
};

/* Check every row of parse_cases. */
static void
test_parse (void)
{
  size_t i;

  for (i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
    const struct parse_case *c = &parse_cases[i];
    struct fi_rule r;
    char err[256] = "";
    int ret = fi_parse_rule (c->line, 7, test_parse_size, &r,
                             err, sizeof err);

    CHECKF (ret == c->ret, "line '%s': %d (%s)", c->line, ret, err);
    if (ret < 0 && c->ret < 0)
      CHECKF (strstr (err, c->id) != NULL, "line '%s': error '%s'",
              c->line, err);
    if (ret <= 0 || c->ret <= 0)
      continue;
    CHECKF (strcmp (r.id, c->id) == 0, "line '%s': id %s", c->line, r.id);
    CHECKF (r.ops == c->ops, "line '%s': ops %#x", c->line, r.ops);
    CHECKF (r.phase == c->phase, "line '%s': phase %d", c->line, r.phase);
    CHECKF (r.error == c->error, "line '%s': error %d", c->line, r.error);
    CHECKF (r.skip == c->skip && r.count == c->count,
            "line '%s': skip %llu count %llu", c->line,
            (unsigned long long) r.skip, (unsigned long long) r.count);
  }
}

struct match_case {
  const char *rule;
  unsigned op;
  uint64_t offset, count;
  bool fua;
  bool match;
};

static const struct match_case match_cases[] = {
  { "phase=refuse", FI_READ, 0, 512, false, true },
  { "op=write", FI_READ, 0, 512, false, false },
  { "op=write,trim", FI_TRIM, 0, 512, false, true },
  { "range=1M-2M", FI_WRITE, MiB - 512, 512, false, false },
  { "range=1M-2M", FI_WRITE, MiB - 512, 513, false, true },
  { "range=1M-2M", FI_WRITE, 2 * MiB - 1, 4096, false, true },
  { "range=1M-2M", FI_WRITE, 2 * MiB, 4096, false, false },
  { "range=1M-2M", FI_FLUSH, 0, 0, false, true },
  { "range=-4M-", FI_WRITE, SIZE - 4 * MiB - 4096, 4096, false, false },
  { "range=-4M-", FI_WRITE, SIZE - 4 * MiB, 4096, false, true },
  { "range=-4M-", FI_WRITE, SIZE - 512, 512, false, true },
  { "range=0--4M", FI_WRITE, SIZE - 4 * MiB, 4096, false, false },
  { "range=0--4M", FI_WRITE, SIZE - 4 * MiB - 1, 4096, false, true },
  { "range=-128M-", FI_WRITE, 0, 512, false, true },
  { "range=32M-", FI_WRITE, SIZE - 512, 512, false, true },
  { "fua=yes", FI_WRITE, 0, 512, false, false },
  { "fua=yes", FI_WRITE, 0, 512, true, true },
  { "fua=no", FI_WRITE, 0, 512, true, false },
  { "fua=no op=flush", FI_FLUSH, 0, 0, false, true },
};

/* Check every row of match_cases. */
static void
test_match (void)
{
  size_t i;

  for (i = 0; i < sizeof match_cases / sizeof match_cases[0]; i++) {
    const struct match_case *c = &match_cases[i];
    struct fi_rule r;
    char err[256] = "";

    CHECKF (fi_parse_rule (c->rule, 1, test_parse_size, &r,
                           err, sizeof err) == 1, "%s: %s", c->rule, err);
    CHECKF (fi_rule_matches (&r, c->op, c->offset, c->count, c->fua,
                             SIZE) == c->match,
            "rule '%s' op %s offset %llu count %llu", c->rule,
            fi_op_name (c->op), (unsigned long long) c->offset,
            (unsigned long long) c->count);
  }
}

/* Parse LINES (NULL-terminated) into RULES; return how many. */
static size_t
parse_all (const char *const *lines, struct fi_rule *rules)
{
  size_t n = 0;
  char err[256];

  for (; *lines; lines++)
    if (fi_parse_rule (*lines, n + 1, test_parse_size, &rules[n],
                       err, sizeof err) == 1)
      n++;
  return n;
}

/* Select for a write at OFFSET; returns the index that fires or -1. */
static int
write_at (struct fi_rule *rules, size_t n, uint64_t offset)
{
  return fi_select (rules, n, FI_WRITE, offset, 4096, false, SIZE);
}

/* skip=, count= and the order of the rules. */
static void
test_select (void)
{
  static const char *const lines[] = {
    "id=a op=write range=0-1M skip=2 count=2",
    "id=b op=write count=0",
    "id=c op=read",
    NULL,
  };
  struct fi_rule rules[3];
  size_t n = parse_all (lines, rules);

  CHECK (n == 3);
  CHECK (write_at (rules, n, 0) == -1);         /* a skips 1 */
  CHECK (write_at (rules, n, 2 * MiB) == 1);    /* b: a does not match */
  CHECK (write_at (rules, n, 0) == -1);         /* a skips 2 */
  CHECK (write_at (rules, n, 0) == 0);          /* a fires 1 */
  CHECK (write_at (rules, n, 0) == 0);          /* a fires 2 */
  CHECK (write_at (rules, n, 0) == 1);          /* a exhausted: b */
  CHECK (write_at (rules, n, 0) == 1);          /* b: unlimited */
  CHECK (fi_select (rules, n, FI_READ, 0, 512, false, SIZE) == 2);
  CHECK (fi_select (rules, n, FI_READ, 0, 512, false, SIZE) == -1);
  CHECK (rules[0].fired == 2 && rules[0].skipped == 2);
  CHECK (strcmp (fi_phase_name (FI_APPLY_DROP), "apply-drop") == 0);
  CHECK (strcmp (fi_op_name (FI_EXTENTS), "extents") == 0);
}

int
main (void)
{
  test_parse ();
  test_match ();
  test_select ();
  return unit_exit ("unit-faultinject-rules");
}
