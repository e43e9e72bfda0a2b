/* SPDX-License-Identifier: BSD-3-Clause */
/* Backups, the controller's side (see backup.c). */

#ifndef REPLICATE_BACKUP_H
#define REPLICATE_BACKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct volume;
struct bitmap;

#define BACKUP_TOKEN_LEN 32     /* hex digits */

/* What backup_begin tells the client. */
struct backup_info {
  char token[BACKUP_TOKEN_LEN + 1];
  const char *source;           /* URI to read from, or NULL */
  int leg;                      /* the held leg, or -1 (live) */
  bool point_in_time;
  const char *why_live;         /* why no leg is held, or NULL */
  /* The chunks written since the base backup, or NULL: unknown. */
  const struct bitmap *changed;
  uint64_t lapses;              /* unix seconds: when the hold lapses */
};

/* Begin a backup for owner (the control connection): hold a leg out
 * as a point-in-time source when the volume can spare one, and start a
 * new changed-block period.  base is the token of the client's newest
 * backup, or NULL.  The backup lapses (ends as failed) hold_seconds
 * from now unless renewed.  Returns 0 with *info filled (valid until
 * the backup ends), or -1 with the reason in err.
 */
extern int backup_begin (struct volume *v, const char *base,
                         unsigned hold_seconds, const void *owner,
                         struct backup_info *info, char *err, size_t errlen);

/* Renew the hold of the backup named token: it lapses as many seconds
 * from now as it was given at its begin.  Returns 0 with the new lapse
 * time (unix seconds) in *lapses, or -1 with the reason in err.
 */
extern int backup_renew (struct volume *v, const char *token,
                         uint64_t *lapses, char *err, size_t errlen);

/* When the running backup lapses (monotonic ns, as now_ns), or 0 if
 * none runs.
 */
extern uint64_t backup_lapse_ns (struct volume *v);

/* End the running backup as failed if its hold has lapsed by now_ns. */
extern void backup_check_lapse (struct volume *v, uint64_t now_ns);

/* End the backup named token: release the held leg (it resyncs what it
 * missed) and, if done, record the token as the base of the next
 * backup.  Returns 0, or -1 with the reason in err.
 */
extern int backup_end (struct volume *v, const char *token, bool done,
                       const char *name, char *err, size_t errlen);

/* The owner's connection is gone: a backup it began counts as failed. */
extern void backup_abandon (struct volume *v, const void *owner);

/* Give the changed-block tracker's metadata slot to a new leg (no free
 * slot is left): the next backup reads everything.  change_lock held.
 * Returns the slot, or -1 if there is no tracker or a backup runs.
 */
extern int backup_yield_tracker_slot (struct volume *v);

/* For status: the running backup, the recorded base. */
struct backup_status {
  bool running;
  char token[BACKUP_TOKEN_LEN + 1];
  int leg;
  bool point_in_time;
  uint64_t since;               /* unix seconds */
  unsigned hold;                /* seconds */
  uint64_t lapses;              /* unix seconds */
  bool have_base;
  char base[BACKUP_TOKEN_LEN + 1];
};
extern void backup_get_status (struct volume *v, struct backup_status *st);

#endif /* REPLICATE_BACKUP_H */
