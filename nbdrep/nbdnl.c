/* SPDX-License-Identifier: BSD-3-Clause */
/* The kernel's NBD device over generic netlink, with libnl-genl-3.
 *
 * The kernel's "nbd" generic netlink family (linux/nbd-netlink.h,
 * drivers/block/nbd.c) takes a device's sockets and parameters in one
 * NBD_CMD_CONNECT; NBD_CMD_RECONFIGURE gives it new sockets, each of
 * which replaces one that the kernel has marked dead (a socket it does
 * not need is not taken: the kernel answers that case with success and
 * ignores the rest); NBD_CMD_DISCONNECT ends the device's
 * configuration; NBD_CMD_STATUS says whether a device has one.  When
 * a socket dies the kernel multicasts NBD_CMD_LINK_DEAD with the
 * device's index to the group "nbd_mc_group".  Every command needs
 * CAP_SYS_ADMIN.
 *
 * A command socket sends one request at a time and reads until the
 * kernel's acknowledgement, keeping the kernel's errno (libnl would
 * translate it into its own codes).  The event socket is
 * non-blocking and only ever read.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>

#include <netlink/netlink.h>
#include <netlink/genl/genl.h>
#include <netlink/genl/ctrl.h>

#include <linux/nbd-netlink.h>

#include "nbdnl.h"

struct nbdnl {
  struct nl_sock *sock;
  int family;
};

/* What a request's replies left: the kernel's errno, the status. */
struct reply {
  bool done;
  int error;                    /* 0 or a negative errno */
  uint32_t index;               /* the device asked about (status) */
  bool connected;
};

/* The errno behind a libnl error code, for the few that matter. */
static int
nl_errno (int nlerr)
{
  switch (nlerr < 0 ? -nlerr : nlerr) {
  case NLE_OBJ_NOTFOUND: return ENOENT;
  case NLE_PERM: return EPERM;
  case NLE_NOMEM: return ENOMEM;
  case NLE_AGAIN: return EAGAIN;
  default: return EIO;
  }
}

/* Open a command or event socket (see nbdnl.h). */
struct nbdnl *
nbdnl_open (bool events)
{
  struct nbdnl *nl = calloc (1, sizeof *nl);
  int r = 0, group;

  if (nl == NULL)
    return NULL;
  nl->sock = nl_socket_alloc ();
  if (nl->sock == NULL) {
    free (nl);
    errno = ENOMEM;
    return NULL;
  }
  if ((r = genl_connect (nl->sock)) < 0 ||
      (r = nl->family = genl_ctrl_resolve (nl->sock,
                                           NBD_GENL_FAMILY_NAME)) < 0)
    goto err;
  if (events) {
    nl_socket_disable_seq_check (nl->sock);
    if ((r = group = genl_ctrl_resolve_grp (nl->sock, NBD_GENL_FAMILY_NAME,
                                            NBD_GENL_MCAST_GROUP_NAME)) < 0 ||
        (r = nl_socket_add_membership (nl->sock, group)) < 0 ||
        (r = nl_socket_set_nonblocking (nl->sock)) < 0)
      goto err;
  }
  return nl;

 err:
  nbdnl_close (nl);
  errno = nl_errno (r);
  return NULL;
}

/* Close a socket opened by nbdnl_open. */
void
nbdnl_close (struct nbdnl *nl)
{
  if (nl == NULL)
    return;
  nl_socket_free (nl->sock);
  free (nl);
}

/* libnl callback: the kernel's error or acknowledgement. */
static int
on_error (struct sockaddr_nl *nla __attribute__ ((unused)),
          struct nlmsgerr *e, void *arg)
{
  struct reply *rep = arg;

  rep->error = e->error;
  rep->done = true;
  return NL_STOP;
}

/* libnl callback: the acknowledgement of success. */
static int
on_ack (struct nl_msg *msg __attribute__ ((unused)), void *arg)
{
  struct reply *rep = arg;

  rep->done = true;
  return NL_STOP;
}

