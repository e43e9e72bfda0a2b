/* SPDX-License-Identifier: BSD-3-Clause */
/* The monitor thread: notices lost connections, reconnects failed legs
 * and starts resyncs.
 *
 * A failed leg is retried with exponential backoff (1 s doubling to
 * 30 s, leg_back_off_locked in leg.c); one that refused (a TLS setup that cannot work, a leg
 * of another volume ...) every REFUSED_RETRY seconds only: it needs
 * the operator, who fixes it (a key file, the leg's storage) and then
 * need not wait: `nbdrep resync CTL INDEX` tries again at once, and
 * the leg comes back by itself within REFUSED_RETRY.  Every refused
 * attempt is logged.  Its old connections are closed first (leg_close
 * waits until no request can still reach them).  Once it answers, its
 * superblock decides what it is to a running controller, which never
 * re-elects: it is uptodate only if it holds exactly the volume's
 * current generation and its slot is a member of it (it was the last
 * leg to go and nothing was written since; a leg whose failure was
 * noted but could not be recorded holds that generation too, and is
 * no member); it resyncs incrementally if its generation is its
 * slot's bm_gen; fully if the volume knows its generation, if it is
 * inconsistent or blank; and it is refused if it belongs to another
 * volume or holds a generation the volume never had (split brain).
 * With metadata=none every returning leg is rebuilt fully.
 */

#include <config.h>

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "monitor.h"
#include "state.h"
#include "drain.h"
#include "poller.h"
#include "leg.h"
#include "member.h"
#include "metaio.h"
#include "slots.h"
#include "resync.h"
#include "async.h"
#include "al.h"
#include "random.h"
#include "cleanup.h"
#include "thread-name.h"

#define REFUSED_RETRY 60

/* Is this leg's storage that of another present leg (its superblock
 * carries that leg's UUID)?  Then why says so.
 */
static bool
same_storage_as (struct volume *v, struct leg *l, const uint8_t *uuid,
                 char *why, size_t len)
{
  const struct leg *o;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  o = slots_leg_of_uuid (v, l, uuid);
  if (o == NULL)
    return false;
  snprintf (why, len, "carries the identity of leg %u (its superblock "
            "has that leg's UUID: the same storage, or a copy of its "
            "disk): never written to", (unsigned) o->index);
  return true;
}

/* Judge a returning leg's superblock sb against the volume's, which a
 * generation bump may be changing: change_lock held.
 */
static enum verdict
judge_sb_locked (struct volume *v, struct leg *l, const struct superblock *sb,
                 char *why, size_t len)
{
  const bool owns_slot = sb_owns_slot (&v->sb, sb);

  l->sb_seq = sb->seq;
  l->gen = sb->gen;
  l->split_brain = false;
  l->inconsistent = (sb->flags & SB_INCONSISTENT) != 0;
  if (owns_slot) {
    const struct sb_slot *slot = &v->sb.slots[sb->slot];

    /* Under v->lock, as status reads them. */
    pthread_mutex_lock (&v->lock);
    memcpy (l->uuid, sb->leg_uuid, 16);
    l->slot = (int) sb->slot;
    pthread_mutex_unlock (&v->lock);
    if (!l->inconsistent && (slot->flags & SLOT_MEMBER) &&
        (gen_equal (sb->gen, v->sb.gen) || metaio_gen_unrecorded (v, sb->gen)))
      return V_UPTODATE;
    if (gen_equal (sb->gen, slot->bm_gen))
      return V_INCREMENTAL;
  }
  /* As at start (election.c, rule 5): a leg whose slot is no longer
   * its own (removed, then added back) is rebuilt fully, whatever its
   * generation; an asynchronous leg's, which only a full resync
   * advances, may have left the volume's history while it was a leg.
   */
  if (l->inconsistent || !owns_slot || sb_knows_gen (&v->sb, sb->gen))
    return V_FULL;
  /* Either it changed on its own (a split brain) or it was away for
   * longer than the history reaches: the two look the same.
   */
  snprintf (why, len, "holds generation %" PRIu64 ", not in this "
            "volume's history of %d generations: a split brain (it "
            "changed on its own), or away for longer than that history "
            "reaches: not used", sb->gen.counter, META_HISTORY);
  l->split_brain = true;
  return V_REFUSE;
}

