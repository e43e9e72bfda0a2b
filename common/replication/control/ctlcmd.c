/* SPDX-License-Identifier: BSD-3-Clause */
/* The control commands: a decoded request (ctlreq.c) answered against
 * the volume (DESIGN.md section 9, nbdrep(1) CONTROL PROTOCOL).
 *
 * Only the control thread calls ctlcmd_answer, one request at a time:
 * adding legs and the backup functions rely on it.  A command that
 * changes membership may take as long as a leg timeout; the control
 * thread serves nobody meanwhile, but loses no client (control.c).
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "state.h"
#include "member.h"
#include "monitor.h"
#include "control.h"
#include "ctlreq.h"
#include "admin.h"
#include "verify.h"
#include "backup.h"
#include "random.h"
#include "cleanup.h"

/* The leg named by the request's "index", or NULL with *reply set. */
static struct leg *
leg_arg (struct volume *v, const struct ctlreq *r, json_t **reply)
{
  if ((uint64_t) r->index < v->nr_legs)
    return &v->legs[r->index];
  *reply = ctl_error_reply ("no leg %" PRIi64 " (the volume has %zu legs)",
                            r->index, (size_t) v->nr_legs);
  return NULL;
}

/* The success reply, or the error in err. */
static json_t *
result (int r, const char *err)
{
  return r == -1 ? ctl_error_reply ("%s", err)
    : json_pack ("{s:b}", "ok", 1);
}

/* The fewest other legs that must stay uptodate when the operator
 * takes an uptodate leg out: one (else the volume fails), and quorum
 * (else it turns read-only).
 */
static unsigned
keep_uptodate (const struct volume *v)
{
  return v->quorum > 1 ? v->quorum : 1;
}

/* Taking the uptodate leg l out (failing it, rebuilding it) would fail
 * the volume, or turn it read-only: the refusal, else NULL.  what is
 * what would take it out ("failing", "rebuilding").
 */
static json_t *
uptodate_refusal (struct volume *v, struct leg *l, const char *what)
{
  uint16_t up = MB_UPTODATE (membership_load (v)) & ~(1u << l->index);

  if (up == 0)
    return ctl_error_reply ("leg %u is the last uptodate leg: %s it "
                            "would fail the volume", l->index, what);
  if ((unsigned) __builtin_popcount (up) < keep_uptodate (v))
    return ctl_error_reply ("%s leg %u would leave fewer uptodate legs "
                            "than quorum (the volume would turn read-only)",
                            what, l->index);
  return NULL;
}

/* Fail the uptodate or syncing leg l for the operator (what: "failing",
 * "rebuilding"), unless that takes out what uptodate_refusal protects.
 * The check is made again as the leg is failed (member.c), for another
 * leg may have failed since the first.  Returns the refusal, else NULL.
 */
static json_t *
fail_for_operator (struct volume *v, struct leg *l, const char *what,
                   const char *reason)
{
  json_t *reply;

  if (atomic_load (&l->state) == LEG_UPTODATE &&
      (reply = uptodate_refusal (v, l, what)))
    return reply;
  admin_refusal_pause (what);
  if (member_fail_leg_keeping (v, l, keep_uptodate (v), reason))
    return NULL;
  reply = uptodate_refusal (v, l, what);
  return reply ? reply
    : ctl_error_reply ("%s leg %u refused: another leg failed meanwhile "
                       "(try again)", what, l->index);
}

/* fail-leg: take a leg out for maintenance (it is reconnected and
 * resynced by the monitor as after any failure).
 */
static json_t *
cmd_fail_leg (struct volume *v, const struct ctlreq *r)
{
  json_t *reply = NULL;
  struct leg *l = leg_arg (v, r, &reply);
  enum leg_state st;

  if (l == NULL)
    return reply;
  st = atomic_load (&l->state);
  if (st != LEG_UPTODATE && st != LEG_SYNCING)
    return ctl_error_reply ("leg %u is %s, not uptodate or syncing",
                            l->index, state_leg_name (st));
  if ((reply = fail_for_operator (v, l, "failing", "failed by the operator")))
    return reply;
  return json_pack ("{s:b}", "ok", 1);
}

