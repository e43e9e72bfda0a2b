/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous legs: queues sent in epochs.  See async.c. */

#ifndef REPLICATE_ASYNC_H
#define REPLICATE_ASYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

/* What status shows of an asynchronous leg's queue. */
struct async_status {
  uint64_t buffer_used;         /* bytes queued or in flight */
  uint64_t lag_bytes;           /* bytes queued, not yet flushed */
  double lag_seconds;           /* age of the oldest write not surely held */
  uint64_t pull_aheads;         /* times it fell behind */
};

/* Make a leg asynchronous (before nr_legs counts it).  Returns 0 or -1
 * after nbdkit_error.
 */
extern int async_make_leg (struct volume *v, struct leg *l);
/* Make an asynchronous leg synchronous for this run (a failover at
 * start, before any thread runs).  Returns 0 or -1 after nbdkit_error.
 */
extern int async_promote_leg (struct volume *v, struct leg *l);
/* Create / free the queue of an asynchronous leg.  NULL after
 * nbdkit_error.
 */
extern struct async_leg *async_new (struct volume *v, struct leg *l);
extern void async_free (struct async_leg *aq);
/* Start the sender thread; stop it after waiting up to timeout seconds
 * for the queue to be flushed.
 */
extern int async_start (struct async_leg *aq);
extern void async_stop (struct async_leg *aq, double timeout);
/* The leg was removed and closed: its sender gives up what it holds,
 * stops, and the queue's ring is let go.
 */
extern void async_retire (struct async_leg *aq, double timeout);
/* Queue a client write or zero (range lock and activity-log extents
 * held by the caller); when the buffer is full, wait or pull ahead as
 * async-full= says.
 */
extern void async_enqueue (struct volume *v, struct leg *l,
                           const struct leg_cmd *cmd);
/* The volume did not keep a write queued for the leg (the client got
 * an error): the leg falls behind, the range in its bitmap.  Range lock
 * and extents held by the caller.
 */
extern void async_discard (struct leg *l, const struct leg_cmd *cmd);
/* The activity log is filling up: every asynchronous leg holding
 * extents falls behind and lets them go (their ranges marked in its
 * bitmap).  No lock held.
 */
extern void async_shed (struct volume *v);
/* End the current epoch of every asynchronous leg receiving writes. */
extern void async_cut_epochs (struct volume *v);
/* Wait until no marking for the leg is under way. */
extern void async_wait_marking (struct async_leg *aq);
/* A resync of the leg's bitmap makes it syncing: queue again, unless
 * a marking is under way (false).  v->lock held.
 */
extern bool async_resume (struct async_leg *aq);
/* The catch-up is over (its lag is the queue's again if it did not
 * fall behind meanwhile).
 */
extern void async_caught_up (struct async_leg *aq);
/* May a catch-up start: nothing queued, in flight or unflushed, and
 * the leg keeps pace with the volume's writes?
 */
extern bool async_may_catch_up (struct async_leg *aq);
/* Wait until everything queued so far is flushed on the leg.  Returns
 * 0, or -1 if the leg dropped out.
 */
extern int async_drain (struct async_leg *aq);
/* Write the leg's superblock without holding change_lock across the
 * I/O.  Returns 0 or an errno.
 */
extern int async_write_sb (struct async_leg *aq);
/* Numbers for status. */
extern void async_get_status (struct async_leg *aq, struct async_status *st);

#endif /* REPLICATE_ASYNC_H */