/* Is the disk now behind leg l an older copy of the one this run wrote
 * to: does it hold an older superblock or activity log than the newest
 * this run wrote to the leg and saw acknowledged (l->sb_acked,
 * l->al_acked)?  A snapshot or backup restored, a replica's disk
 * swapped: it has the leg's identity and generation, but not every
 * write acknowledged since the copy was made, and neither the
 * generation nor the slot's bitmap tells (no generation changes while
 * writes go on, and the bitmap counts only from the leg's failure).
 * Every write after the copy went to an extent that was either still
 * hot when the leg failed (its bitmap got it) or was made hot, or
 * cooled, by a later log commit that the copy lacks.  Across a restart
 * nothing is remembered: see the man page.  Returns 1 (why says how),
 * 0, or -1 if the log cannot be read (why says why).
 */
static int
rolled_back (struct volume *v, struct leg *l, const struct superblock *sb,
             char *why, size_t len)
{
  const uint64_t sb_acked = atomic_load (&l->sb_acked);
  const uint64_t al_acked = atomic_load (&l->al_acked);
  CLEANUP_FREE uint32_t *ext = NULL;
  enum meta_status st;
  uint64_t seq = 0;
  uint32_t nr;

  if (sb_acked > 0 && sb->seq < sb_acked) {
    snprintf (why, len, "its superblock (seq %" PRIu64 ") is older than "
              "the one this controller last wrote to it (seq %" PRIu64
              "): an older copy of its disk", sb->seq, sb_acked);
    return 1;
  }
  if (al_acked == 0 || v->layout.al_bytes == 0)
    return 0;
  ext = calloc (v->layout.al_extents, sizeof *ext);
  if (ext == NULL) {
    snprintf (why, len, "out of memory");
    return -1;
  }
  if (metaio_read_al (l, ext, &nr, &seq, &st, why, len) == -1)
    return -1;
  if (st == META_OK && seq >= al_acked)
    return 0;
  snprintf (why, len, "its activity log (seq %" PRIu64 ") is older than "
            "the one this controller last wrote to it (seq %" PRIu64
            "): an older copy of its disk", st == META_OK ? seq : 0,
            al_acked);
  return 1;
}

/* Judge a reconnected leg by its superblock; why gets the reason for a
 * refusal.
 */
static enum verdict
judge_returning_leg (struct volume *v, struct leg *l, char *why, size_t len)
{
  struct superblock sb;
  enum meta_status st;
  enum verdict verdict;
  char a[37], b[37], old[256];
  int older = 0;

  if (!v->metadata)
    return V_FULL;
  if (l->caps.size < v->size + v->layout.md_size) {
    snprintf (why, len, "too small: %" PRIu64 " bytes, the volume needs %"
              PRIu64, l->caps.size, v->size + v->layout.md_size);
    return V_REFUSE;
  }
  if (metaio_read_sb (l, &sb, &st, why, len) == -1)
    return V_UNREACHABLE;
  if (st == META_OK &&
      (older = rolled_back (v, l, &sb, old, sizeof old)) == -1) {
    snprintf (why, len, "%s", old);
    return V_UNREACHABLE;
  }
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
  l->sb_read = true;            /* reached: see slots.c */
  if (st != META_OK)
    return V_FULL;              /* blank or damaged: rebuild it */
  if (memcmp (sb.volume_uuid, v->sb.volume_uuid, 16) != 0) {
    uuid_format (sb.volume_uuid, a);
    uuid_format (v->sb.volume_uuid, b);
    snprintf (why, len, "belongs to another volume (%s, this is %s): "
              "never written to", a, b);
    return V_REFUSE;
  }
  if (same_storage_as (v, l, sb.leg_uuid, why, len))
    return V_REFUSE;
  verdict = judge_sb_locked (v, l, &sb, why, len);
  if (verdict == V_REFUSE)
    return verdict;
  if (older == 1 && verdict != V_FULL) {
    char name[160];
    nbdkit_error ("%s: %s: rebuilt fully", leg_name (l, name, sizeof name),
                  old);
    verdict = V_FULL;
  }
  /* Its disk holds these; what is written to it from now on is newer. */
  atomic_store (&l->sb_acked, sb.seq);
  atomic_store (&l->al_acked, 0);
  return verdict;
}

