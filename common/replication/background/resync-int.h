/* SPDX-License-Identifier: BSD-3-Clause */
/* What the two halves of a resync share: resync.c (its steps, from
 * claiming the target to publishing it) and resync-copy.c (the copy:
 * lanes, runs, rate, checkpoints).
 */

#ifndef REPLICATE_RESYNC_INT_H
#define REPLICATE_RESYNC_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

#include "internal.h"
#include "conn.h"

#define LANES 4
#define COPIERS 4               /* threads per lane */
#define RUN_BYTES (1024 * 1024)
#define CHECKPOINT_BYTES (256 * 1024 * 1024)
#define CHECKPOINT_NS (2000000000ULL)

#define BUSY_NS (250000000ULL)    /* clients count as busy this long */

/* A run copied but not yet flushed on the target. */
struct run {
  uint64_t first, last;         /* chunks */
};

struct resync {
  struct volume *v;
  struct leg *target;
  struct bitmap *bm;
  bool full;
  pthread_t thread;
  _Atomic bool cancel;
  _Atomic bool finished;
  bool receiving;               /* the target received writes (step 2) */

  pthread_mutex_t lock;         /* everything below */
  uint64_t cursor;              /* next chunk to look at */
  struct leg *source;
  bool source_failed;
  bool target_failed;
  struct run *copied;           /* runs to clear at the next checkpoint */
  size_t nr_copied, cap_copied;
  uint64_t since_checkpoint;
  uint64_t last_checkpoint_ns;
  uint64_t next_slot_ns;        /* rate limiting: next run may start */
  uint64_t seen_client_requests;
  uint64_t busy_until_ns;

  struct conn *src_conns[LANES], *dst_conns[LANES];

  uint64_t start_ns;
  _Atomic uint64_t done_bytes, copied_bytes, zeroed_bytes, total_bytes;
};

/* Should the copy stop (cancelled, the volume stopping, the target no
 * longer syncing)?
 */
extern bool resync_must_stop (struct resync *rs);
/* Flush the target, then clear the runs copied before the flush from
 * its bitmap and write the bitmap.  Returns -1 if the target failed.
 */
extern int resync_checkpoint (struct resync *rs);
/* Open LANES private connections to an NBD leg (none for the local
 * leg, nor for a leg without multi-conn: conns stay NULL and the copy
 * goes over the leg's shared connection).  Returns 0 or -1 (the leg's
 * last error says why).
 */
extern int resync_open_conns (struct leg *l, struct conn **conns);
/* Close the private connections of both ends. */
extern void resync_close_conns (struct resync *rs);
/* Choose an uptodate source other than the target and connect to it.
 * Returns 0, or -1 if there is none or it cannot be reached.
 */
extern int resync_pick_source (struct resync *rs);
/* One pass over the bitmap with COPIERS threads on each of LANES lanes. */
extern void resync_run_pass (struct resync *rs);

#endif /* REPLICATE_RESYNC_INT_H */
