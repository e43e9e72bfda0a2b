/* SPDX-License-Identifier: BSD-3-Clause */
/* Operator actions on a running volume: add a leg, remove a leg, change
 * rates.  (Failing a leg for maintenance is member_fail_leg; resync and
 * verify have their own files.)
 *
 * Adding: the new leg takes the next index and starts failed with no
 * delay, so the monitor connects it at once and judges it like any
 * returning leg (blank: full sync as a new member; a former leg of this
 * volume: resync; another volume: refused).  Indexes never change while
 * the controller runs: a removed leg keeps its index, in state removed.
 *
 * Removing: refused if it would leave no uptodate leg or fewer than
 * quorum.  The leg's resync (if any) is stopped, it leaves the
 * membership, its metadata slot (if known: see below) is freed and the
 * generation bumped so the survivors record it.  Its own metadata is
 * left alone: if it comes back (on a command line, or with add) it
 * joins as a new member.  An asynchronous leg's sender and poller stop,
 * and its queue's ring is let go (async_retire).
 *
 * A leg removed before its superblock was ever read (unreachable since
 * the controller started: after a failover, say) has no slot known to
 * free, while one slot still carries its UUID: added back, it would be
 * judged by that slot (a split brain after a failover).  The removal
 * is the operator's consent to rebuild the storage at that URI, so the
 * add of the same URI frees the slot its superblock claims, if no
 * present leg holds it and every leg of the volume has been reached
 * (one that has not may own it: its storage could be what now answers
 * at that URI), as the removal would have, and judges it again as a new
 * member (slot_of_removed).  Only in memory, for this run.
 * Not added back, such a slot goes to a new leg once none is free
 * (slots.c).
 *
 * Neither is remembered across a restart: the controller's command line
 * is the configuration (put the leg on it, or take it off).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "async.h"
#include "state.h"
#include "drain.h"
#include "leg.h"
#include "poller.h"
#include "member.h"
#include "monitor.h"
#include "admin.h"
#include "metaio.h"
#include "resync.h"
#include "slots.h"
#include "cleanup.h"

/* Check that uri is a new leg.  v->lock held.  Returns -1 with err. */
static int
check_new_uri (struct volume *v, const char *uri, char *err, size_t errlen)
{
  size_t i;

  if (config_check_uri (uri, err, errlen) == -1)
    return -1;
  if (v->nr_legs >= MAX_LEGS) {
    snprintf (err, errlen, "the volume has the maximum of %d legs",
              MAX_LEGS);
    return -1;
  }
  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].uri && atomic_load (&v->legs[i].state) != LEG_REMOVED &&
        config_same_leg (v->legs[i].uri, uri)) {
      snprintf (err, errlen, "leg %zu (%s) is the same leg", i,
                v->legs[i].uri);
      return -1;
    }
  return 0;
}

/* Is a metadata slot free for a new member (the changed-block
 * tracker's counts, unless a backup runs: backup.c; so does an
 * orphaned one: slots.c)?  If not, err says why.
 */
static bool
free_slot_exists (struct volume *v, char *err, size_t errlen)
{
  uint32_t flags;
  unsigned s;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);

  for (s = 0; s < v->cfg.max_legs; ++s) {
    flags = v->sb.slots[s].flags;
    if (!(flags & SLOT_ASSIGNED) ||
        ((flags & SLOT_TRACKER) && v->backup == NULL))
      return true;
  }
  if (slots_find_orphan (v) >= 0)
    return true;
  slots_explain_none (v, err, errlen);
  return false;
}

/* Make a leg being added asynchronous: its queue and sender, before
 * the leg is counted.  Returns 0, or -1 with the reason in err.
 */
static int
make_added_async (struct volume *v, struct leg *l, char *err, size_t errlen)
{
  if (!v->metadata) {
    snprintf (err, errlen, "an asynchronous leg needs metadata=internal");
    return -1;
  }
  if (async_make_leg (v, l) == -1 || poller_start (l->own_poller) == -1 ||
      async_start (l->aq) == -1) {
    snprintf (err, errlen, "cannot start its asynchronous queue");
    return -1;
  }
  return 0;
}

/* The removed leg of uri whose slot was not known when it was removed
 * (retire_leg), or NULL.  v->lock held.
 */
static struct leg *
removed_slot_unknown (struct volume *v, const char *uri)
{
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].slot_unknown && v->legs[i].uri &&
        atomic_load (&v->legs[i].state) == LEG_REMOVED &&
        config_same_leg (v->legs[i].uri, uri))
      return &v->legs[i];
  return NULL;
}

/* The leg removed from l's URI before its slot was known (see the note
 * at the top), if the slot l (being added, just examined) owns is that
 * leg's and no other leg holds it, else NULL.  change_lock held.
 */
