/* SPDX-License-Identifier: BSD-3-Clause */
/* Control requests as data: framing, strict decoding, error replies.
 *
 * Framing.  A request is the bytes up to a newline.  A NUL byte in
 * them, or more than CTL_MAX_LINE of them, ends the connection (after
 * an error reply): such a client is not speaking the protocol, and
 * waiting for its newline would only hold a buffer.  Both are seen as
 * soon as the bytes arrive, newline or not.
 *
 * Decoding.  The line must be one JSON object (duplicate keys refused)
 * whose "cmd" is a known command.  Each command lists the fields it
 * takes with their types (the table below); a field of another type is
 * an error naming it, never read as false or absent ("full": "yes" is
 * refused, not taken as false), and so is a field the command does not
 * take (a misspelt "ful" would otherwise silently mean false).
 *
 * Invariants of a decoded request: cmd is one of enum ctl_cmd; every
 * required field is present with its type; strings are valid UTF-8
 * without NUL (jansson checks both); indexes, rates and hold are in
 * their ranges (a leg index is checked against the volume later).
 *
 * No locks, no state: ctlreq_parse is a function of its input.
 */

#include <config.h>

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ctlreq.h"

/* The types a field may have. */
enum kind {
  K_STRING,                     /* a string */
  K_STRING_OR_NULL,             /* a string or null (NULL) */
  K_BOOL,                       /* true or false */
  K_INDEX,                      /* an integer from 0 to INT_MAX */
  K_INDEX_OR_NULL,              /* the same or null (-1) */
  K_RATE_OR_NULL,               /* bytes per second from 0, or null (-1) */
  K_SECONDS,                    /* 1 to CTL_MAX_HOLD */
  K_WORD,                       /* one of two words: the second sets true */
};

#define STRING_(x) #x
#define STRING(x) STRING_ (x)

/* What a client is told a field of each kind must be. */
static const char *const kind_wanted[] = {
  [K_STRING] = "a string",
  [K_STRING_OR_NULL] = "a string or null",
  [K_BOOL] = "true or false",
  [K_INDEX] = "a leg index (an integer from 0)",
  [K_INDEX_OR_NULL] = "a leg index (an integer from 0) or null",
  [K_RATE_OR_NULL] = "bytes per second (an integer from 0) or null",
  [K_SECONDS] = "seconds (an integer from 1 to " STRING (CTL_MAX_HOLD) ")",
  [K_WORD] = NULL,              /* names its words */
};

/* The range of the integer kinds. */
static const struct {
  json_int_t lo, hi;
} kind_range[] = {
  [K_INDEX] = { 0, INT_MAX },
  [K_INDEX_OR_NULL] = { 0, INT_MAX },
  [K_RATE_OR_NULL] = { 0, INT64_MAX },
  [K_SECONDS] = { 1, CTL_MAX_HOLD },
};

struct field {
  const char *name;
  enum kind kind;
  bool required;
  size_t offset;                /* of its member in struct ctlreq */
  const char *words[2];         /* K_WORD: false, true */
};

#define MAX_FIELDS 4

struct command {
  const char *name;
  enum ctl_cmd cmd;
  enum ctl_audit audit;
  struct field fields[MAX_FIELDS + 1];   /* ended by a NULL name */
};

#define FIELD(name, kind, required, member) \
  { name, kind, required, offsetof (struct ctlreq, member), { NULL, NULL } }
#define WORD(name, required, member, no, yes) \
  { name, K_WORD, required, offsetof (struct ctlreq, member), { no, yes } }

