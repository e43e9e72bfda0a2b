/* SPDX-License-Identifier: BSD-3-Clause */
/* Start-up's first part (start.c has the rest): reach the legs and,
 * with metadata, read their superblocks and run the election until it
 * decides.
 *
 * Every leg not open yet is tried again every 250 ms, up to wait=, as
 * long as the election asks for more (ELECT_WAIT); a leg whose server
 * still has connections whose client has gone (drain.c) is not opened
 * meanwhile.  A leg that refuses (its TLS setup cannot work) stops the
 * start at once.  Each leg opened is examined once: its superblock read
 * (and whether it reads as zeroes, for a blank one), after which it
 * counts as reached in this run (l->sb_read: slots.c).  An asynchronous
 * leg the election promotes (prefer=INDEX force=true, a failover) is
 * made synchronous for the run, saying how far behind it was.  Runs
 * alone: no other thread of the volume exists yet.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "state.h"
#include "drain.h"
#include "leg.h"
#include "ioreq.h"
#include "election.h"
#include "metaio.h"
#include "async.h"
#include "start-reach.h"
#include "cleanup.h"

/* A leg is not opened while its server has connections whose client
 * has gone (drain.c): say why in its last_error, logging it once.
 */
static void
say_orphans (struct leg *l, int orphans)
{
  char name[160];
  bool first = !l->orphans_said;

  drain_say_orphans (l->last_error, sizeof l->last_error, orphans);
  l->orphans_said = true;
  if (first)
    nbdkit_debug ("%s: %s", leg_name (l, name, sizeof name), l->last_error);
}

/* Try once to open every leg that is not open yet, and start the
 * pollers of those that open.  Records why a leg did not open, and
 * whether it refused.  Returns -1 after nbdkit_error if one refused (a
 * TLS setup that cannot work): waiting for it is pointless, and
 * starting without it would hide a configuration error.
 */
static int
open_some_legs (struct volume *v)
{
  char err[256], name[160];
  size_t i;

  for (i = 0; i < v->nr_legs; ++i) {
    struct leg *l = &v->legs[i];
    int orphans;

    if (atomic_load (&l->open))
      continue;
    if ((orphans = drain_orphans (l)) > 0) {
      say_orphans (l, orphans);
      continue;
    }
    if (leg_open (l, 0, &l->refused, err, sizeof err) == -1) {
      snprintf (l->last_error, sizeof l->last_error, "%s", err);
      if (l->refused) {
        nbdkit_error ("cannot start the volume: %s refused: %s",
                      leg_name (l, name, sizeof name), err);
        return -1;
      }
      continue;
    }
    if ((orphans = drain_tcp_orphans (l)) > 0) {
      leg_close (l);
      say_orphans (l, orphans);
      continue;
    }
    l->last_error[0] = '\0';
    if (leg_attach (l) == -1)
      leg_close (l);
  }
  return 0;
}

/* Legs that are open. */
static uint16_t
open_legs (struct volume *v)
{
  uint16_t m = 0;
  size_t i;

  for (i = 0; i < v->nr_legs; ++i)
    if (atomic_load (&v->legs[i].open))
      m |= 1u << i;
  return m;
}

/* Describe the legs in a mask that did not open, for an error. */
static void
name_unreachable (struct volume *v, uint16_t missing, char *buf, size_t len)
{
  size_t i, used = 0;
  char name[160];

  buf[0] = '\0';
  for (i = 0; i < v->nr_legs && used < len; ++i)
    if (missing & (1u << i))
      used += (size_t) snprintf (buf + used, len - used, "%s%s: %s",
                                 used ? "; " : "",
                                 leg_name (&v->legs[i], name, sizeof name),
                                 v->legs[i].last_error);
}

/* Name every leg ("leg 0 (URI), leg 1 (URI)"), for errors. */
static void
name_legs (struct volume *v, char *buf, size_t len)
{
  size_t i, used = 0;
  char name[160];

  buf[0] = '\0';
  for (i = 0; i < v->nr_legs && used < len; ++i)
    used += (size_t) snprintf (buf + used, len - used, "%s%s",
                               i ? ", " : "",
                               leg_name (&v->legs[i], name, sizeof name));
}

/* Sleep a little between attempts to reach missing legs. */
static void
short_sleep (void)
{
  nanosleep (&(struct timespec) { .tv_nsec = 250000000 }, NULL);
}

/* What block status has shown of a leg so far: the extents are read
 * from `next` on, and only extents with the zero bit count (a hole
 * without it may read as anything: NBD's NBD_STATE_HOLE alone promises
 * nothing about the contents).
 */
struct zero_scan {
  uint64_t next;                /* where the extents seen end */
  bool zero;
};

/* Does a leg read as zeroes over its whole size (by block status)? */
static int
all_zero_cb (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  struct zero_scan *zs = opaque;

  if (offset != zs->next)       /* not contiguous: ignore the rest */
    return 0;
  if (!(type & ENGINE_EXTENT_ZERO))
    zs->zero = false;
  zs->next = offset + length;
  return 0;
}

/* Does leg l read as zeroes over its whole size?  A server may answer
 * block status for only part of the range asked about (NBD allows it):
 * the next request starts where its answer ended, and an answer that
 * covers nothing means "not known to be zero".  Requests stay within
 * the leg's maximum block size.
 */
