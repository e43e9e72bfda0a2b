/* SPDX-License-Identifier: BSD-3-Clause */
/* Control requests as data (see ctlreq.c): framing a line out of what a
 * client sent, decoding it with strict types, and error replies.  Pure:
 * no volume, no socket, so it can be fuzzed and unit-tested alone.
 */

#ifndef REPLICATE_CTLREQ_H
#define REPLICATE_CTLREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The longest request line, newline excluded. */
#define CTL_MAX_LINE 65536

/* A backup hold, in seconds: the default, and the most a client may
 * ask for in backup-begin's "hold".
 */
#define CTL_DEFAULT_HOLD 120
#define CTL_MAX_HOLD 86400

/* What the bytes received of a line are. */
enum ctl_frame {
  CTL_FRAME_PARTIAL,            /* no newline yet, nothing wrong so far */
  CTL_FRAME_LINE,               /* a whole line (*line_len bytes, then '\n') */
  CTL_FRAME_NUL,                /* a NUL byte before the newline */
  CTL_FRAME_TOO_LONG,           /* over CTL_MAX_LINE bytes before it */
};

/* Look at the len bytes at buf, the start of a line.  A line ends at
 * its first '\n'.  *line_len is set for CTL_FRAME_LINE.
 */
extern enum ctl_frame ctlreq_frame (const char *buf, size_t len,
                                    size_t *line_len);

enum ctl_cmd {
  CTL_STATUS,
  CTL_ADD_LEG,
  CTL_REMOVE_LEG,
  CTL_FAIL_LEG,
  CTL_RESYNC,
  CTL_SET,
  CTL_VERIFY,
  CTL_BACKUP_BEGIN,
  CTL_BACKUP_RENEW,
  CTL_BACKUP_END,
};

/* How control.c logs a request with its peer's credentials. */
enum ctl_audit {
  CTL_AUDIT_NONE,               /* reads only (status) */
  CTL_AUDIT_DEBUG,              /* settings, verify, renewing a hold */
  CTL_AUDIT_ALWAYS,             /* membership changes and backups */
};

/* A decoded request.  Every field the command takes is checked for its
 * type; fields it does not take are refused.  Absent optional fields
 * take the values below.
 */
struct ctlreq {
  json_t *json;                 /* the decoded line: owns the strings */
  enum ctl_cmd cmd;
  const char *name;             /* the command's name */
  enum ctl_audit audit;
  int64_t index;                /* "index": a leg index; -1 absent */
  const char *uri;              /* add-leg */
  bool async;                   /* add-leg: an asynchronous leg */
  const char *key, *value;      /* set */
  bool full;                    /* resync, default false */
  bool server_restarted;        /* resync: the operator's word (drain.c) */
  bool stop, repair;            /* verify: "action", "repair" */
  int64_t repair_from, rate;    /* verify: -1 absent or null */
  const char *base;             /* backup-begin, NULL if null or absent */
  int64_t hold;                 /* backup-begin: seconds, CTL_DEFAULT_HOLD */
  const char *token;            /* backup-renew, backup-end */
  bool done;                    /* backup-end: "result" is "done" */
  const char *label;            /* backup-end: "name", or NULL */
};

/* Decode a request line of len bytes (no newline).  Returns 0 with *r
 * filled (free it with ctlreq_free), or -1 with a message for the
 * client in err: the line is not a JSON object, names no known command,
 * lacks a field, has a field of the wrong type or one the command does
 * not take (the message names the field), or holds a NUL byte or more
 * than CTL_MAX_LINE bytes.
 */
extern int ctlreq_parse (const char *line, size_t len, struct ctlreq *r,
                         char *err, size_t errlen);

/* Free what ctlreq_parse allocated (no-op on a zeroed struct). */
extern void ctlreq_free (struct ctlreq *r);

/* A new reply {"ok": false, "error": MSG}.  The message is cut at a
 * character boundary if long, and bytes that are not UTF-8 are
 * replaced, so that the reply can always be encoded.  NULL only when
 * out of memory.
 */
extern json_t *ctl_error_reply (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));

#endif /* REPLICATE_CTLREQ_H */