static const struct command commands[] = {
  { "status", CTL_STATUS, CTL_AUDIT_NONE, { { NULL } } },
  { "add-leg", CTL_ADD_LEG, CTL_AUDIT_ALWAYS,
    { FIELD ("uri", K_STRING, true, uri),
      FIELD ("async", K_BOOL, false, async) } },
  { "remove-leg", CTL_REMOVE_LEG, CTL_AUDIT_ALWAYS,
    { FIELD ("index", K_INDEX, true, index) } },
  { "fail-leg", CTL_FAIL_LEG, CTL_AUDIT_ALWAYS,
    { FIELD ("index", K_INDEX, true, index) } },
  { "resync", CTL_RESYNC, CTL_AUDIT_ALWAYS,
    { FIELD ("index", K_INDEX, true, index),
      FIELD ("full", K_BOOL, false, full),
      FIELD ("server_restarted", K_BOOL, false, server_restarted) } },
  { "set", CTL_SET, CTL_AUDIT_DEBUG,
    { FIELD ("key", K_STRING, true, key),
      FIELD ("value", K_STRING, true, value) } },
  { "verify", CTL_VERIFY, CTL_AUDIT_DEBUG,
    { WORD ("action", false, stop, "start", "stop"),
      FIELD ("repair", K_BOOL, false, repair),
      FIELD ("repair_from", K_INDEX_OR_NULL, false, repair_from),
      FIELD ("rate", K_RATE_OR_NULL, false, rate) } },
  { "backup-begin", CTL_BACKUP_BEGIN, CTL_AUDIT_ALWAYS,
    { FIELD ("base", K_STRING_OR_NULL, false, base),
      FIELD ("hold", K_SECONDS, false, hold) } },
  { "backup-renew", CTL_BACKUP_RENEW, CTL_AUDIT_DEBUG,
    { FIELD ("token", K_STRING, true, token) } },
  { "backup-end", CTL_BACKUP_END, CTL_AUDIT_ALWAYS,
    { FIELD ("token", K_STRING, true, token),
      WORD ("result", true, done, "failed", "done"),
      FIELD ("name", K_STRING_OR_NULL, false, label) } },
};

/* Look at the start of a line (see ctlreq.h). */
enum ctl_frame
ctlreq_frame (const char *buf, size_t len, size_t *line_len)
{
  size_t n = len > CTL_MAX_LINE ? CTL_MAX_LINE + 1 : len;
  const char *nl = memchr (buf, '\n', n);
  size_t upto = nl ? (size_t) (nl - buf) : n;

  if (memchr (buf, '\0', upto) != NULL)
    return CTL_FRAME_NUL;
  if (nl) {
    *line_len = upto;
    return CTL_FRAME_LINE;
  }
  return n > CTL_MAX_LINE ? CTL_FRAME_TOO_LONG : CTL_FRAME_PARTIAL;
}

/* The length of the valid UTF-8 sequence at p (len bytes left), or 0
 * if it is not one (bad lead or continuation byte, overlong form,
 * surrogate, above U+10FFFF, cut short).
 */
static size_t
utf8_sequence (const unsigned char *p, size_t len)
{
  size_t n, i;
  unsigned long c;

  if (p[0] < 0x80)
    return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) {
    n = 2;
    c = p[0] & 0x1f;
  }
  else if (p[0] >= 0xe0 && p[0] <= 0xef) {
    n = 3;
    c = p[0] & 0x0f;
  }
  else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
    n = 4;
    c = p[0] & 0x07;
  }
  else
    return 0;
  if (len < n)
    return 0;
  for (i = 1; i < n; ++i) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    c = c << 6 | (p[i] & 0x3f);
  }
  if ((n == 3 && c < 0x800) || (n == 4 && c < 0x10000) || c > 0x10ffff ||
      (c >= 0xd800 && c <= 0xdfff))
    return 0;
  return n;
}

/* Replace, in place, every byte of s that does not start or continue a
 * valid UTF-8 sequence with '?'.
 */
static void
make_utf8 (char *s)
{
  unsigned char *p = (unsigned char *) s;
  size_t len = strlen (s), n;

  while (len > 0) {
    n = utf8_sequence (p, len);
    if (n == 0) {
      *p = '?';
      n = 1;
    }
    p += n;
    len -= n;
  }
}

/* An error reply (see ctlreq.h). */
json_t *
ctl_error_reply (const char *fs, ...)
{
  char msg[512];
  va_list ap;

  va_start (ap, fs);
  vsnprintf (msg, sizeof msg, fs, ap);
  va_end (ap);
  make_utf8 (msg);
  return json_pack ("{s:b, s:s}", "ok", 0, "error", msg);
}

/* Store the value j of field f into r.  Returns -1 if it has the
 * wrong type.
 */
static int
take_value (const struct field *f, const json_t *j, struct ctlreq *r)
{
  char *member = (char *) r + f->offset;
  const char *s;

  switch (f->kind) {
  case K_STRING_OR_NULL:
    if (json_is_null (j)) {
      *(const char **) member = NULL;
      return 0;
    }
    /* fallthrough */
  case K_STRING:
    if (!json_is_string (j))
      return -1;
    *(const char **) member = json_string_value (j);
    return 0;
  case K_BOOL:
    if (!json_is_boolean (j))
      return -1;
    *(bool *) member = json_is_true (j);
    return 0;
  case K_INDEX_OR_NULL:
  case K_RATE_OR_NULL:
    if (json_is_null (j)) {
      *(int64_t *) member = -1;
      return 0;
    }
    /* fallthrough */
  case K_INDEX:
  case K_SECONDS:
    if (!json_is_integer (j) ||
        json_integer_value (j) < kind_range[f->kind].lo ||
        json_integer_value (j) > kind_range[f->kind].hi)
      return -1;
    *(int64_t *) member = json_integer_value (j);
    return 0;
  case K_WORD:
    s = json_string_value (j);
    if (s == NULL || (strcmp (s, f->words[0]) != 0 &&
                      strcmp (s, f->words[1]) != 0))
      return -1;
    *(bool *) member = strcmp (s, f->words[1]) == 0;
    return 0;
  }
  return -1;
}

