/* SPDX-License-Identifier: BSD-3-Clause */
/* Resync: bringing a stale leg up to date (see resync.c). */

#ifndef REPLICATE_RESYNC_H
#define REPLICATE_RESYNC_H

#include <stdbool.h>
#include <stdint.h>

struct volume;
struct leg;
struct resync;

/* Progress, for status. */
struct resync_progress {
  bool full;
  uint64_t done;                /* bytes */
  uint64_t total;               /* bytes */
  double rate;                  /* bytes per second */
  double eta;                   /* seconds, -1 unknown */
};

/* Start resyncing a stale leg in the background.  v->lock not held.
 * Returns 0, or -1 (the leg stays stale and the reason is its
 * last_error).
 */
extern int resync_start (struct volume *v, struct leg *target, bool full);

/* Ask a running resync to stop at its next step. */
extern void resync_cancel (struct resync *rs);

/* Has the resync thread finished?  Then resync_reap joins and frees. */
extern bool resync_finished (struct resync *rs);
extern void resync_reap (struct resync *rs);

extern void resync_get_progress (struct resync *rs,
                                 struct resync_progress *p);

#endif /* REPLICATE_RESYNC_H */
