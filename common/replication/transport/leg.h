/* SPDX-License-Identifier: BSD-3-Clause */
/* A leg: one replica, over NBD or the filter's plugin underneath. See
 * leg.c.
 */

#ifndef REPLICATE_LEG_H
#define REPLICATE_LEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Connect to a leg and learn its capabilities, waiting up to wait
 * seconds for it to answer.
 */
extern int leg_open (struct leg *l, double wait, bool *refused,
                     char *err, size_t errlen);

/* Stop sending to a leg and abort what is in flight: every pending
 * command completes soon with an error.
 */
extern void leg_shutdown (struct leg *l);

/* Close a leg's connections once nobody can use them any more: wait for
 * the issue window to empty and for every callback to have run
 * (aborting the connections if commands are still in flight).
 */
extern void leg_close (struct leg *l);
extern void leg_close_answered (struct leg *l, double grace);

/* Hand every connection to the leg's poller (leg_poller). */
extern int leg_attach (struct leg *l);

/* The poller that drives the leg's connections: its own or the
 * volume's.
 */
extern struct poller *leg_poller (const struct leg *l);

/* Give the leg a poller of its own, its thread driving always (an
 * asynchronous leg: see poller.c), and move its connections there.
 * Its thread is started with the volume's (legs_start_pollers), or by
 * the caller.  Returns 0 or -1 after nbdkit_error.  No command may be
 * in flight on the leg.
 */
extern int leg_own_poller (struct leg *l);

/* Move the leg's connections back to the volume's poller, then stop
 * and free its own (a promoted leg, a leg being freed).  Returns 0 or
 * -1 after nbdkit_error.  No command may be in flight on the leg.
 */
extern int leg_drop_own_poller (struct leg *l);

/* Start (stop) the threads of the volume's poller and of every leg's
 * own poller.
 */
extern int legs_start_pollers (struct volume *v);
extern void legs_stop_pollers (struct volume *v);

/* Enter the issue window. */
extern bool leg_enter (struct leg *l);

/* Leave the issue window. */
extern void leg_leave (struct leg *l);

/* The connection for the next request: the first one that is not
 * saturated, else the least busy.
 */
extern struct conn *leg_pick_conn (struct leg *l);

/* Remember the last error of a leg for status. */
extern void leg_set_error (struct leg *l, const char *fs, ...)
  __attribute__ ((format (printf, 2, 3)));

/* A name for messages: "leg 1 (nbd+unix:///?socket=/r1.sock)". */
extern const char *leg_name (const struct leg *l, char *buf, size_t len);

/* Schedule the next reconnection attempt of a failed leg, doubling the
 * delay.
 */
extern void leg_back_off_locked (struct leg *l);

#endif /* REPLICATE_LEG_H */