static struct leg *
removed_owner_of_slot (struct volume *v, struct leg *l)
{
  struct leg *r;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  if (l->slot < 0 || (r = removed_slot_unknown (v, l->uri)) == NULL ||
      !slots_orphaned (v, l->slot, l))
    return NULL;
  return r;
}

/* The slot of r, removed from l's URI, is free now: l owns none, and
 * that removal is settled.  change_lock held.
 */
static void
forget_slot_of_removed (struct volume *v, struct leg *r, struct leg *l)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  r->slot_unknown = false;
  l->slot = -1;
  memset (l->uuid, 0, sizeof l->uuid);
}

/* Free the slot of a removed leg that l, being added, owns (see the
 * note at the top; slots_release records it).  Returns true if it did:
 * l is to be examined again (as a new member now).
 */
static bool
slot_of_removed (struct volume *v, struct leg *l)
{
  bool freed = false;
  struct leg *r;
  int s = l->slot;

  member_change_begin (v);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    r = removed_owner_of_slot (v, l);
    if (r != NULL &&
        slots_release (v, s, "the slot of a leg removed unexamined, "
                       "added back") == 0) {
      forget_slot_of_removed (v, r, l);
      freed = true;
    }
  }
  member_change_end (v);
  if (freed)
    nbdkit_debug ("%s: slot %d, of the leg removed before it was reached, "
                  "freed: it joins as a new member", l->uri, s);
  return freed;
}

/* An add refused (a split brain, say) while the slot l owns is that of
 * a leg of its URI removed before it was reached, kept because a leg
 * not reached yet may own it (slots.c): say so after the reason in err.
 */
static void
explain_kept_slot (struct volume *v, const struct leg *l, char *err,
                   size_t errlen)
{
  const struct leg *u;
  size_t used = strlen (err);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  if (l->slot < 0 || removed_slot_unknown (v, l->uri) == NULL ||
      (u = slots_unreached_leg (v)) == NULL || used >= errlen)
    return;
  snprintf (err + used, errlen - used, " (a leg of this URI was removed "
            "before it was reached, but its slot, %d, is kept: leg %u has "
            "not been reached since the controller started and may own it; "
            "wait until it is reached, or nbdrep remove it too)",
            l->slot, u->index);
}

/* -D replicate.add_pause=MS: nbdrep add waits MS milliseconds once the
 * leg is judged, before nr_legs counts it: the window in which the slot
 * it owns is held through v->adding alone.  For tests only
 * (test-meta-slot-adding.sh).
 */
int replicate_debug_add_pause = 0;          /* exported by the .syms */

/* -D replicate.refusal_pause=MS: nbdrep fail, resync --full and
 * remove wait MS milliseconds after checking that the other legs would
 * stay uptodate enough, before taking the leg out, which checks again:
 * another leg may fail in between.  For tests only
 * (test-admin-refusal-race.sh).
 */
int replicate_debug_refusal_pause = 0;      /* exported by the .syms */

/* The refusal_pause of an operator's command (what: "failing" ...). */
void
admin_refusal_pause (const char *what)
{
  debug_pause (replicate_debug_refusal_pause, what,
               "with the other legs checked, before it takes the leg out",
               "refusal_pause");
}

/* Name the leg being added, or none (NULL): until nr_legs counts it,
 * the slot it owns is held through v->adding (slots.c).
 */
static void
set_adding (struct volume *v, struct leg *l)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  v->adding = l;
}

/* Add a leg (asynchronous: async=URI at run time): connect it and
 * judge it before it is published, so that the operator hears at once
 * of an unreachable leg or one of another volume; then start its
 * resync.  Returns its index, or -1 with the reason in err.  Only the
 * control thread adds legs.
 */
