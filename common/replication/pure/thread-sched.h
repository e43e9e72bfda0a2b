/* SPDX-License-Identifier: BSD-3-Clause */
/* The thread policy by queue depth, sched=auto. See sched.c. */

#ifndef REPLICATE_THREAD_SCHED_H
#define REPLICATE_THREAD_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum thread_sched { TS_UNSEEN, TS_NORMAL, TS_BATCH, TS_FOREIGN };

/* The class a thread in class cur should move to, for a lone request or
 * for one behind depth sleeping issuers (pure; unit tested).
 */
extern enum thread_sched sched_next (enum thread_sched cur, bool lone,
                                     unsigned depth);

/* Adapt the calling thread's policy to what it is about to wait for: a
 * lone request, or one behind depth sleeping issuers.
 */
extern void sched_adapt (bool lone, unsigned depth);

#endif /* REPLICATE_THREAD_SCHED_H */
