/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for the control request decoder (ctlreq.c).
 *
 * The input is taken as what a client sent on the control socket: it
 * is cut into lines as the server cuts it (ctlreq_frame) and each line
 * is decoded (ctlreq_parse); what is left without a newline is decoded
 * too.  The sanitizers catch any bad access; beyond that, anything
 * that breaks these rules aborts:
 *  - framing: a line is at most CTL_MAX_LINE bytes and has no NUL;
 *    NUL and too long are said only when true;
 *  - a decoded request is one of the commands, with every field it
 *    needs, each in its range;
 *  - decoding is stable: the decoded object, encoded again and decoded,
 *    gives the same request;
 *  - every error, and any text at all, makes an error reply that can
 *    be encoded (so a client always gets a reply line).
 * Seeds (tests/fuzz-corpus/fuzz-control/): a line of each command, some
 * bad ones, and lines at and past the 65536-byte limit, which is why
 * inputs may grow to 70000 bytes (-max_len).
 *
 * make check-fuzz builds and runs it (tests/check-fuzz.sh); by hand,
 * keeping the products out of the tree:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. \
 *     -Icommon/replication/pure tests/fuzz-control.c \
 *     common/replication/pure/ctlreq.c -ljansson -o /tmp/fuzz-control
 *   cp -r tests/fuzz-corpus/fuzz-control /tmp/corpus-control
 *   /tmp/fuzz-control -max_total_time=60 -max_len=70000 \
 *     -dict=tests/fuzz-corpus/fuzz-control.dict /tmp/corpus-control
 */

#include <config.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ctlreq.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* The fields the server reads from a request of this command. */
static void
check_request (const struct ctlreq *r)
{
  if (r->json == NULL || r->name == NULL || r->cmd > CTL_BACKUP_END ||
      r->audit > CTL_AUDIT_ALWAYS)
    abort ();
  if (r->index < -1 || r->index > INT_MAX || r->repair_from < -1 ||
      r->repair_from > INT_MAX || r->rate < -1 || r->hold < 1 ||
      r->hold > CTL_MAX_HOLD)
    abort ();
  switch (r->cmd) {
  case CTL_ADD_LEG:
    if (r->uri == NULL)
      abort ();
    break;
  case CTL_REMOVE_LEG:
  case CTL_FAIL_LEG:
  case CTL_RESYNC:
    if (r->index < 0)
      abort ();
    break;
  case CTL_SET:
    if (r->key == NULL || r->value == NULL)
      abort ();
    break;
  case CTL_BACKUP_RENEW:
  case CTL_BACKUP_END:
    if (r->token == NULL)
      abort ();
    break;
  case CTL_STATUS:
  case CTL_VERIFY:
  case CTL_BACKUP_BEGIN:
    break;
  }
}

/* Does a string member agree between two decodings? */
static int
same_string (const char *a, const char *b)
{
  return (a == NULL && b == NULL) || (a && b && strcmp (a, b) == 0);
}

/* Are two decoded requests the same request? */
static int
same_request (const struct ctlreq *a, const struct ctlreq *b)
{
  return a->cmd == b->cmd && a->index == b->index && a->full == b->full &&
    a->stop == b->stop && a->repair == b->repair &&
    a->repair_from == b->repair_from && a->rate == b->rate &&
    a->hold == b->hold && a->done == b->done &&
    same_string (a->uri, b->uri) && same_string (a->key, b->key) &&
    same_string (a->value, b->value) && same_string (a->base, b->base) &&
    same_string (a->token, b->token) && same_string (a->label, b->label);
}

/* The error reply the server would send for msg can be encoded. */
static void
check_error_reply (const char *msg)
{
  json_t *reply = ctl_error_reply ("%s", msg);
  char *out;

  if (reply == NULL)
    abort ();
  out = json_dumps (reply, JSON_COMPACT);
  if (out == NULL)
    abort ();
  free (out);
  json_decref (reply);
}

/* Decode one line and check the result. */
static void
decode_line (const char *line, size_t len)
{
  struct ctlreq r, again;
  char err[512], err2[512];
  char *text;

  if (ctlreq_parse (line, len, &r, err, sizeof err) == -1) {
    if (r.json != NULL)
      abort ();
    check_error_reply (err);
    return;
  }
  check_request (&r);
  text = json_dumps (r.json, JSON_COMPACT);
  if (text == NULL)
    abort ();
  if (ctlreq_parse (text, strlen (text), &again, err2, sizeof err2) == -1 ||
      !same_request (&r, &again))
    abort ();
  ctlreq_free (&again);
  ctlreq_free (&r);
  free (text);
}

/* How many of the size bytes at buf come before the first newline
 * (all of them if there is none).
 */
static size_t
before_newline (const char *buf, size_t size)
{
  const char *nl = memchr (buf, '\n', size);

  return nl ? (size_t) (nl - buf) : size;
}

/* Cut data into lines as the server does, and decode each. */
int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const char *buf = (const char *) data;
  char *copy;
  size_t n;

  for (;;) {
    switch (ctlreq_frame (buf, size, &n)) {
    case CTL_FRAME_LINE:
      if (n > CTL_MAX_LINE || n >= size || buf[n] != '\n' ||
          memchr (buf, '\0', n) || memchr (buf, '\n', n))
        abort ();
      decode_line (buf, n);
      buf += n + 1;
      size -= n + 1;
      continue;
    case CTL_FRAME_PARTIAL:
      if (size > CTL_MAX_LINE || memchr (buf, '\0', size) ||
          memchr (buf, '\n', size))
        abort ();
      decode_line (buf, size);
      break;
    case CTL_FRAME_NUL:
      if (memchr (buf, '\0', before_newline (buf, size)) == NULL)
        abort ();
      break;
    case CTL_FRAME_TOO_LONG:
      if (size <= CTL_MAX_LINE || memchr (buf, '\n', CTL_MAX_LINE + 1))
        abort ();
      break;
    }
    break;
  }
  /* Any text at all (up to its first NUL) makes an encodable reply. */
  copy = strndup ((const char *) data, size);
  if (copy == NULL)
    abort ();
  check_error_reply (copy);
  free (copy);
  return 0;
}