int
admin_add_leg (struct volume *v, const char *uri, bool async, char *err,
               size_t errlen)
{
  struct leg *l;
  enum verdict verdict;
  size_t n;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    if (check_new_uri (v, uri, err, errlen) == -1)
      return -1;
    n = v->nr_legs;
  }
  l = &v->legs[n];
  memset (l, 0, sizeof *l);
  l->owned_uri = strdup (uri);
  if (l->owned_uri == NULL) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  pthread_mutex_init (&l->conns_lock, NULL);
  pthread_mutex_init (&l->life_lock, NULL);
  l->v = v;
  l->index = (unsigned) n;
  l->uri = l->owned_uri;
  l->slot = -1;
  member_init_state (l, LEG_FAILED);   /* not counted in nr_legs yet */
  set_adding (v, l);
  verdict = monitor_examine_leg (v, l, err, errlen);
  if (verdict != V_UNREACHABLE && v->metadata && slot_of_removed (v, l))
    verdict = monitor_examine_leg (v, l, err, errlen);
  if (verdict == V_UNREACHABLE || verdict == V_REFUSE) {
    char why[256];
    snprintf (why, sizeof why, "%s", err);
    snprintf (err, errlen, "%s: %s%s", uri,
              verdict == V_UNREACHABLE ? "cannot reach it: " : "", why);
    if (verdict == V_REFUSE && v->metadata)
      explain_kept_slot (v, l, err, errlen);
  }
  else if (v->metadata && l->slot < 0 && !free_slot_exists (v, err, errlen))
    verdict = V_REFUSE;
  if (verdict != V_REFUSE && verdict != V_UNREACHABLE && async &&
      make_added_async (v, l, err, errlen) == -1)
    verdict = V_REFUSE;
  if (verdict == V_REFUSE || verdict == V_UNREACHABLE) {
    set_adding (v, NULL);
    if (l->aq) {
      async_stop (l->aq, 0);
      async_free (l->aq);
      atomic_fetch_and (&v->async_mask, (uint16_t) ~(1u << n));
    }
    leg_close (l);
    leg_drop_own_poller (l);
    free (l->owned_uri);
    free (l->sb_buf);           /* examining it may have allocated them */
    free (l->al_buf);
    drain_free (l);
    pthread_mutex_destroy (&l->conns_lock);
    pthread_mutex_destroy (&l->life_lock);
    memset (l, 0, sizeof *l);
    return -1;
  }
  debug_pause (replicate_debug_add_pause, "add",
               "with the leg judged, before it is counted", "add_pause");
  {
    /* Counted from now on: the monitor may look at it. */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->life_lock);
    atomic_store (&v->nr_legs, n + 1);
    set_adding (v, NULL);
    nbdkit_debug ("leg %zu (%s) added by the operator", n, uri);
    if (monitor_apply_verdict (v, l, verdict) == -1) {
      snprintf (err, errlen, "leg %zu: cannot write its metadata", n);
      return -1;
    }
    if (atomic_load (&l->state) == LEG_STALE &&
        resync_start (v, l, l->want_full) == -1) {
      snprintf (err, errlen, "leg %zu: cannot start its resync", n);
      return -1;
    }
  }
  return (int) n;
}

/* Might l, not uptodate, hold the newest data?  So it might if no leg
 * is uptodate (the volume has failed) and it is a member of the
 * generation last recorded: its failure could not be recorded, it comes
 * back uptodate when it returns, and nothing could be resynced to it.
 * change_lock and v->lock held.
 */
static bool
may_hold_newest (struct volume *v, const struct leg *l)
{
  return MB_UPTODATE (membership_load (v)) == 0 && v->metadata &&
    l->slot >= 0 && (v->sb.slots[l->slot].flags & SLOT_MEMBER) != 0;
}

/* may_hold_newest for a failed leg.  Takes change_lock and v->lock. */
bool
admin_may_hold_newest (struct volume *v, struct leg *l)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  return atomic_load (&l->state) == LEG_FAILED && may_hold_newest (v, l);
}

/* Why a leg may not be removed, or NULL.  change_lock and v->lock
 * held.
 */
static const char *
remove_refusal (struct volume *v, struct leg *l)
{
  uint16_t up = MB_UPTODATE (membership_load (v)) & ~(1u << l->index);

  if (atomic_load (&l->state) == LEG_REMOVED)
    return "already removed";
  if (l->held)
    return "it is the source of a running backup";
  if (atomic_load (&l->state) != LEG_UPTODATE) {
    if (may_hold_newest (v, l))
      return "no leg is uptodate, and it is a member of the last recorded "
        "generation: it may hold the newest data, and without it nothing "
        "could be resynced (bring its server back, or restart the "
        "controller without it and force=true if it is lost)";
    return NULL;
  }
  if (up == 0)
    return "it is the last uptodate leg";
  if ((unsigned) __builtin_popcount (up) < v->quorum)
    return "fewer uptodate legs than quorum would remain "
      "(the volume would turn read-only)";
  return NULL;
}

/* Stop a leg's resync, if any, and wait for its thread. */
static void
stop_resync_of (struct volume *v, struct leg *l)
{
  struct resync *rs;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    rs = l->resync;
    l->resync = NULL;
  }
  if (rs) {
    resync_cancel (rs);
    resync_reap (rs);
  }
}

/* A leg whose resync was just stopped (stop_resync_of) goes back to
 * the monitor, which takes it from the top (reconnected, judged again,
 * l->force_full).  A resync stopped after its target began receiving
 * writes leaves it syncing: that is failed properly (its failure
 * recorded).  No lock held but l->life_lock.
 */
static void
hand_back_stopped (struct volume *v, struct leg *l, const char *why)
{
  enum leg_state st = atomic_load (&l->state);

  if (st == LEG_SYNCING)
    member_fail_leg (v, l, EPOCH_ANY, "%s", why);
  else if (st == LEG_STALE && !l->held) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    member_set_state (v, l, LEG_FAILED, why);
  }
}