/* libnl callback: a reply; NBD_CMD_STATUS's device list is read. */
static int
on_valid (struct nl_msg *msg, void *arg)
{
  struct reply *rep = arg;
  struct nlattr *attrs[NBD_ATTR_MAX + 1];
  struct nlattr *dev[NBD_DEVICE_ATTR_MAX + 1];
  struct nlattr *item;
  int rem;

  if (genlmsg_parse (nlmsg_hdr (msg), 0, attrs, NBD_ATTR_MAX, NULL) < 0 ||
      attrs[NBD_ATTR_DEVICE_LIST] == NULL)
    return NL_OK;
  nla_for_each_nested (item, attrs[NBD_ATTR_DEVICE_LIST], rem) {
    if (nla_type (item) != NBD_DEVICE_ITEM ||
        nla_parse_nested (dev, NBD_DEVICE_ATTR_MAX, item, NULL) < 0 ||
        dev[NBD_DEVICE_INDEX] == NULL || dev[NBD_DEVICE_CONNECTED] == NULL)
      continue;
    if (nla_get_u32 (dev[NBD_DEVICE_INDEX]) == rep->index)
      rep->connected = nla_get_u8 (dev[NBD_DEVICE_CONNECTED]) != 0;
  }
  return NL_OK;
}

/* Send msg (freed) and read until the kernel's answer; 0 or -errno. */
static int
transact (struct nbdnl *nl, struct nl_msg *msg, struct reply *rep)
{
  int r;

  nl_socket_modify_err_cb (nl->sock, NL_CB_CUSTOM, on_error, rep);
  nl_socket_modify_cb (nl->sock, NL_CB_ACK, NL_CB_CUSTOM, on_ack, rep);
  nl_socket_modify_cb (nl->sock, NL_CB_VALID, NL_CB_CUSTOM, on_valid, rep);
  r = nl_send_auto (nl->sock, msg);
  nlmsg_free (msg);
  if (r < 0)
    return -nl_errno (r);
  while (!rep->done) {
    r = nl_recvmsgs_default (nl->sock);
    if (r < 0 && !rep->done)
      return -nl_errno (r);
  }
  return rep->error;
}

/* A new request for command cmd on device index, or NULL. */
static struct nl_msg *
new_request (struct nbdnl *nl, uint8_t cmd, uint32_t index)
{
  struct nl_msg *msg = nlmsg_alloc ();

  if (msg == NULL)
    return NULL;
  if (genlmsg_put (msg, NL_AUTO_PORT, NL_AUTO_SEQ, nl->family, 0, 0,
                   cmd, NBD_GENL_VERSION) == NULL ||
      nla_put_u32 (msg, NBD_ATTR_INDEX, index) < 0) {
    nlmsg_free (msg);
    return NULL;
  }
  return msg;
}

/* Add the sockets fds[0..n-1] as NBD_ATTR_SOCKETS; 0 or -1. */
static int
put_sockets (struct nl_msg *msg, const int *fds, size_t n)
{
  struct nlattr *socks, *item;
  size_t i;

  socks = nla_nest_start (msg, NBD_ATTR_SOCKETS);
  if (socks == NULL)
    return -1;
  for (i = 0; i < n; ++i) {
    item = nla_nest_start (msg, NBD_SOCK_ITEM);
    if (item == NULL || nla_put_u32 (msg, NBD_SOCK_FD, fds[i]) < 0)
      return -1;
    nla_nest_end (msg, item);
  }
  nla_nest_end (msg, socks);
  return 0;
}

