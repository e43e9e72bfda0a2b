/* SPDX-License-Identifier: BSD-3-Clause */
/* Rules of the fault-injection test filter: a rule line is words
 * KEY=VALUE separated by whitespace, "#" starts a comment.  Each key
 * has a parser in a table; the matcher resolves range= against the
 * export's size (a bound with a leading "-" counts from its end) and
 * fi_select applies the first-match, skip= and count= semantics.  See
 * faultinject.c for what the phases do.
 */

#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultinject-rules.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof ((a)[0]))

/* Operation names, in enum fi_op bit order. */
static const char *const op_names[] = {
  "write", "zero", "trim", "flush", "read", "extents", "cache",
};

/* Phase names, in enum fi_phase order. */
static const char *const phase_names[] = {
  "refuse", "apply-error", "hold", "drop", "apply-drop", "exit",
  "apply-exit", "torn-exit",
};

/* The errors error= accepts. */
static const struct { const char *name; int value; } errors[] = {
  { "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EINVAL", EINVAL },
  { "EPERM", EPERM }, { "EDQUOT", EDQUOT }, { "EFBIG", EFBIG },
  { "ENOTSUP", ENOTSUP }, { "ESHUTDOWN", ESHUTDOWN }, { "EROFS", EROFS },
};

/* Return the index of NAME in the table NAMES of N entries, or -1. */
static int
lookup (const char *const *names, size_t n, const char *name)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (strcmp (names[i], name) == 0)
      return i;
  return -1;
}

/* Parse a decimal unsigned number, the whole of S. */
static const char *
parse_u64 (const char *s, uint64_t *out)
{
  char *end;
  unsigned long long v;

  if (*s < '0' || *s > '9')
    return "expected a number";
  errno = 0;
  v = strtoull (s, &end, 10);
  if (errno != 0 || *end != '\0')
    return "expected a number";
  *out = v;
  return NULL;
}

/* id=NAME. */
static const char *
parse_id (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  (void) ps;
  if (*v == '\0' || strlen (v) >= FI_ID_MAX)
    return "the id must have 1 to 63 characters";
  strcpy (r->id, v);
  return NULL;
}

/* op=LIST, a comma list of operation names or "any". */
static const char *
parse_op (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  char buf[128], *word, *save;
  int i;

  (void) ps;
  if (strlen (v) >= sizeof buf)
    return "list too long";
  strcpy (buf, v);
  r->ops = 0;
  for (word = strtok_r (buf, ",", &save); word != NULL;
       word = strtok_r (NULL, ",", &save)) {
    if (strcmp (word, "any") == 0) {
      r->ops |= FI_ANY;
      continue;
    }
    i = lookup (op_names, ARRAY_SIZE (op_names), word);
    if (i < 0)
      return "unknown operation";
    r->ops |= 1u << i;
  }
  return r->ops ? NULL : "empty operation list";
}

/* One bound of range=: the LEN bytes at S; empty only if MAY_BE_OPEN. */
static const char *
parse_bound (const char *s, size_t len, bool may_be_open,
             fi_parse_size_fn ps, struct fi_bound *b)
{
  char buf[64];
  int64_t v;

  *b = (struct fi_bound) { 0 };
  if (len == 0) {
    b->open = true;
    return may_be_open ? NULL : "empty START";
  }
  if (s[0] == '-') {
    b->from_end = true;
    s++, len--;
  }
  if (len == 0 || len >= sizeof buf)
    return "bad size";
  memcpy (buf, s, len);
  buf[len] = '\0';
  v = ps (buf);
  if (v < 0)
    return "bad size";
  b->value = v;
  return NULL;
}

/* range=START-END (END exclusive, may be empty). */
static const char *
parse_range (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  const char *dash = strchr (v + (*v == '-'), '-');
  const char *msg;

  if (dash == NULL)
    return "expected START-END";
  msg = parse_bound (v, dash - v, false, ps, &r->start);
  if (msg == NULL)
    msg = parse_bound (dash + 1, strlen (dash + 1), true, ps, &r->end);
  if (msg == NULL && !r->start.from_end && !r->end.from_end &&
      !r->end.open && r->start.value > r->end.value)
    msg = "START is after END";
  return msg;
}

/* fua=yes|no. */
static const char *
parse_fua (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  (void) ps;
  if (strcmp (v, "yes") == 0)
    r->fua = FI_FUA_YES;
  else if (strcmp (v, "no") == 0)
    r->fua = FI_FUA_NO;
  else
    return "expected yes or no";
  return NULL;
}

/* phase=NAME. */
static const char *
parse_phase (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  int i = lookup (phase_names, ARRAY_SIZE (phase_names), v);

  (void) ps;
  if (i < 0)
    return "unknown phase";
  r->phase = i;
  return NULL;
}

/* error=NAME. */
static const char *
parse_error (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  size_t i;

  (void) ps;
  for (i = 0; i < ARRAY_SIZE (errors); i++)
    if (strcmp (errors[i].name, v) == 0) {
      r->error = errors[i].value;
      return NULL;
    }
  return "unknown error name";
}