/* The field of c named key, or NULL. */
static const struct field *
find_field (const struct command *c, const char *key)
{
  const struct field *f;

  for (f = c->fields; f->name; ++f)
    if (strcmp (f->name, key) == 0)
      return f;
  return NULL;
}

/* Say what field f must be. */
static void
wrong_type (const struct command *c, const struct field *f,
            char *err, size_t errlen)
{
  if (f->kind == K_WORD)
    snprintf (err, errlen, "%s: \"%s\" must be \"%s\" or \"%s\"", c->name,
              f->name, f->words[0], f->words[1]);
  else
    snprintf (err, errlen, "%s: \"%s\" must be %s", c->name, f->name,
              kind_wanted[f->kind]);
}

/* Check and take the fields of request object o for command c. */
static int
take_fields (const struct command *c, json_t *o, struct ctlreq *r,
             char *err, size_t errlen)
{
  const struct field *f;
  const char *key;
  json_t *j;

  json_object_foreach (o, key, j) {
    if (strcmp (key, "cmd") == 0)
      continue;
    f = find_field (c, key);
    if (f == NULL) {
      snprintf (err, errlen, "%s: unknown field \"%.100s\"", c->name, key);
      return -1;
    }
    if (take_value (f, j, r) == -1) {
      wrong_type (c, f, err, errlen);
      return -1;
    }
  }
  for (f = c->fields; f->name; ++f)
    if (f->required && json_object_get (o, f->name) == NULL) {
      snprintf (err, errlen, "%s: missing \"%s\"", c->name, f->name);
      return -1;
    }
  return 0;
}

/* The command named by o's "cmd", or NULL with err set. */
static const struct command *
find_command (json_t *o, char *err, size_t errlen)
{
  json_t *j = json_object_get (o, "cmd");
  const char *name = json_string_value (j);
  size_t i;

  if (j == NULL) {
    snprintf (err, errlen, "missing \"cmd\"");
    return NULL;
  }
  if (name == NULL) {
    snprintf (err, errlen, "\"cmd\" must be a string");
    return NULL;
  }
  for (i = 0; i < sizeof commands / sizeof commands[0]; ++i)
    if (strcmp (name, commands[i].name) == 0)
      return &commands[i];
  snprintf (err, errlen, "unknown command \"%.100s\"", name);
  return NULL;
}

/* Decode a request line (see ctlreq.h). */
int
ctlreq_parse (const char *line, size_t len, struct ctlreq *r,
              char *err, size_t errlen)
{
  const struct command *c;
  json_error_t jerr;

  *r = (struct ctlreq) { .index = -1, .repair_from = -1, .rate = -1,
                         .hold = CTL_DEFAULT_HOLD };
  if (len > CTL_MAX_LINE) {
    snprintf (err, errlen, "request line longer than %d bytes",
              CTL_MAX_LINE);
    return -1;
  }
  if (memchr (line, '\0', len) != NULL) {
    snprintf (err, errlen, "request line with a NUL byte");
    return -1;
  }
  r->json = json_loadb (line, len, JSON_REJECT_DUPLICATES, &jerr);
  if (r->json == NULL) {
    snprintf (err, errlen, "invalid request: %s (column %d)", jerr.text,
              jerr.column);
    return -1;
  }
  if (!json_is_object (r->json)) {
    snprintf (err, errlen, "invalid request: not a JSON object");
    ctlreq_free (r);
    return -1;
  }
  c = find_command (r->json, err, errlen);
  if (c == NULL || take_fields (c, r->json, r, err, errlen) == -1) {
    ctlreq_free (r);
    return -1;
  }
  r->cmd = c->cmd;
  r->name = c->name;
  r->audit = c->audit;
  return 0;
}

/* Free a decoded request (see ctlreq.h). */
void
ctlreq_free (struct ctlreq *r)
{
  json_decref (r->json);
  r->json = NULL;
}