/* Is a leg being brought back still failed?  The operator may have
 * removed it between the monitor's look at it and the taking of its
 * life_lock; then it stays removed.  v->lock or the leg's life_lock
 * held.
 */
static bool
still_failed (const struct leg *l)
{
  return atomic_load (&l->state) == LEG_FAILED;
}

/* A leg holding the current generation rejoins as uptodate: it gets the
 * activity log and every bitmap first, like a leg finishing a resync.
 * Returns -1 if it could not take them.  No log commit or bitmap page
 * can be missed between those writes and the publication: a leg is
 * judged uptodate only when the volume has no uptodate leg (its
 * failure, or the last one's, was not recorded), so no client write is
 * accepted meanwhile.
 */
static int
rejoin_uptodate (struct volume *v, struct leg *l)
{
  uint16_t bit = 1u << l->index;
  bool moved = false;

  if (v->metadata &&
      (al_write_to (v->al, bit) != 0 ||
       metaio_write_all_bitmaps (v, bit) != 0))
    return -1;
  member_change_begin (v);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->change_lock);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
      moved = still_failed (l);
      if (moved) {
        l->backoff = 0;
        l->source_errors = 0;
        l->last_error[0] = '\0';
        member_set_state (v, l, LEG_UPTODATE, "back, holding the generation");
      }
    }
    if (moved && v->metadata)
      metaio_bump (v);
  }
  member_change_end (v);
  return moved ? 0 : -1;
}

/* Is o served by the same server as l (l itself, or a removed leg of
 * the same URI)?
 */
static bool
same_server (const struct leg *l, const struct leg *o)
{
  return o == l || (o->uri != NULL && l->uri != NULL &&
                    strcmp (o->uri, l->uri) == 0);
}

/* Has the server of l (as l, or as a removed leg of the same URI) not
 * yet closed every connection we aborted, or, on a Unix socket, every
 * connection whose client has gone?  Then nothing may reach it
 * (drain.c) and err says why.
 */
static bool
old_connections_open (struct volume *v, struct leg *l, char *err, size_t len)
{
  struct drain_report r;
  uint64_t since = 0;
  size_t i, k, n = 0, blind = 0, unknowable = 0;
  int orphans;

  for (i = 0; i < v->nr_legs; ++i) {
    if (!same_server (l, &v->legs[i]))
      continue;
    k = drain_pending (&v->legs[i], &r);
    if (k > 0 && (n == 0 || r.since_ns < since))
      since = r.since_ns;
    n += k;
    blind += r.blind;
    unknowable += r.unknowable;
  }
  if (n == 0) {
    if ((orphans = drain_orphans (l)) == 0)
      return false;
    drain_say_orphans (err, len, orphans);
    return true;
  }
  if (blind > 0)
    snprintf (err, len, "cannot tell whether the server has closed %zu "
              "aborted connection%s: this kernel does not answer sock_diag "
              "for Unix sockets (modprobe unix_diag); the leg is not used "
              "until it can", blind, blind == 1 ? "" : "s");
  else if (unknowable > 0)
    snprintf (err, len, "%zu aborted connection%s ended without the "
              "server's close (a reset, a timeout, or TLS): writes sent on "
              "%s may still land; once the server is restarted or gone: "
              "nbdrep resync CTL %u --server-restarted", unknowable,
              unknowable == 1 ? "" : "s", unknowable == 1 ? "it" : "them",
              l->index);
  else
    snprintf (err, len, "waiting %.0fs so far for the server to close %zu "
              "aborted connection%s (writes sent on %s may still land): "
              "the leg is not used until it does (restart the server if "
              "it never will)", (double) (now_ns () - since) / 1e9, n,
              n == 1 ? "" : "s", n == 1 ? "it" : "them");
  return true;
}

