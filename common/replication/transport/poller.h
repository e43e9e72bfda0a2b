/* SPDX-License-Identifier: BSD-3-Clause */
/* The epoll loop driving every leg connection of a volume. See
 * poller.c.
 */

#ifndef REPLICATE_POLLER_H
#define REPLICATE_POLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Create a poller (no thread yet); with sched_auto its thread's policy
 * follows the queue depth (sched.c).
 */
extern struct poller *poller_new (bool sched_auto);

/* Create a leg's own poller, its thread driving always (no issuer
 * leads it): see poller.c.
 */
extern struct poller *poller_new_own (void);

/* Free a poller whose thread is stopped and which has no connection. */
extern void poller_free (struct poller *p);

/* Start the thread. */
extern int poller_start (struct poller *p);

/* Stop and join the thread; the connections stay registered. */
extern void poller_stop (struct poller *p);

/* Take over the driving for good. */
extern int poller_adopt (struct poller *p);

/* The adopter's iteration, once the descriptor is readable. */
extern void poller_drive (struct poller *p);

/* Give the driving back to a new thread. */
extern int poller_release (struct poller *p);

/* From now on the thread (or an adopter) drives, never an issuer. */
extern void poller_use_thread (struct poller *p);

/* Take the token to drive from the calling thread, if issuers may lead
 * and nobody drives.
 */
extern bool poller_try_lead (struct poller *p);

/* One iteration by the leader, waiting up to timeout_ms (-1: no limit). */
extern int poller_lead (struct poller *p, int timeout_ms);

/* Give the token back; if somebody still needs a driver, wake the
 * thread.
 */
extern void poller_end_lead (struct poller *p);

/* An issuer starts (poller_follow, which returns how many others were
 * waiting) or stops (poller_unfollow) waiting for somebody else to
 * complete its request.
 */
extern unsigned poller_follow (struct poller *p);
extern void poller_unfollow (struct poller *p);

/* If nobody drives and issuers may lead, run one iteration without
 * waiting: what an idle volume's connections say (an end of stream) is
 * then heard.
 */
extern void poller_look (struct poller *p);

/* -D replicate.lead=0: issuers never lead. */
extern int replicate_debug_lead;

/* Register a connection. */
extern int poller_attach (struct conn *c, struct poller *p);

/* Unregister a connection and wait until the poller cannot be using it
 * any more.
 */
extern void poller_detach (struct conn *c);

/* After issuing a command through libnbd: if libnbd is left with bytes
 * to send, have the poller wait for the socket to be writable.
 */
extern void poller_kick_if_needed (struct conn *c);

/* An issuer left bytes to send: have the poller wait for the socket to
 * be writable.
 */
extern void poller_want_write (struct conn *c);

/* An aborted wire on TCP, whose socket is not shut down for reading
 * (conn_shutdown, or a send error): have the driver fail its commands
 * (wire_abort).
 */
extern void poller_want_abort (struct conn *c);

/* An issuer has queued a command: should it leave the sending to the
 * connection's driver, in the middle of an iteration?
 */
extern bool poller_defer_send (const struct conn *c);

/* Is nobody driving the connection's poller (so no reader can want the
 * wire's lock while an issuer sends)?
 */
extern bool poller_nobody_drives (const struct conn *c);

#endif /* REPLICATE_POLLER_H */