/* A stale leg whose resync the operator restarts (nbdrep resync
 * --full): its resync, which may be starting with the kind judged when
 * it came back, is stopped and the leg handed back to the monitor.
 */
void
admin_restart_stale (struct volume *v, struct leg *l, const char *why)
{
  /* Not while the monitor connects or judges it, or starts its resync. */
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->life_lock);

  stop_resync_of (v, l);
  hand_back_stopped (v, l, why);
}

/* Take the leg out of the membership (change_lock held), unless
 * remove_refusal, checked again in the same hold of v->lock as the
 * change, now refuses it (another leg failed since the first check):
 * that reason is returned, else NULL, with the slot the leg held, to
 * be freed, or -1 if none is known, in *slot.
 */
static const char *
retire_leg (struct volume *v, struct leg *l, int *slot)
{
  const char *why;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  why = remove_refusal (v, l);
  if (why)
    return why;
  *slot = l->slot;
  member_set_state (v, l, LEG_REMOVED, "removed by the operator");
  snprintf (l->last_error, sizeof l->last_error, "removed by the operator");
  l->slot = -1;                 /* under v->lock, as status reads it */
  l->slot_unknown = *slot < 0 && v->metadata;
  return NULL;
}

/* Remove a leg.  Returns 0, or -1 with the reason in err. */
int
admin_remove_leg (struct volume *v, unsigned index, char *err, size_t errlen)
{
  struct leg *l = &v->legs[index];
  const char *why;
  int slot;
  /* Not while the monitor connects or judges it. */
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->life_lock);

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    why = remove_refusal (v, l);
  }
  if (why) {
    snprintf (err, errlen, "leg %u cannot be removed: %s", index, why);
    return -1;
  }
  admin_refusal_pause ("remove");
  stop_resync_of (v, l);
  member_change_begin (v);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    why = retire_leg (v, l, &slot);
    if (why == NULL && v->metadata && slot >= 0) {
      if (slots_release (v, slot, "its leg removed") == -1)
        nbdkit_error ("leg %u removed, but no leg could record it (none "
                      "is uptodate): its slot %d stays its own on disk, "
                      "absent, its bitmap marked by every write", index,
                      slot);
    }
    else if (why == NULL && v->metadata)
      metaio_bump (v);
  }
  member_change_end (v);
  if (why) {
    hand_back_stopped (v, l, "its removal refused");
    snprintf (err, errlen, "leg %u cannot be removed: %s", index, why);
    return -1;
  }
  /* What the leg's server still has to answer, it answers (within a
   * request's timeout) before it is told goodbye: see
   * leg_close_answered.
   */
  leg_close_answered (l, v->cfg.timeout);
  /* A removed leg is never connected again: an asynchronous leg's
   * sender gives up what it holds (its requests fail at leg_enter from
   * now on) and stops, then its own poller, which has nothing left to
   * drive.
   */
  if (l->aq)
    async_retire (l->aq, v->cfg.timeout);
  if (l->own_poller)
    poller_stop (l->own_poller);
  nbdkit_debug ("leg %u removed by the operator", index);
  return 0;
}

/* Change a rate (resync-rate, resync-min-rate, verify-rate).  A floor
 * above the cap is refused; lowering the cap below the floor lowers the
 * floor with it.  Returns 0 or -1 with the reason.
 */
int
admin_set (struct volume *v, const char *key, const char *value,
            char *err, size_t errlen)
{
  _Atomic uint64_t *dst;
  uint64_t n;

  if (strcmp (key, "resync-rate") == 0)
    dst = &v->resync_rate;
  else if (strcmp (key, "resync-min-rate") == 0)
    dst = &v->resync_min_rate;
  else if (strcmp (key, "verify-rate") == 0)
    dst = &v->verify_rate;
  else {
    snprintf (err, errlen, "unknown setting \"%s\" (resync-rate, "
              "resync-min-rate or verify-rate)", key);
    return -1;
  }
  if (config_parse_size (value, &n) == -1) {
    snprintf (err, errlen, "%s=%s: not a size", key, value);
    return -1;
  }
  if (dst == &v->resync_min_rate && atomic_load (&v->resync_rate) != 0 &&
      n > atomic_load (&v->resync_rate)) {
    snprintf (err, errlen, "resync-min-rate may not be larger than "
              "resync-rate (%" PRIu64 ")", atomic_load (&v->resync_rate));
    return -1;
  }
  if (dst == &v->resync_rate && n != 0 &&
      atomic_load (&v->resync_min_rate) > n)
    atomic_store (&v->resync_min_rate, n);     /* the floor follows the cap */
  atomic_store (dst, n);
  nbdkit_debug ("%s set to %s by the operator", key, value);
  return 0;
}