/* Was the leg, failed, last refused for a generation the volume never
 * had (monitor.c)?  If so, why gets the reason it was given.
 */
static bool
refused_as_split_brain (struct volume *v, struct leg *l, char *why,
                        size_t len)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  if (atomic_load (&l->state) != LEG_FAILED || !l->refused ||
      !l->split_brain)
    return false;
  snprintf (why, len, "%s", l->last_error);
  return true;
}

/* resync: restart the resync of a leg that is not uptodate (full if
 * asked), by failing it so the monitor takes it from the top now.
 * With server_restarted the operator says that the leg's server has
 * been restarted or is gone: the aborted connections it was waited for
 * on are forgotten (drain.c).  A leg refused as a split brain is
 * answered with an error: judged again, it would be refused again.
 */
static json_t *
cmd_resync (struct volume *v, const struct ctlreq *r)
{
  json_t *reply = NULL;
  struct leg *l = leg_arg (v, r, &reply);
  enum leg_state st;
  char why[256];
  bool was_full;

  if (l == NULL)
    return reply;
  st = atomic_load (&l->state);
  if (st == LEG_UPTODATE && !r->full)
    return ctl_error_reply ("leg %u is uptodate: nothing to resync (ask for "
                            "a full resync to rebuild it anyway)", l->index);
  if (st == LEG_REMOVED)
    return ctl_error_reply ("leg %u is removed", l->index);
  if (l->held)
    return ctl_error_reply ("leg %u is the source of a running backup: it "
                            "resyncs when the backup ends", l->index);
  if (refused_as_split_brain (v, l, why, sizeof why))
    return ctl_error_reply ("leg %u was refused as a split brain (%s): it "
                            "may hold the only copy of writes this volume "
                            "lacks, and a resync, full or not, judges it "
                            "the same way again; to rebuild it from the "
                            "volume, nbdrep remove it and nbdrep add its "
                            "URI", l->index, why);
  if (r->full && admin_may_hold_newest (v, l))
    return ctl_error_reply ("leg %u may hold the newest data (no leg is "
                            "uptodate, and it is a member of the last "
                            "recorded generation): a full resync has no "
                            "source now; ask again once another leg is "
                            "uptodate", l->index);
  {
    /* Before the leg is failed: the monitor may judge it at once. */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    was_full = l->force_full;
    l->force_full |= r->full;
  }
  if (st == LEG_UPTODATE || st == LEG_SYNCING) {
    reply = fail_for_operator (v, l, "rebuilding",
                               "resync requested by the operator");
    if (reply) {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      l->force_full = was_full;
      return reply;
    }
  }
  else if (st == LEG_STALE && r->full && !l->async)
    /* Its resync may be starting, incremental: take it from the top. */
    admin_restart_stale (v, l, "full resync requested by the operator");
  if (r->server_restarted)
    nbdkit_debug ("leg %u: its server was restarted, says the operator: "
                  "%zu old connection(s) no longer waited for", l->index,
                  monitor_forget_old_connections (v, l));
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    l->next_attempt_ns = 0;
    l->backoff = 0;
    pthread_cond_broadcast (&v->monitor_cond);
  }
  return json_pack ("{s:b}", "ok", 1);
}

/* add-leg: a new leg (asynchronous if asked), synced fully. */
static json_t *
cmd_add_leg (struct volume *v, const struct ctlreq *r)
{
  char err[1024];
  int i = admin_add_leg (v, r->uri, r->async, err, sizeof err);

  if (i == -1)
    return ctl_error_reply ("%s", err);
  return json_pack ("{s:b, s:i}", "ok", 1, "index", i);
}

/* remove-leg: take a leg out of the volume for good. */
static json_t *
cmd_remove_leg (struct volume *v, const struct ctlreq *r)
{
  json_t *reply = NULL;
  struct leg *l = leg_arg (v, r, &reply);
  char err[512];

  if (l == NULL)
    return reply;
  return result (admin_remove_leg (v, l->index, err, sizeof err), err);
}

/* set: change a rate. */
static json_t *
cmd_set (struct volume *v, const struct ctlreq *r)
{
  char err[512];

  return result (admin_set (v, r->key, r->value, err, sizeof err), err);
}

