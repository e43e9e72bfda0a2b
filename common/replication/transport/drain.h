/* SPDX-License-Identifier: BSD-3-Clause */
/* Sockets of aborted connections, kept until the server has closed
 * them. See drain.c.
 */

#ifndef REPLICATE_DRAIN_H
#define REPLICATE_DRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* What is known of a kept socket, and how its end can be told. */
enum drain_how {
  DRAIN_UNIX,           /* a Unix socket: asked of sock_diag */
  DRAIN_READABLE,       /* TCP, open for reading: read to its end */
  DRAIN_PEER_CLOSED,    /* the server's end was seen closed already */
  DRAIN_UNKNOWABLE,     /* a reset, a timeout, TLS aborted first */
};

/* A kept socket (struct leg's drain[]). */
struct drain_sock {
  int fd;
  bool readable;        /* DRAIN_READABLE */
  bool unknowable;      /* it cannot tell by itself (the operator can) */
};

/* What drain_pending found. */
struct drain_report {
  uint64_t since_ns;    /* since when the oldest is kept */
  size_t blind;         /* Unix sockets the kernel cannot tell about */
  size_t unknowable;
};

/* Warn, at start, if this kernel cannot say when the server of an
 * aborted Unix connection has closed it: such a leg would never come
 * back.
 */
extern void drain_check_kernel (void);

/* Keep fd, the socket of an aborted connection of l, until its server
 * has closed it; how says what is known of it (enum drain_how).
 */
extern void drain_adopt (struct leg *l, int fd, enum drain_how how);

/* Forget the sockets whose server has closed them; return how many are
 * left, and in *r since when the oldest has been waited for, how many
 * of them the kernel cannot tell about, and how many cannot be told by
 * themselves at all (a reset, a TLS connection we aborted first).
 */
extern size_t drain_pending (struct leg *l, struct drain_report *r);

/* The operator says the server of l has been restarted, or its host is
 * gone: nothing sent on the old connections can land any more.
 */
extern size_t drain_forget (struct leg *l);

/* How many connections of l's server on a Unix socket are open though
 * their client has gone?
 */
extern int drain_orphans (const struct leg *l);

/* How many connections of this network namespace to the TCP server of
 * the open leg l, left by a process that has gone, still wait for that
 * server's close?
 */
extern int drain_tcp_orphans (const struct leg *l);

/* Say in buf that n connections of a leg's server whose client has gone
 * are still open: the leg is not opened meanwhile.
 */
extern void drain_say_orphans (char *buf, size_t len, int n);

/* Close every socket still kept (the volume, or the leg, goes away). */
extern void drain_free (struct leg *l);

#endif /* REPLICATE_DRAIN_H */
