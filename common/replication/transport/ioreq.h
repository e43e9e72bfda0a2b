/* SPDX-License-Identifier: BSD-3-Clause */
/* Requests fanned out to legs: issue, count down, wait, time out. See
 * ioreq.c.
 */

#ifndef REPLICATE_IOREQ_H
#define REPLICATE_IOREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Prepare a request. */
extern void ioreq_init (struct ioreq *r, struct volume *v);

/* Issue cmd to leg l on its least busy connection. */
extern void ioreq_submit (struct ioreq *r, struct leg *l,
                          const struct leg_cmd *cmd);

/* Issue cmd to leg l on connection c (NULL: the least busy one). */
extern void ioreq_submit_on (struct ioreq *r, struct leg *l, struct conn *c,
                             const struct leg_cmd *cmd);

/* Prepare a request to leg l alone, its issuer waiting on the leg's
 * poller (an asynchronous leg's own: see ioreq.c).
 */
extern void ioreq_init_for_leg (struct ioreq *r, struct leg *l);

/* Wait until every leg has answered, timing out silent legs. */
extern void ioreq_wait (struct ioreq *r);

/* Wake-ups of issuers are deferred by completion callbacks until the
 * thread that ran them has let go of the libnbd handle lock: a callback
 * runs with that lock held, and a futex wake inside it would make every
 * worker issuing on the same connection wait for it.
 */
extern void ioreq_wake_deferred (struct conn *c);

/* One leg's command on connection s->conn is complete (libnbd's
 * callback, or the wire's reader): count it and record its result.
 */
extern void ioreq_slot_done (struct ioslot *s, int err);

/* Pass base:allocation extents (nr_entries numbers: length, type pairs)
 * starting at offset to the request's extent function.
 */
extern int ioreq_slot_extents (struct ioslot *s, uint64_t offset,
                               const uint32_t *entries, size_t nr_entries);

/* Wait, then make FUA writes durable on the legs that do not support
 * FUA.
 */
extern void ioreq_wait_fua (struct ioreq *r);

/* In a finished request, flush the legs that took a FUA write without
 * FUA, and count a failed flush as that leg's error.
 */
extern void ioreq_fua_flush (struct ioreq *r);

/* An asynchronous request (r->on_done set) has been issued to every
 * leg: give up the issuer's count.
 */
extern void ioreq_release (struct ioreq *r);

/* The deadline of an asynchronous request, which nobody waits on: its
 * owner calls this from time to time (now from now_ns) while the
 * request is in flight.
 */
extern void ioreq_expire (struct ioreq *r, uint64_t now);

/* The error of leg li in a finished request: its errno, ETIMEDOUT if it
 * was timed out, or 0.
 */
extern int ioreq_leg_error (const struct ioreq *r, unsigned li);

/* Release the request (after ioreq_wait): it holds no resource. */
extern void ioreq_destroy (struct ioreq *r);

/* Run one command on one leg and wait (FUA made durable), on the leg's
 * poller.
 */
extern int ioreq_sync_io (struct leg *l, const struct leg_cmd *cmd);

#endif /* REPLICATE_IOREQ_H */