static bool
reads_as_zero (struct leg *l)
{
  uint64_t step = 1024 * 1024 * 1024;
  struct zero_scan zs = { .next = 0, .zero = true };

  if (!l->caps.can_extents)
    return false;
  if (l->caps.max_block != 0 && l->caps.max_block < step)
    step = l->caps.max_block;
  while (zs.next < l->caps.size && zs.zero) {
    uint64_t off = zs.next;
    uint64_t n = l->caps.size - off < step ? l->caps.size - off : step;
    struct leg_cmd cmd = {
      .op = OP_EXTENTS, .offset = off, .count = (uint32_t) n,
      .fn = all_zero_cb, .fn_opaque = &zs,
    };
    if (ioreq_sync_io (l, &cmd) != 0 || zs.next <= off)
      return false;
  }
  return zs.zero;
}

/* Fill in the election's view of leg i (once it is open).  A leg that
 * cannot be read is closed again (it counts as unreachable).
 */
static void
examine_leg (struct volume *v, size_t i, struct elect_leg *el)
{
  struct leg *l = &v->legs[i];
  char err[256], name[160];

  leg_name (l, name, sizeof name);
  if (metaio_read_sb (l, &el->sb, &el->status, err, sizeof err) == -1) {
    nbdkit_error ("%s: %s", name, err);
    snprintf (l->last_error, sizeof l->last_error, "%s", err);
    leg_close (l);
    return;
  }
  el->reachable = true;
  l->sb_read = true;            /* reached: see slots.c */
  if (el->status == META_CORRUPT)
    nbdkit_error ("%s: %s", name, err);
  if (el->status != META_OK)
    el->all_zero = reads_as_zero (l);
}

/* A failover: the asynchronous leg prefer= and force=true named is
 * synchronous from now on (DESIGN.md section 14).  Say how far behind
 * it is: its superblock's mtime is its recovery point, the time of the
 * newest write it held flushed when it was last written (async-sender.c).
 * Say too what becomes of the synchronous legs that come back while
 * this controller runs: their generation is not in its history, so the
 * monitor refuses them (monitor.c, judge_sb_locked) and never writes to
 * them, since they may hold the only copy of writes newer than the
 * recovery point; the operator rebuilds them.
 */
static int
promote (struct volume *v, struct leg *l, const struct superblock *sb)
{
  char name[160];
  time_t rpo = (time_t) sb->mtime;
  char when[64] = "an unknown time";
  struct tm tm;

  if (rpo > 0 && gmtime_r (&rpo, &tm))
    strftime (when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  nbdkit_error ("failover: %s, an asynchronous leg, is promoted "
                "(prefer=%u force=true): the volume is served as it holds "
                "it, every write up to %s (%.0f s before this start) and "
                "possibly some later ones; a synchronous leg that comes "
                "back while this controller runs is refused as a split "
                "brain and left as it is (it may hold later writes): to "
                "rebuild one from this leg, nbdrep remove it and nbdrep "
                "add its URI, or restart with prefer=%u force=true once "
                "it is reachable",
                leg_name (l, name, sizeof name), l->index, when,
                rpo > 0 ? difftime (time (NULL), rpo) : 0.0, l->index);
  return async_promote_leg (v, l);
}

/* Open legs and elect (see start-reach.h). */
int
start_open_and_elect (struct volume *v, struct elect_input *in,
                      struct elect_result *res)
{
  uint64_t deadline = now_ns () + (uint64_t) (v->cfg.wait * 1e9);
  uint16_t seen = 0;
  size_t i;

  memset (in, 0, sizeof *in);
  in->nr_legs = v->nr_legs;
  in->init = v->cfg.init;
  in->force = v->cfg.force;
  in->prefer = v->cfg.prefer;
  in->async = atomic_load (&v->async_mask);
  for (;;) {
    uint16_t now_open;

    if (open_some_legs (v) == -1)
      return -1;
    now_open = open_legs (v);
    for (i = 0; i < v->nr_legs; ++i)
      if ((now_open & ~seen) & (1u << i))
        examine_leg (v, i, &in->legs[i]);
    seen = now_open;
    in->final = now_ns () >= deadline;
    elect (in, res);
    if (res->outcome != ELECT_WAIT)
      break;
    short_sleep ();
  }
  if (res->outcome == ELECT_REFUSE) {
    char why[1024], legend[1024];
    name_unreachable (v, (uint16_t) ~seen & ((1u << v->nr_legs) - 1),
                      why, sizeof why);
    name_legs (v, legend, sizeof legend);
    nbdkit_error ("cannot start the volume: %s%s%s.  The legs: %s",
                  res->message, why[0] ? ".  Unreachable: " : "", why,
                  legend);
    return -1;
  }
  if (res->message[0])
    nbdkit_debug ("election: %s", res->message);
  if (res->promoted >= 0 &&
      promote (v, &v->legs[res->promoted], &in->legs[res->promoted].sb) == -1)
    return -1;
  return 0;
}

/* Open every leg, waiting up to wait= (see start-reach.h). */
int
start_open_all (struct volume *v)
{
  uint64_t deadline = now_ns () + (uint64_t) (v->cfg.wait * 1e9);
  uint16_t all = (uint16_t) ((1u << v->nr_legs) - 1);
  char why[1024];

  for (;;) {
    if (open_some_legs (v) == -1)
      return -1;
    if (open_legs (v) == all || now_ns () >= deadline)
      break;
    short_sleep ();
  }
  if (open_legs (v) == all)
    return 0;
  name_unreachable (v, all & ~open_legs (v), why, sizeof why);
  nbdkit_error ("cannot start the volume: unreachable after %gs: %s",
                v->cfg.wait, why);
  return -1;
}
