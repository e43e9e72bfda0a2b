/* SPDX-License-Identifier: BSD-3-Clause */
/* One connection to a leg: connecting, aborting, closing. See conn.c. */

#ifndef REPLICATE_CONN_H
#define REPLICATE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Connect to the leg's URI, finishing the handshake before the deadline
 * (timeout seconds).
 */
extern struct conn *conn_connect (struct leg *leg, double timeout,
                                  bool *refused, char *err, size_t errlen);

/* Abort the connection: every command in flight fails (their
 * completions run with ENOTCONN, in the poller).
 */
extern void conn_shutdown (struct conn *c);

/* Close the connection and free it. */
extern void conn_close (struct conn *c);

#endif /* REPLICATE_CONN_H */