/* Seconds, fractional allowed, into *secs. */
static const char *
parse_seconds (const char *v, double *secs)
{
  char *end;

  errno = 0;
  *secs = strtod (v, &end);
  if (*v == '\0' || *end != '\0' || errno != 0 || !isfinite (*secs) ||
      *secs < 0 || *secs > 86400)
    return "expected seconds (0 to 86400)";
  return NULL;
}

/* secs=N: how long hold holds. */
static const char *
parse_secs (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  (void) ps;
  return parse_seconds (v, &r->secs);
}

/* delay=N: how long any phase waits before it acts. */
static const char *
parse_delay (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  (void) ps;
  return parse_seconds (v, &r->delay);
}

/* skip=N. */
static const char *
parse_skip (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  (void) ps;
  return parse_u64 (v, &r->skip);
}

/* count=N. */
static const char *
parse_count (struct fi_rule *r, const char *v, fi_parse_size_fn ps)
{
  (void) ps;
  return parse_u64 (v, &r->count);
}

/* The keys and their parsers. */
static const struct {
  const char *key;
  const char *(*parse) (struct fi_rule *, const char *, fi_parse_size_fn);
} keys[] = {
  { "id", parse_id }, { "op", parse_op }, { "range", parse_range },
  { "fua", parse_fua }, { "phase", parse_phase }, { "error", parse_error },
  { "secs", parse_secs }, { "delay", parse_delay }, { "skip", parse_skip },
  { "count", parse_count },
};

/* Parse one KEY=VALUE WORD into R; on error say why in ERR. */
static int
parse_word (char *word, fi_parse_size_fn ps, struct fi_rule *r,
            char *err, size_t errlen)
{
  char *eq = strchr (word, '=');
  const char *msg = "expected KEY=VALUE";
  size_t i;

  if (eq != NULL) {
    *eq = '\0';
    msg = "unknown key";
    for (i = 0; i < ARRAY_SIZE (keys); i++)
      if (strcmp (keys[i].key, word) == 0) {
        msg = keys[i].parse (r, eq + 1, ps);
        break;
      }
    *eq = '=';
  }
  if (msg == NULL)
    return 0;
  snprintf (err, errlen, "word '%s': %s", word, msg);
  return -1;
}

/* Parse a rule line (see faultinject-rules.h). */
int
fi_parse_rule (const char *line, unsigned lineno,
               fi_parse_size_fn parse_size, struct fi_rule *rule,
               char *err, size_t errlen)
{
  char *copy, *hash, *word, *save;
  int words = 0, r = 0;

  copy = strdup (line);
  if (copy == NULL) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  hash = strchr (copy, '#');
  if (hash != NULL)
    *hash = '\0';
  *rule = (struct fi_rule) {
    .ops = FI_ANY, .end = { .open = true }, .secs = 10, .count = 1,
  };
  snprintf (rule->id, sizeof rule->id, "rule%u", lineno);
  for (word = strtok_r (copy, " \t\r\n", &save); word != NULL && r == 0;
       word = strtok_r (NULL, " \t\r\n", &save), words++)
    r = parse_word (word, parse_size, rule, err, errlen);
  free (copy);
  if (r < 0)
    return -1;
  return words > 0;
}

/* Resolve bound B on an export of SIZE bytes. */
static uint64_t
resolve (const struct fi_bound *b, uint64_t size)
{
  if (b->open)
    return size;
  if (b->from_end)
    return b->value < size ? size - b->value : 0;
  return b->value;
}

/* Does RULE match the request (see faultinject-rules.h)? */
bool
fi_rule_matches (const struct fi_rule *rule, unsigned op,
                 uint64_t offset, uint64_t count, bool fua, uint64_t size)
{
  if ((rule->ops & op) == 0)
    return false;
  if ((rule->fua == FI_FUA_YES && !fua) || (rule->fua == FI_FUA_NO && fua))
    return false;
  if (op == FI_FLUSH)
    return true;
  return offset < resolve (&rule->end, size) &&
    offset + count > resolve (&rule->start, size);
}

/* Choose and count the rule that fires (see faultinject-rules.h). */
int
fi_select (struct fi_rule *rules, size_t n, unsigned op,
           uint64_t offset, uint64_t count, bool fua, uint64_t size)
{
  size_t i;

  for (i = 0; i < n; i++) {
    struct fi_rule *r = &rules[i];

    if (!fi_rule_matches (r, op, offset, count, fua, size))
      continue;
    if (r->skipped < r->skip) {
      r->skipped++;
      return -1;
    }
    if (r->count != 0 && r->fired >= r->count)
      continue;
    r->fired++;
    return i;
  }
  return -1;
}

/* The name of operation bit OP. */
const char *
fi_op_name (unsigned op)
{
  size_t i;

  for (i = 0; i < ARRAY_SIZE (op_names); i++)
    if (op == 1u << i)
      return op_names[i];
  return "?";
}

/* The name of PHASE. */
const char *
fi_phase_name (enum fi_phase phase)
{
  return (size_t) phase < ARRAY_SIZE (phase_names) ? phase_names[phase] : "?";
}