/* verify: start or stop. */
static json_t *
cmd_verify (struct volume *v, const struct ctlreq *r)
{
  char err[512];

  if (r->stop)
    return result (verify_stop (v, err, sizeof err), err);
  return result (verify_start (v, r->repair, (int) r->repair_from, r->rate,
                               err, sizeof err), err);
}

/* The chunks set in b as merged [offset, length] byte ranges, clipped
 * to the volume.
 */
static json_t *
ranges_json (struct volume *v, const struct bitmap *b)
{
  json_t *a = json_array ();
  uint64_t first = bitmap_next_set (b, 0), last;

  while (a && first < b->nr_bits) {
    uint64_t off = first * v->cfg.chunk, end;
    for (last = first; last + 1 < b->nr_bits && bitmap_test (b, last + 1);
         last++)
      ;
    end = (last + 1) * v->cfg.chunk;
    if (end > v->size)
      end = v->size;
    if (off < end)
      json_array_append_new (a, json_pack ("[I, I]", (json_int_t) off,
                                           (json_int_t) (end - off)));
    first = bitmap_next_set (b, last + 1);
  }
  return a;
}

/* backup-begin: hold a leg for a backup (backup.c), for owner. */
static json_t *
cmd_backup_begin (struct volume *v, const struct ctlreq *r,
                  const void *owner)
{
  struct backup_info info;
  char err[512], uuid[37];

  if (backup_begin (v, r->base, (unsigned) r->hold, owner, &info,
                    err, sizeof err) == -1)
    return ctl_error_reply ("%s", err);
  if (v->metadata)
    uuid_format (v->sb.volume_uuid, uuid);
  return json_pack ("{s:b, s:s, s:s?, s:o, s:s, s:s?, s:s?, s:I, s:I, s:o, "
                    "s:I, s:I}",
                    "ok", 1, "token", info.token, "source", info.source,
                    "leg", info.leg >= 0 ? json_integer (info.leg)
                    : json_null (),
                    "consistency", info.point_in_time ? "point-in-time"
                    : "live",
                    "why_live", info.why_live,
                    "volume", v->metadata ? uuid : NULL,
                    "size", (json_int_t) v->size,
                    "chunk", (json_int_t) v->cfg.chunk,
                    "changed", info.changed ? ranges_json (v, info.changed)
                    : json_null (),
                    "hold", (json_int_t) r->hold,
                    "lapses", (json_int_t) info.lapses);
}

/* backup-renew: the hold of the running backup starts again. */
static json_t *
cmd_backup_renew (struct volume *v, const struct ctlreq *r)
{
  uint64_t lapses;
  char err[512];

  if (backup_renew (v, r->token, &lapses, err, sizeof err) == -1)
    return ctl_error_reply ("%s", err);
  return json_pack ("{s:b, s:I}", "ok", 1, "lapses", (json_int_t) lapses);
}

/* backup-end: the backup is done or failed. */
static json_t *
cmd_backup_end (struct volume *v, const struct ctlreq *r)
{
  char err[512];

  return result (backup_end (v, r->token, r->done, r->label,
                             err, sizeof err), err);
}

/* Answer a request (see control.h). */
json_t *
ctlcmd_answer (struct volume *v, const struct ctlreq *r, const void *owner)
{
  switch (r->cmd) {
  case CTL_STATUS:
    return status_json (v);
  case CTL_ADD_LEG:
    return cmd_add_leg (v, r);
  case CTL_REMOVE_LEG:
    return cmd_remove_leg (v, r);
  case CTL_FAIL_LEG:
    return cmd_fail_leg (v, r);
  case CTL_RESYNC:
    return cmd_resync (v, r);
  case CTL_SET:
    return cmd_set (v, r);
  case CTL_VERIFY:
    return cmd_verify (v, r);
  case CTL_BACKUP_BEGIN:
    return cmd_backup_begin (v, r, owner);
  case CTL_BACKUP_RENEW:
    return cmd_backup_renew (v, r);
  case CTL_BACKUP_END:
    return cmd_backup_end (v, r);
  }
  return ctl_error_reply ("unknown command");
}