/* The operator says the server of l has been restarted or is gone:
 * forget the connections it was waited for on (drain_forget), as l
 * and as removed legs of the same URI.  Returns how many there were.
 */
size_t
monitor_forget_old_connections (struct volume *v, struct leg *l)
{
  size_t i, n = 0;

  for (i = 0; i < v->nr_legs; ++i)
    if (same_server (l, &v->legs[i]))
      n += drain_forget (&v->legs[i]);
  return n;
}

/* Connect a leg and judge it.  On V_REFUSE or V_UNREACHABLE the leg
 * is closed again and err says why.  A leg whose aborted connections
 * its server has not closed yet is unreachable (see drain.c); one whose
 * TLS setup cannot work is refused.  v->lock not held.
 */
enum verdict
monitor_examine_leg (struct volume *v, struct leg *l, char *err, size_t len)
{
  enum verdict verdict;
  bool refused = false;
  int orphans;

  leg_close (l);
  if (old_connections_open (v, l, err, len))
    return V_UNREACHABLE;
  if (leg_open (l, 0, &refused, err, len) == -1 || leg_attach (l) == -1 ||
      (v->metadata && metaio_alloc_leg (v, l) == -1)) {
    leg_close (l);
    return refused ? V_REFUSE : V_UNREACHABLE;
  }
  if (!caps_leg_fits (&v->caps, &l->caps, err, len)) {
    leg_close (l);
    return V_REFUSE;
  }
  if ((orphans = drain_tcp_orphans (l)) > 0) {
    drain_say_orphans (err, len, orphans);
    leg_close (l);
    return V_UNREACHABLE;
  }
  verdict = judge_returning_leg (v, l, err, len);
  if (verdict == V_REFUSE || verdict == V_UNREACHABLE)
    leg_close (l);
  else if (v->metadata)
    metaio_learn_al_seq (l);
  return verdict;
}

/* Act on a good verdict: rejoin as uptodate, or become stale (the
 * resync kind remembered).  Returns -1 if an uptodate leg could not take
 * its metadata (it stays failed).
 */
int
monitor_apply_verdict (struct volume *v, struct leg *l, enum verdict verdict)
{
  char name[160];

  leg_name (l, name, sizeof name);
  l->refused = false;
  /* An asynchronous leg is never uptodate (a former member added back
   * as one is rebuilt: its slot must leave the generation).
   */
  if (verdict == V_UPTODATE && l->async)
    verdict = V_FULL;
  if (verdict == V_UPTODATE) {
    if (rejoin_uptodate (v, l) == -1)
      return -1;
    nbdkit_debug ("%s is back, up to date", name);
    return 0;
  }
  nbdkit_debug ("%s is back: %s resync", name,
                verdict == V_FULL || l->force_full ? "full" : "incremental");
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  if (!still_failed (l))
    return -1;
  l->want_full = verdict == V_FULL || l->force_full;
  l->force_full = false;
  l->last_error[0] = '\0';
  member_set_state (v, l, LEG_STALE, l->want_full ? "back, needs a full resync"
                 : "back, needs an incremental resync");
  return 0;
}

/* A reconnection failed: remember why and back off (see the design
 * note).
 */
static void
reconnect_failed (struct volume *v, struct leg *l, const char *why,
                  bool refused)
{
  leg_set_error (l, "%s", why);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  l->refused = refused;
  if (refused)
    l->next_attempt_ns = now_ns () + REFUSED_RETRY * UINT64_C (1000000000);
  else
    leg_back_off_locked (l);
}