/* NBD_CMD_CONNECT: configure a device with its sockets. */
int
nbdnl_connect (struct nbdnl *nl, const struct nbdnl_device *dev,
               const int *fds, size_t n)
{
  struct nl_msg *msg = new_request (nl, NBD_CMD_CONNECT, dev->index);
  struct reply rep = { 0 };

  if (msg == NULL ||
      nla_put_u64 (msg, NBD_ATTR_SIZE_BYTES, dev->size) < 0 ||
      nla_put_u64 (msg, NBD_ATTR_BLOCK_SIZE_BYTES, dev->block_size) < 0 ||
      nla_put_u64 (msg, NBD_ATTR_SERVER_FLAGS, dev->server_flags) < 0 ||
      nla_put_u64 (msg, NBD_ATTR_TIMEOUT, dev->timeout) < 0 ||
      nla_put_u64 (msg, NBD_ATTR_DEAD_CONN_TIMEOUT, dev->dead_timeout) < 0 ||
      nla_put_string (msg, NBD_ATTR_BACKEND_IDENTIFIER, dev->backend) < 0 ||
      put_sockets (msg, fds, n) == -1) {
    nlmsg_free (msg);
    return -ENOMEM;
  }
  return transact (nl, msg, &rep);
}

/* NBD_CMD_RECONFIGURE: new sockets for the dead ones. */
int
nbdnl_reconfigure (struct nbdnl *nl, uint32_t index, const char *backend,
                   const int *fds, size_t n)
{
  struct nl_msg *msg = new_request (nl, NBD_CMD_RECONFIGURE, index);
  struct reply rep = { 0 };

  if (msg == NULL ||
      nla_put_string (msg, NBD_ATTR_BACKEND_IDENTIFIER, backend) < 0 ||
      put_sockets (msg, fds, n) == -1) {
    nlmsg_free (msg);
    return -ENOMEM;
  }
  return transact (nl, msg, &rep);
}

/* NBD_CMD_DISCONNECT: end the device's configuration. */
int
nbdnl_disconnect (struct nbdnl *nl, uint32_t index)
{
  struct nl_msg *msg = new_request (nl, NBD_CMD_DISCONNECT, index);
  struct reply rep = { 0 };

  if (msg == NULL)
    return -ENOMEM;
  return transact (nl, msg, &rep);
}

/* NBD_CMD_STATUS: is the device connected? */
int
nbdnl_status (struct nbdnl *nl, uint32_t index, bool *connected)
{
  struct nl_msg *msg = new_request (nl, NBD_CMD_STATUS, index);
  struct reply rep = { .index = index };
  int r;

  if (msg == NULL)
    return -ENOMEM;
  r = transact (nl, msg, &rep);
  *connected = rep.connected;
  return r;
}

/* The event socket's descriptor. */
int
nbdnl_fd (struct nbdnl *nl)
{
  return nl_socket_get_fd (nl->sock);
}

/* libnl callback: an event; notes a dead link of the device asked for. */
static int
on_event (struct nl_msg *msg, void *arg)
{
  struct reply *rep = arg;
  struct nlattr *attrs[NBD_ATTR_MAX + 1];
  struct genlmsghdr *g = genlmsg_hdr (nlmsg_hdr (msg));

  if (g->cmd == NBD_CMD_LINK_DEAD &&
      genlmsg_parse (nlmsg_hdr (msg), 0, attrs, NBD_ATTR_MAX, NULL) >= 0 &&
      attrs[NBD_ATTR_INDEX] != NULL &&
      nla_get_u32 (attrs[NBD_ATTR_INDEX]) == rep->index)
    rep->connected = false;
  return NL_OK;
}

/* Read the pending events (see nbdnl.h). */
bool
nbdnl_link_dead (struct nbdnl *nl, uint32_t index)
{
  struct reply rep = { .index = index, .connected = true };
  struct pollfd pfd = { .fd = nl_socket_get_fd (nl->sock), .events = POLLIN };
  bool lost = false;
  int r;

  nl_socket_modify_cb (nl->sock, NL_CB_VALID, NL_CB_CUSTOM, on_event, &rep);
  while (poll (&pfd, 1, 0) == 1) {
    r = nl_recvmsgs_default (nl->sock);
    if (r < 0) {
      /* -NLE_NOMEM is the kernel's ENOBUFS: events were dropped. */
      lost = r == -NLE_NOMEM;
      break;
    }
  }
  return !rep.connected || lost;
}
