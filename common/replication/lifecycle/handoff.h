/* SPDX-License-Identifier: BSD-3-Clause */
/* Handing the NBD clients over at a clean stop (handoff.c). */

#ifndef REPLICATE_HANDOFF_H
#define REPLICATE_HANDOFF_H

struct volume;

/* Take SIGTERM and SIGINT from nbdkit: on either, close the NBD client
 * connections unanswered, then let nbdkit stop as it would have.  Call
 * once nbdkit has installed its handlers (.after_fork).  0 or -1.
 */
extern int handoff_start (struct volume *v);

/* Give the signals back to nbdkit and end the thread (engine_stop). */
extern void handoff_stop (void);

#endif /* REPLICATE_HANDOFF_H */