/* How long a reconnection waits in place for a server to close the
 * connections just aborted (an idle nbdkit does so within
 * milliseconds), and how soon it looks again after that.
 */
#define DRAIN_GRACE_NS 200000000ULL
#define DRAIN_RETRY_NS 200000000ULL

/* Are old connections of l still open after a short grace?  (See
 * old_connections_open.)
 */
static bool
drain_soon (struct volume *v, struct leg *l, char *err, size_t len)
{
  uint64_t deadline = now_ns () + DRAIN_GRACE_NS;

  while (old_connections_open (v, l, err, len)) {
    if (now_ns () >= deadline)
      return true;
    nanosleep (&(struct timespec) { .tv_nsec = 5000000 }, NULL);
  }
  return false;
}

/* Say in the leg's last_error, after why it failed, what it waits for
 * (why), and look again soon.
 */
static void
note_draining (struct volume *v, struct leg *l, const char *why)
{
  char msg[2 * sizeof l->last_error + 8], *mark;
  size_t n;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);

  mark = strstr (l->last_error, "; then ");
  snprintf (msg, sizeof msg, "%.*s; then %s",
            (int) (mark ? mark - l->last_error : (ptrdiff_t) strlen (l->last_error)),
            l->last_error, why);
  n = strlen (msg) < sizeof l->last_error ? strlen (msg)
    : sizeof l->last_error - 1;
  memcpy (l->last_error, msg, n);
  l->last_error[n] = '\0';
  l->next_attempt_ns = now_ns () + DRAIN_RETRY_NS;
}

/* Try to bring a failed leg back.  While its server has old
 * connections open, look again at every tick of the monitor (not
 * backing off: the leg is wanted as soon as they are closed).  v->lock
 * not held.
 */
static void
reconnect (struct volume *v, struct leg *l)
{
  char err[256], why[300], name[160];
  enum verdict verdict;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->life_lock);

  if (!still_failed (l))
    return;                     /* removed (or added) meanwhile */
  leg_close (l);
  if (drain_soon (v, l, err, sizeof err)) {
    note_draining (v, l, err);
    return;
  }
  verdict = monitor_examine_leg (v, l, err, sizeof err);
  leg_name (l, name, sizeof name);
  switch (verdict) {
  case V_UNREACHABLE:
    snprintf (why, sizeof why, "reconnect: %s", err);
    reconnect_failed (v, l, why, false);
    return;
  case V_REFUSE:
    nbdkit_error ("%s refused: %s", name, err);
    reconnect_failed (v, l, err, true);
    return;
  default:
    if (monitor_apply_verdict (v, l, verdict) == -1) {
      leg_close (l);
      if (still_failed (l))
        reconnect_failed (v, l, "cannot write its metadata", false);
    }
  }
}

/* Start the resync of a stale leg. */
static void
start_resync (struct volume *v, struct leg *l)
{
  char name[160];
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->life_lock);

  if (resync_start (v, l, l->want_full) == 0)
    return;
  nbdkit_error ("%s: cannot start a resync", leg_name (l, name, sizeof name));
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
  member_set_state (v, l, LEG_FAILED, "cannot start a resync");
  leg_back_off_locked (l);
}

/* What the monitor should do with a leg now.  v->lock held. */
enum action { A_NONE, A_REAP, A_RECONNECT, A_RESYNC };

static enum action
next_action (struct volume *v, struct leg *l, uint64_t now)
{
  if (l->resync)
    return resync_finished (l->resync) ? A_REAP : A_NONE;
  switch (atomic_load (&l->state)) {
  case LEG_FAILED:
    return now >= l->next_attempt_ns ? A_RECONNECT : A_NONE;
  case LEG_STALE:
    /* An asynchronous leg catches up only once nothing it was sent
     * before it fell behind is still on its way, and only while it
     * keeps pace with the volume's writes (async-behind.c).
     */
    return MB_UPTODATE (membership_load (v)) && !l->held &&
      (l->aq == NULL || async_may_catch_up (l->aq)) ? A_RESYNC : A_NONE;
  default:
    return A_NONE;
  }
}

