/* SPDX-License-Identifier: BSD-3-Clause */
/* Handing the NBD clients over at a clean stop (handoff.c). */

#ifndef REPLICATE_HANDOFF_H
#define REPLICATE_HANDOFF_H

struct volume;

/* How the volume stops cleanly (engine_stop). */
typedef void (*handoff_stop_fn) (struct volume *v);

/* Take the signals nbdkit quits on (SIGTERM, SIGINT, SIGHUP, SIGQUIT)
 * from it: on any, with NBD clients connected, close the volume to
 * their requests, stop it (stop) and end the process; without, let
 * nbdkit stop as it would have.  Call once nbdkit has installed its
 * handlers (.after_fork).  0 or -1.
 */
extern int handoff_start (struct volume *v, handoff_stop_fn stop);

/* Give the signals back to nbdkit and end the thread (engine_stop). */
extern void handoff_stop (void);

#endif /* REPLICATE_HANDOFF_H */
