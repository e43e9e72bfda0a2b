/* SPDX-License-Identifier: BSD-3-Clause */
/* The wire: NBD's transmission phase spoken by the engine itself on a
 * connection libnbd has opened (wire.c).
 */

#ifndef REPLICATE_WIRE_H
#define REPLICATE_WIRE_H

#include <stdbool.h>
#include <stdint.h>

struct conn;
struct ioslot;
struct wire;

/* NBD command types and flags (the protocol's values). */
enum {
  NBD_CMD_READ = 0,
  NBD_CMD_WRITE = 1,
  NBD_CMD_FLUSH = 3,
  NBD_CMD_CACHE = 5,
  NBD_CMD_WRITE_ZEROES = 6,
  NBD_CMD_BLOCK_STATUS = 7,
};

/* Where the engine's debug flag lives: -D replicate.wire=0 makes every
 * connection carry its commands through libnbd instead.
 */
extern int replicate_debug_wire;

/* Take over the transmission phase of c (its handshake is done; fd is
 * its socket).  structured: structured replies were negotiated; tcp:
 * the socket is TCP (see Death in wire.c).
 * Returns NULL (errno set) if memory runs out.
 */
extern struct wire *wire_new (int fd, bool structured, bool tcp);
extern void wire_free (struct wire *w);

/* Send one command.  payload (count bytes) goes with NBD_CMD_WRITE;
 * buf receives NBD_CMD_READ's data.  Returns 0, or an errno if the
 * command could not be sent (it will not complete then).  Any thread.
 */
extern int wire_issue (struct conn *c, uint16_t type, uint16_t flags,
                       void *buf, uint64_t offset, uint32_t count,
                       struct ioslot *s);

/* Batch this thread's commands: from wire_cork to wire_uncork they are
 * queued, then each connection's queue goes out in one system call.
 * The cork (the caller's, e.g. on its stack) remembers the connections.
 */
#define WIRE_CORK_MAX 64
struct wire_cork {
  unsigned n;
  struct conn *conns[WIRE_CORK_MAX];
};
extern void wire_cork (struct wire_cork *k);
extern void wire_uncork (struct wire_cork *k);

/* The poller's side (the connection's driver only). */
extern void wire_on_readable (struct conn *c);
extern void wire_on_writable (struct conn *c);
extern bool wire_wants_write (const struct wire *w);
extern bool wire_has_queued (const struct wire *w);
extern bool wire_is_dead (const struct wire *w);
extern bool wire_saw_error (const struct wire *w);
extern void wire_abort (struct conn *c);

#endif /* REPLICATE_WIRE_H */