/* One pass over the legs.  v->lock held (dropped around the work). */
static void
tend_legs (struct volume *v)
{
  size_t i;

  for (i = 0; i < v->nr_legs && !atomic_load (&v->stopping); ++i) {
    struct leg *l = &v->legs[i];
    struct resync *rs;

    switch (next_action (v, l, now_ns ())) {
    case A_NONE:
      break;
    case A_REAP:
      rs = l->resync;
      l->resync = NULL;
      pthread_mutex_unlock (&v->lock);
      resync_reap (rs);
      pthread_mutex_lock (&v->lock);
      break;
    case A_RECONNECT:
      pthread_mutex_unlock (&v->lock);
      reconnect (v, l);
      pthread_mutex_lock (&v->lock);
      break;
    case A_RESYNC:
      pthread_mutex_unlock (&v->lock);
      start_resync (v, l);
      pthread_mutex_lock (&v->lock);
      break;
    }
  }
}

/* Has one of the leg's connections died (its server went away while
 * nothing was asked of it: the poller saw the end of the stream)?
 */
static bool
connection_lost (struct leg *l)
{
  unsigned i;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);

  for (i = 0; i < l->nr_conns; ++i)
    if (atomic_load (&l->conns[i]->dead))
      return true;
  return false;
}

/* Fail the legs in use whose server went away, without waiting for a
 * request to find out (on an idle volume a dead leg would otherwise
 * look uptodate, and be picked as a backup's source).  When nobody
 * drives the poller (an idle volume whose issuers lead, see poller.c),
 * the monitor looks at the connections itself first, so that an end
 * of stream is seen within its tick.  v->lock held (dropped around
 * the work).
 */
static void
check_connections (struct volume *v)
{
  size_t i;

  pthread_mutex_unlock (&v->lock);
  poller_look (v->poller);
  pthread_mutex_lock (&v->lock);
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    enum leg_state st = atomic_load (&l->state);
    unsigned epoch = atomic_load (&l->epoch);

    if (l->local || !(st == LEG_UPTODATE || st == LEG_SYNCING))
      continue;
    pthread_mutex_unlock (&v->lock);
    if (connection_lost (l))
      member_fail_leg (v, l, epoch, "connection to the server lost");
    pthread_mutex_lock (&v->lock);
  }
}

/* The monitor thread. */
static void *
monitor_thread (void *arg)
{
  struct volume *v = arg;

  pthread_mutex_lock (&v->lock);
  while (!atomic_load (&v->stopping)) {
    struct timespec ts;

    check_connections (v);
    tend_legs (v);
    ts = deadline_after (CLOCK_REALTIME, 200000000);
    if (!atomic_load (&v->stopping))
      pthread_cond_timedwait (&v->monitor_cond, &v->lock, &ts);
  }
  pthread_mutex_unlock (&v->lock);
  return NULL;
}

/* Start the monitor. */
int
monitor_start (struct volume *v)
{
  int r = pthread_create (&v->monitor, NULL, monitor_thread, v);

  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  thread_name (v->monitor, "rep-monitor");
  v->monitor_running = true;
  return 0;
}

/* Stop the monitor and every resync (they finish their current run). */
void
monitor_stop (struct volume *v)
{
  size_t i;

  atomic_store (&v->stopping, true);
  if (v->monitor_running) {
    member_wake_monitor (v);
    pthread_join (v->monitor, NULL);
    v->monitor_running = false;
  }
  for (i = 0; i < v->nr_legs; ++i)
    if (v->legs[i].resync) {
      resync_cancel (v->legs[i].resync);
      resync_reap (v->legs[i].resync);
      v->legs[i].resync = NULL;
    }
}
