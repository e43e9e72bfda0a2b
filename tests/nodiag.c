/* SPDX-License-Identifier: BSD-3-Clause */
/* A preload library for the tests: a kernel without sock_diag.
 *
 * Loaded into a controller (CONTROLLER_PRELOAD in functions.sh), it
 * makes every socket (AF_NETLINK, ..., NETLINK_SOCK_DIAG) fail with
 * EPROTONOSUPPORT, as on a kernel built without it, and passes every
 * other socket call to the C library.  The engine must then say that
 * it cannot tell when an aborted Unix connection's server closed it
 * (drain.c), not wait in silence.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <linux/netlink.h>

/* socket(2), refusing sock_diag. */
int
socket (int domain, int type, int protocol)
{
  static int (*real_socket) (int, int, int);

  if (domain == AF_NETLINK && protocol == NETLINK_SOCK_DIAG) {
    errno = EPROTONOSUPPORT;
    return -1;
  }
  if (real_socket == NULL)
    real_socket = (int (*) (int, int, int)) dlsym (RTLD_NEXT, "socket");
  return real_socket (domain, type, protocol);
}
