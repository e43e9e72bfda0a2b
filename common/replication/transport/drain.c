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
 * Whether the server has closed its end, from our aborted socket:
 *   - Unix sockets: the kernel's sock_diag reports the peer's inode, 0
 *     once the peer has closed it;
 *   - TCP: end of file.  An aborted TCP connection is shut down for
 *     sending only (conn_shutdown), so that what the server still sends
 *     (the replies of the requests we gave up on) is received, not
 *     answered with a reset, which would leave us nothing to watch; we
 *     read and drop it until the server's FIN.  A connection whose end
 *     we saw as a reset or a timeout (ECONNRESET, ETIMEDOUT: by the
 *     engine's wire, or here) proves nothing: a reset can come from a
 *     firewall, or from a server kernel that gave up on the socket
 *     while a worker still holds a write, so it never counts.  Our FIN
 *     is retransmitted for as long as a partition lasts (a long
 *     TCP_USER_TIMEOUT), so a healed link still drains.  TLS
 *     connections, which only libnbd can read, are shut down both ways
 *     as before: they count only if the server's FIN had come before we
 *     shut them down (CLOSE_WAIT then, the server closed first);
 *   - anything else, or sock_diag missing: never drained.
 * A server that never closes keeps the leg out until it is restarted
 * (its sockets close with it).  What cannot be told by itself (a
 * reset, a TLS connection we aborted first, a host gone) is the
 * operator's to tell: "nbdrep resync CTL INDEX --server-restarted"
 * (drain_forget) says that the server of the leg has been restarted or
 * is gone, so that nothing sent on the old connections can land any
 * more; the leg's last_error says when that is needed.  A kernel
 * without unix_diag (a module, loaded on the first query where
 * modprobe can find it) keeps a Unix-socket leg out for good: its
 * last_error names the module.
 *
 * Connections we no longer hold.  A controller that was killed could
 * not keep its sockets: its kernel closed them, and the servers go on
 * with what they had read.  For a leg on a Unix socket the kernel can
 * still tell: a server's end of a connection carries the name of the
 * socket it was accepted on, and its peer's inode is 0 once the client
 * has closed.  drain_orphans counts such connections of a leg's
 * server (any client's: a killed controller's, a killed nbdrep's);
 * while there are any, the leg is not opened, at start (the election
 * waits up to wait= for it, then goes on without it if it can) as on
 * a reconnection.  Over TCP the server's end lives on its host, but a
 * controller killed on this host leaves its end here: the kernel keeps
 * a socket that no process holds (inode 0) in FIN_WAIT1 or FIN_WAIT2
 * until the server closes too, which nbdkit does once its requests on
 * that connection are done.  drain_tcp_orphans counts such sockets to
 * the server of a leg just opened (the peer of its first connection);
 * while there are any, it is closed again before any request.  What it
 * cannot see: a dead process's socket that had unread replies (the
 * kernel resets it), a controller that ran on another host, and a
 * server that holds a write longer than the kernel keeps an orphan in
 * FIN_WAIT2 (net.ipv4.tcp_fin_timeout, 60 s by default).
 *
 * Locking: the leg's list is under conns_lock (a leaf).
 */

#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

#include "internal.h"
#include "drain.h"
#include "array.h"
#include "cleanup.h"
#include "params.h"

/* Send one sock_diag request of len bytes.  Returns the netlink socket
 * to read the answer from, or -1.
 */
static int
diag_send (const void *msg, size_t len)
{
  int fd = socket (AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

  if (fd == -1)
    return -1;
  if (send (fd, msg, len, 0) != (ssize_t) len) {
    close (fd);
    return -1;
  }
  return fd;
}

/* Ask sock_diag about Unix sockets: the one whose inode is ino, or
 * (ino 0) every one in states, with the attributes in show.  Returns
 * the netlink socket to read the answer from, or -1.
 */
static int
unix_diag_ask (uint32_t ino, uint32_t states, uint32_t show)
{
  struct {
    struct nlmsghdr nlh;
    struct unix_diag_req req;
  } msg = {
    .nlh = {
      .nlmsg_len = sizeof msg,
      .nlmsg_type = SOCK_DIAG_BY_FAMILY,
      .nlmsg_flags = NLM_F_REQUEST | (ino == 0 ? NLM_F_DUMP : 0),
    },
    .req = {
      .sdiag_family = AF_UNIX,
      .udiag_states = states,
      .udiag_ino = ino,
      .udiag_show = show,
    },
  };

  if (ino != 0)     /* no cookie: find by inode */
    msg.req.udiag_cookie[0] = msg.req.udiag_cookie[1] = ~0u;
  return diag_send (&msg, sizeof msg);
}

/* The inode of the peer of the Unix socket whose inode is ino (0: the
 * peer has closed its end, or there is none).  Returns -1 if the kernel
 * cannot say.
 */
static int
unix_peer_inode (ino_t ino, uint32_t *peer)
{
  union {
    struct nlmsghdr nlh;
    char bytes[1024];
  } reply;
  const struct unix_diag_msg *m;
  const struct rtattr *a;
  ssize_t n;
  int len, fd, r = -1;

  fd = unix_diag_ask ((uint32_t) ino, ~0u, UDIAG_SHOW_PEER);
  if (fd == -1)
    return -1;
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

/* Does the UNIX_DIAG_NAME attribute a (of a socket bound or accepted on
 * a path) name path?
 */
static bool
names_path (const struct rtattr *a, const char *path)
{
  size_t n = RTA_PAYLOAD (a), len = strlen (path);
  const char *name = RTA_DATA (a);

  return (n == len || (n == len + 1 && name[len] == '\0')) &&
    memcmp (name, path, len) == 0;
}

/* Is the socket of one sock_diag reply message (len bytes of
 * attributes after it) a connection accepted on the Unix socket at path
 * (arg) whose client has closed its end?
 */
static bool
unix_orphan (const void *msg, int len, const void *arg)
{
  const struct unix_diag_msg *m = msg;
  const char *path = arg;
  const struct rtattr *a;
  bool named = false, orphan = false;
  uint32_t peer;

  for (a = (const struct rtattr *) (m + 1); RTA_OK (a, len);
       a = RTA_NEXT (a, len)) {
    if (a->rta_type == UNIX_DIAG_NAME)
      named = names_path (a, path);
    else if (a->rta_type == UNIX_DIAG_PEER &&
             RTA_PAYLOAD (a) >= sizeof peer) {
      memcpy (&peer, RTA_DATA (a), sizeof peer);
      orphan = peer == 0;
    }
  }
  return named && orphan;
}

/* Read a sock_diag dump from fd (and close it): how many of its
 * messages (head bytes before their attributes) match?  Returns -1 if
 * the kernel cannot say.
 */
static int
count_dumped (int fd, size_t head,
              bool (*match) (const void *msg, int len, const void *arg),
              const void *arg)
{
  union {
    struct nlmsghdr nlh;
    char bytes[32768];
  } reply;
  const struct nlmsghdr *h;
  ssize_t n;
  int count = 0, r = -1;

  for (;;) {
    n = recv (fd, &reply, sizeof reply, 0);
    if (n <= 0)
      goto out;
    for (h = &reply.nlh; NLMSG_OK (h, n); h = NLMSG_NEXT (h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) {
        r = count;
        goto out;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < head)
        goto out;
      count += match (NLMSG_DATA (h), (int) (h->nlmsg_len - head), arg);
    }
  }
 out:
  close (fd);
  return r;
}

/* How many connections to the Unix socket at path does its server
 * still have open although their client has closed its end?  Returns
 * -1 if the kernel cannot say.
 */
static int
unix_orphans (const char *path)
{
  int fd = unix_diag_ask (0, 1u << TCP_ESTABLISHED,
                          UDIAG_SHOW_NAME | UDIAG_SHOW_PEER);

  if (fd == -1)
    return -1;
  return count_dumped (fd, NLMSG_LENGTH (sizeof (struct unix_diag_msg)),
                       unix_orphan, path);
}

/* Ask sock_diag for every TCP socket of family in states.  Returns the
 * netlink socket to read the dump from, or -1.
 */
static int
tcp_diag_dump (int family, uint32_t states)
{
  struct {
    struct nlmsghdr nlh;
    struct inet_diag_req_v2 req;
  } msg = {
    .nlh = {
      .nlmsg_len = sizeof msg,
      .nlmsg_type = SOCK_DIAG_BY_FAMILY,
      .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
    },
    .req = {
      .sdiag_family = (uint8_t) family,
      .sdiag_protocol = IPPROTO_TCP,
      .idiag_states = states,
    },
  };

  return diag_send (&msg, sizeof msg);
}

/* Is the TCP socket of one sock_diag reply message held by no process
 * (inode 0: its owner has gone) and connected to the server at the
 * address arg (a struct sockaddr_storage)?
 */
static bool
tcp_orphan (const void *msg, int len, const void *arg)
{
  const struct inet_diag_msg *m = msg;
  const struct sockaddr_storage *peer = arg;
  const struct sockaddr_in *a4 = (const struct sockaddr_in *) peer;
  const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *) peer;

  (void) len;
  if (m->idiag_inode != 0 || m->idiag_family != peer->ss_family)
    return false;
  if (peer->ss_family == AF_INET)
    return m->id.idiag_dport == a4->sin_port &&
      memcmp (m->id.idiag_dst, &a4->sin_addr, sizeof a4->sin_addr) == 0;
  return m->id.idiag_dport == a6->sin6_port &&
    memcmp (m->id.idiag_dst, &a6->sin6_addr, sizeof a6->sin6_addr) == 0;
}

/* How many connections of l's server on a Unix socket are open though
 * their client has gone (see the top)?  0 for other legs, and where
 * the kernel cannot say (drain_check_kernel warned at start).
 */
int
drain_orphans (const struct leg *l)
{
  char path[sizeof ((struct sockaddr_un *) NULL)->sun_path];
  int n;

  if (l->uri == NULL || config_unix_socket (l->uri, path, sizeof path) == -1)
    return 0;
  n = unix_orphans (path);
  return n > 0 ? n : 0;
}

/* How many connections of this network namespace to the TCP server of
 * the open leg l, left by a process that has gone, still wait for that
 * server's close (see the top)?  0 for other legs, and where the kernel
 * cannot say.  Called between leg_open and the first request.
 */
int
drain_tcp_orphans (const struct leg *l)
{
  struct sockaddr_storage peer;
  socklen_t len = sizeof peer;
  int fd, n;

  if (l->nr_conns == 0 || !l->conns[0]->tcp ||
      getpeername (l->conns[0]->fd, (struct sockaddr *) &peer, &len) == -1 ||
      (peer.ss_family != AF_INET && peer.ss_family != AF_INET6))
    return 0;
  fd = tcp_diag_dump (peer.ss_family,
                      (1u << TCP_FIN_WAIT1) | (1u << TCP_FIN_WAIT2));
  if (fd == -1)
    return 0;
  n = count_dumped (fd, NLMSG_LENGTH (sizeof (struct inet_diag_msg)),
                    tcp_orphan, &peer);
  return n > 0 ? n : 0;
}

/* Say in buf that n connections of a leg's server whose client has
 * gone are still open: the leg is not opened meanwhile.
 */
void
drain_say_orphans (char *buf, size_t len, int n)
{
  snprintf (buf, len, "its server still has %d connection%s open whose "
            "client has gone (a controller that was killed?): writes read "
            "from %s may still land; the leg is not used until it closes %s",
            n, n == 1 ? "" : "s", n == 1 ? "it" : "them",
            n == 1 ? "it" : "them");
}

/* Read and drop what the server still sends on an aborted TCP
 * socket, which is open for reading.  Returns 1 at its end of file, 0
 * if it may send more, -1 if the socket ended in an error (a reset or a
 * timeout: nothing can be told from it).  At most 16 MiB per call.
 */
static int
read_to_end (int fd)
{
  char buf[65536];
  size_t total = 0;
  ssize_t r;

  while (total < 16 * 1024 * 1024) {
    r = recv (fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      total += r;
      continue;
    }
    if (r == 0)
      return 1;
    if (errno == EINTR)
      continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
  return 0;
}

/* Has the server closed its end of the kept socket d?  Returns 1 if it
 * has, 0 if not (or it cannot be told: d->unknowable), -1 if the kernel
 * cannot say (no unix_diag).
 */
static int
peer_closed (struct drain_sock *d)
{
  int domain;
  socklen_t len = sizeof domain;
  struct stat st;
  uint32_t peer;

  if (d->unknowable)
    return 0;
  if (getsockopt (d->fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1)
    return 0;
  switch (domain) {
  case AF_UNIX:
    if (fstat (d->fd, &st) == -1 || unix_peer_inode (st.st_ino, &peer) == -1)
      return -1;
    return peer == 0;
  case AF_INET:
  case AF_INET6:
    if (!d->readable)
      return 0;
    switch (read_to_end (d->fd)) {
    case 1: return 1;
    case -1: d->unknowable = true; return 0;
    default: return 0;
    }
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

/* Keep the TCP FIN of an aborted socket retransmitted for as long as
 * a partition may last (the default gives up after about 15 minutes,
 * and a timed-out socket cannot be told from a reset one).
 */
static void
retransmit_for_long (int fd)
{
  unsigned ms = INT_MAX;

  setsockopt (fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

/* Keep fd, the socket of an aborted connection of l, until its server
 * has closed it; how says what is known of it (enum drain_how).  Takes
 * ownership of fd.
 */
void
drain_adopt (struct leg *l, int fd, enum drain_how how)
{
  struct drain_sock *p;

  if (how == DRAIN_PEER_CLOSED) {
    close (fd);
    return;
  }
  if (how == DRAIN_READABLE)
    retransmit_for_long (fd);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);
  if (l->nr_drain == 0)
    l->drain_since_ns = now_ns ();
  p = array_reserve_one (l->drain, l->nr_drain, &l->cap_drain,
                         sizeof *p, 8);
  if (p == NULL) {
    /* Out of memory: the socket cannot be watched, so the leg is kept
     * out (until a restart, or the operator's word) rather than
     * trusted.
     */
    nbdkit_error ("leg %u: out of memory tracking an old connection: "
                  "the leg is not used again until its server is "
                  "restarted and the operator says so", l->index);
    l->drain_untracked = true;
    close (fd);
    return;
  }
  l->drain = p;
  l->drain[l->nr_drain++] = (struct drain_sock) {
    .fd = fd,
    .readable = how == DRAIN_READABLE,
    .unknowable = how == DRAIN_UNKNOWABLE,
  };
}

/* Forget the sockets whose server has closed them; return how many are
 * left, and in *r since when the oldest has been waited for, how many
 * of them the kernel cannot tell about, and how many cannot be told by
 * themselves at all (a reset, a TLS connection we aborted first).
 */
size_t
drain_pending (struct leg *l, struct drain_report *r)
{
  size_t i = 0;
  int closed;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);

  r->blind = r->unknowable = 0;
  while (i < l->nr_drain) {
    struct drain_sock *d = &l->drain[i];

    closed = peer_closed (d);
    if (closed == 1) {
      close (d->fd);
      l->drain[i] = l->drain[--l->nr_drain];
      continue;
    }
    r->blind += closed == -1;
    r->unknowable += d->unknowable;
    i++;
  }
  r->since_ns = l->drain_since_ns;
  r->unknowable += l->drain_untracked;
  return l->nr_drain + l->drain_untracked;
}

/* The operator says the server of l has been restarted, or its host is
 * gone: nothing sent on the old connections can land any more.  Close
 * every socket kept.  Returns how many there were.
 */
size_t
drain_forget (struct leg *l)
{
  size_t n;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&l->conns_lock);

  n = l->nr_drain + l->drain_untracked;
  drain_free (l);
  l->drain_untracked = false;
  return n;
}

/* Close every socket still kept (the volume, or the leg, goes away). */
void
drain_free (struct leg *l)
{
  size_t i;

  for (i = 0; i < l->nr_drain; ++i)
    close (l->drain[i].fd);
  free (l->drain);
  l->drain = NULL;
  l->nr_drain = l->cap_drain = 0;
}
