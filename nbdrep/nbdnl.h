/* SPDX-License-Identifier: BSD-3-Clause */
/* The kernel's NBD device over generic netlink (nbdnl.c). */

#ifndef NBDREP_NBDNL_H
#define NBDREP_NBDNL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nbdnl;

/* What the kernel is told about the export at connect. */
struct nbdnl_device {
  uint32_t index;               /* N of /dev/nbdN */
  uint64_t size;                /* bytes */
  uint64_t block_size;          /* a power of 2 in [512, page size] */
  uint64_t server_flags;        /* NBD_FLAG_* of linux/nbd.h */
  uint64_t timeout;             /* request timeout, seconds */
  uint64_t dead_timeout;        /* how long requests wait for a socket */
  const char *backend;          /* backend identifier */
};

/* Open a command socket (events false) or an event socket (events
 * true: member of the NBD multicast group, non-blocking).  NULL with
 * errno set on failure: ENOENT when the kernel has no NBD netlink
 * family (no nbd driver loaded).
 */
extern struct nbdnl *nbdnl_open (bool events);
extern void nbdnl_close (struct nbdnl *nl);

/* Each returns 0 or a negative errno (the kernel's answer); nothing is
 * printed.
 */
extern int nbdnl_connect (struct nbdnl *nl, const struct nbdnl_device *dev,
                          const int *fds, size_t n);
extern int nbdnl_reconfigure (struct nbdnl *nl, uint32_t index,
                              const char *backend,
                              const int *fds, size_t n);
extern int nbdnl_disconnect (struct nbdnl *nl, uint32_t index);
/* Sets *connected: does the device have a configuration (sockets)? */
extern int nbdnl_status (struct nbdnl *nl, uint32_t index, bool *connected);

/* The event socket's descriptor, to poll for input. */
extern int nbdnl_fd (struct nbdnl *nl);
/* Read the pending events: true if one said that a connection of
 * device index died, or if events were lost (the socket overflowed).
 */
extern bool nbdnl_link_dead (struct nbdnl *nl, uint32_t index);

#endif /* NBDREP_NBDNL_H */
