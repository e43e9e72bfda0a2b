/* SPDX-License-Identifier: BSD-3-Clause */
/* Draining: knowing when an aborted connection's server can no longer
 * apply what it had read.
 *
 * Shutting down our side of a socket (a timeout, a failed leg) ends our
 * requests at once, but not the server's: a request it has already
 * read goes on, and a write that was held up lands whenever the server
 * gets to it, after we gave up on it.  Were the leg reconnected,
 * resynced and called uptodate meanwhile, that late write would
 * overwrite newer data on it alone (DESIGN.md section 13).  nbdkit, like
 * any NBD server that keeps the protocol, closes a connection whose
 * client went away only once the requests it had read are finished.
 *
 * So the socket of a connection that did not end cleanly is not closed
 * with the connection: conn_close gives it to its leg (drain_adopt),
 * which keeps it until the server has closed its end (drain_pending,
 * asked before every reconnection).  Until then the leg is not
 * reconnected at all, so nothing new reaches it before the old writes
 * are done; the hot activity-log extents ORed into its bitmap when it
 * failed cover the writes that were in flight, and its resync starts
 * after the drain, so it copies them over whatever landed late.
 *
 * Whether the server has closed its end, from our shut-down socket:
 *   - Unix sockets: the kernel's sock_diag reports the peer's inode, 0
 *     once the peer has closed it;
 *   - TCP: our state is TIME_WAIT or CLOSING once the peer's FIN came.
 *     A reset (state CLOSE) does not tell whether the server's other
 *     workers are done, so it does not count as drained;
 *   - anything else, or sock_diag missing: never drained.
 * A server that never closes keeps the leg out until it is restarted
 * (its sockets close with it); the leg's last_error says so.  A kernel
 * without unix_diag (a module, loaded on the first query where
 * modprobe can find it) keeps a Unix-socket leg out for good: its
 * last_error names the module.
 *
 * Locking: the leg's list is under conns_lock (a leaf).
 */

#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#include "internal.h"
#include "array.h"
#include "cleanup.h"

/* The inode of the peer of the Unix socket whose inode is ino (0: the
 * peer has closed its end, or there is none).  Returns -1 if the kernel
 * cannot say.
 */
static int
unix_peer_inode (ino_t ino, uint32_t *peer)
{
  struct {
    struct nlmsghdr nlh;
    struct unix_diag_req req;
  } msg = {
    .nlh = {
      .nlmsg_len = sizeof msg,
      .nlmsg_type = SOCK_DIAG_BY_FAMILY,
      .nlmsg_flags = NLM_F_REQUEST,
    },
    .req = {
      .sdiag_family = AF_UNIX,
      .udiag_states = ~0u,
      .udiag_ino = (uint32_t) ino,
      .udiag_show = UDIAG_SHOW_PEER,
      .udiag_cookie = { ~0u, ~0u },     /* no cookie: find by inode */
    },
  };
  union {
    struct nlmsghdr nlh;
    char bytes[1024];
  } reply;
  const struct unix_diag_msg *m;
  const struct rtattr *a;
  ssize_t n;
  int len, fd, r = -1;

  fd = socket (AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd == -1)
    return -1;
  if (send (fd, &msg, sizeof msg, 0) != (ssize_t) sizeof msg)
    goto out;
  n = recv (fd, &reply, sizeof reply, 0);
  if (n < (ssize_t) NLMSG_LENGTH (sizeof *m) || !NLMSG_OK (&reply.nlh, n) ||
      reply.nlh.nlmsg_type != SOCK_DIAG_BY_FAMILY)
    goto out;
  m = NLMSG_DATA (&reply.nlh);
  if (m->udiag_ino != ino)
    goto out;
  *peer = 0;
  len = (int) (reply.nlh.nlmsg_len - NLMSG_LENGTH (sizeof *m));
  for (a = (const struct rtattr *) (m + 1); RTA_OK (a, len);
       a = RTA_NEXT (a, len))
    if (a->rta_type == UNIX_DIAG_PEER &&
        RTA_PAYLOAD (a) >= sizeof (uint32_t))
      memcpy (peer, RTA_DATA (a), sizeof *peer);
  r = 0;
 out:
  close (fd);
  return r;
}

/* Has the server closed its end of our (shut down) socket fd?  Returns
 * 1 if it has, 0 if not, -1 if the kernel cannot say (no unix_diag).
 */
static int
peer_closed (int fd)
{
  int domain;
  socklen_t len = sizeof domain;
  struct stat st;
  uint32_t peer;
  struct tcp_info ti;

  if (getsockopt (fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1)
    return 0;
  switch (domain) {
  case AF_UNIX:
    if (fstat (fd, &st) == -1 || unix_peer_inode (st.st_ino, &peer) == -1)
      return -1;
    return peer == 0;
  case AF_INET:
  case AF_INET6:
    len = sizeof ti;
    if (getsockopt (fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1)
      return 0;
    return ti.tcpi_state == TCP_TIME_WAIT || ti.tcpi_state == TCP_CLOSING;
  default:
    return 0;
  }
}

/* Warn, at start, if this kernel cannot say when the server of an
 * aborted Unix connection has closed it: such a leg would never come
 * back (see above).  Asked of a socket pair of our own.
 */
void
drain_check_kernel (void)
{
  int sv[2];
  struct stat st;
  uint32_t peer;

  if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1)
    return;
  if (fstat (sv[0], &st) == 0 && unix_peer_inode (st.st_ino, &peer) == -1)
    nbdkit_error ("warning: this kernel does not answer sock_diag for Unix "
                  "sockets (modprobe unix_diag): a leg on a Unix socket "
                  "whose connection is aborted will not be used again "
                  "until it does");
  close (sv[0]);
  close (sv[1]);
}

/* Keep fd, the socket of an aborted connection of l, until its server
 * has closed it.  Takes ownership of fd.
 */
void
drain_adopt (struct leg *l, int fd)
{
  int *p;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);

  if (l->nr_drain == 0)
    l->drain_since_ns = now_ns ();
  p = array_reserve_one (l->drain_fds, l->nr_drain, &l->cap_drain,
                         sizeof *p, 8);
  if (p == NULL) {
    /* Out of memory: the socket cannot be watched, so the leg is kept
     * out for good (until a restart) rather than trusted.
     */
    nbdkit_error ("leg %u: out of memory tracking an old connection: "
                  "the leg is not used again until a restart", l->index);
    l->drain_untracked = true;
    close (fd);
    return;
  }
  l->drain_fds = p;
  l->drain_fds[l->nr_drain++] = fd;
}

/* Forget the sockets whose server has closed them; return how many are
 * left, since when the oldest has been waited for (*since_ns), and how
 * many of them the kernel cannot tell about (*blind).
 */
size_t
drain_pending (struct leg *l, uint64_t *since_ns, size_t *blind)
{
  size_t i = 0;
  int closed;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);

  *blind = 0;
  while (i < l->nr_drain) {
    closed = peer_closed (l->drain_fds[i]);
    if (closed == 1) {
      close (l->drain_fds[i]);
      l->drain_fds[i] = l->drain_fds[--l->nr_drain];
      continue;
    }
    *blind += closed == -1;
    i++;
  }
  *since_ns = l->drain_since_ns;
  return l->nr_drain + l->drain_untracked;
}

/* Close every socket still kept (the volume, or the leg, goes away). */
void
drain_free (struct leg *l)
{
  size_t i;

  for (i = 0; i < l->nr_drain; ++i)
    close (l->drain_fds[i]);
  free (l->drain_fds);
  l->drain_fds = NULL;
  l->nr_drain = l->cap_drain = 0;
}
