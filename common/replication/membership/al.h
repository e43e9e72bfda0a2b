/* SPDX-License-Identifier: BSD-3-Clause */
/* The activity log: the set of hot extents, persisted before a write to
 * a cold extent proceeds, cooled after a flush (see al.c).
 */

#ifndef REPLICATE_AL_H
#define REPLICATE_AL_H

#include <stdbool.h>
#include <stdint.h>

struct volume;
struct al;
struct bitmap;

/* Create the activity log of a started volume (v->layout known).
 * Returns NULL after nbdkit_error.
 */
extern struct al *al_new (struct volume *v);
extern void al_free (struct al *al);

/* Start / stop the background flusher that cools idle extents. */
extern int al_start (struct al *al);
extern void al_stop (struct al *al);

/* Make every extent of [offset, offset+count) hot (persisting the log
 * first if one was cold) and take a reference on each.  Returns 0, or
 * the error every leg refused the log with alike (nothing held then).
 */
extern int al_acquire (struct al *al, uint64_t offset, uint64_t count);
/* Like al_acquire, but never waits: true if every extent was hot
 * already and is now referenced, false if nothing was taken.
 */
extern bool al_try_acquire (struct al *al, uint64_t offset, uint64_t count);
/* Take one more reference on every extent of a range the caller holds
 * (an asynchronous leg's queued write keeps them hot until its flush).
 */
extern void al_hold (struct al *al, uint64_t offset, uint64_t count);
/* Drop the references taken by al_acquire, al_try_acquire or al_hold. */
extern void al_release (struct al *al, uint64_t offset, uint64_t count);

/* OR the chunks of every hot extent into a bitmap. */
extern void al_or_hot_into (struct al *al, struct bitmap *b);

/* Write the current log to legs (with FUA).  Returns the legs that
 * failed.
 */
extern uint16_t al_write_to (struct al *al, uint16_t legs);

/* Flush, then cool every idle extent and write the smaller log.  With
 * everything idle (a clean stop) the log ends up empty.  Returns the
 * number of extents still hot.
 */
extern uint64_t al_cool (struct al *al);

/* Numbers for status and metrics. */
extern uint64_t al_nr_hot (struct al *al);
extern uint64_t al_commits (struct al *al);

#endif /* REPLICATE_AL_H */
