/* SPDX-License-Identifier: BSD-3-Clause */
/* The control socket: one JSON request per line, one JSON reply per
 * line (DESIGN.md sections 9 and 15; the commands are ctlcmd.c, the
 * decoding ctlreq.c).
 *
 * The server.  One thread polls the listening socket, a stop pipe and
 * every client; all sockets are non-blocking, so no client can stall
 * it.  Each client has an input buffer (the line being received, at
 * most CTL_MAX_LINE bytes) and an output buffer (the reply being
 * written).  Requests are answered one at a time, in arrival order; a
 * client's next line is read and answered only once its last reply is
 * written whole, so a client that sends without reading fills its own
 * socket buffers, not the controller's memory.  Limits:
 *  - MAX_CLIENTS connections at once.  One over the limit is sent a
 *    one-line refusal ({"ok": false, "error": "too many ..."}) and kept
 *    a moment, its input discarded, so that the refusal reaches it as
 *    a reply rather than as a broken pipe (up to MAX_REFUSING of those
 *    at once; beyond, the refusal is sent without waiting).
 *  - A request line must be complete within LINE_TIMEOUT of its first
 *    byte (the time is not counted while its client has a reply to
 *    read), a reply must be read within REPLY_TIMEOUT of the last byte
 *    the client took: else the client is dropped, and that is logged.
 *  - A line with a NUL byte, or longer than CTL_MAX_LINE bytes, is
 *    answered with an error and the connection closed once the answer
 *    is written (kept CLOSE_LINGER, as a refusal is).
 * A command may take as long as a leg timeout (add-leg): meanwhile
 * nobody is served, but nobody is dropped for it either, since the
 * deadlines are judged as of the start of the next poll, after what
 * that poll found has been served: a line or a read that arrived in the
 * meantime counts.  A client that closes its sending side is answered
 * what it sent before, then dropped.  A backup a dropped client began
 * ends as failed (backup_abandon), and so does one whose hold lapses
 * (backup_check_lapse, at every turn of the loop, judged the same way).
 *
 * Credentials.  Every client's SO_PEERCRED (the uid and pid of the
 * process that connected) is read when it is accepted.  Each request
 * that changes something is logged with them and its outcome after it
 * is answered: membership changes and backups (add-leg, remove-leg,
 * fail-leg, resync, backup-begin, backup-end) always, as nbdkit errors
 * (nbdkit has no lower level that is always logged); settings, verify
 * and backup-renew as debug messages.
 *
 * Only the control thread touches struct control and its clients,
 * apart from control_start and control_stop (before and after it
 * runs); it takes no lock of its own, and the commands it calls take
 * the volume's (ctlcmd.c).
 *
 * The socket file.  control=PATH (made absolute by engine_config)
 * must be absent or a stale socket, one nobody listens on (connect is
 * refused: a controller killed with -9 left it).  A socket another
 * controller listens on, or anything that is not a socket, is refused
 * by name: at .config_complete (control_check_path), so the error
 * reaches the terminal before nbdkit forks, and again when the socket
 * is created in .after_fork (listen_on), since the path may have
 * changed in between.  Only a stale socket is unlinked.  The socket is
 * bound under a umask of 0177, so it has mode 0600 (the controller's
 * owner operates it) from the moment it exists, and its inode is
 * noted: at stop it is removed only if it is still ours (the path may
 * have been replaced meanwhile).  Two controllers starting on the same
 * path at the same instant can still race between the probe and the
 * bind.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <jansson.h>

#include "internal.h"
#include "control.h"
#include "ctlreq.h"
#include "backup.h"
#include "cleanup.h"
#include "thread-name.h"

#define MAX_CLIENTS 64
#define MAX_REFUSING 16
#define SECOND_NS UINT64_C (1000000000)
#define LINE_TIMEOUT (10 * SECOND_NS)
#define REPLY_TIMEOUT (10 * SECOND_NS)
#define CLOSE_LINGER (2 * SECOND_NS)
#define ACCEPT_PAUSE (SECOND_NS / 10)   /* after running out of fds */
#define MAX_SLOTS (MAX_CLIENTS + MAX_REFUSING)

struct client {
  int fd;
  char who[96];                 /* "uid U pid P", from SO_PEERCRED */
  bool closing;                 /* write out, then close (refused, bad line) */
  bool eof;                     /* it sends no more */
  uint64_t line_since;          /* when the partial line in "in" began */
  uint64_t out_since;           /* when the client last took reply bytes */
  uint64_t closing_since;
  char *out;                    /* the reply being written, or NULL */
  size_t out_len, out_off;
  size_t in_len;
  char in[CTL_MAX_LINE + 1];
};

struct control {
  struct volume *v;
  int listen_fd;
  dev_t dev;                    /* the socket file we created */
  ino_t ino;
  int stop_fd[2];               /* a pipe: written to stop the thread */
  pthread_t thread;
  uint64_t accept_resume;       /* no accept before (monotonic ns) */
  /* [0, MAX_CLIENTS) serve; the rest hold refused connections. */
  struct client *clients[MAX_SLOTS];
};

/* ---- replies ------------------------------------------------------- */

/* Encode reply (consumed) as a line.  NULL if out of memory. */
static char *
encode_reply (json_t *reply, size_t *len)
{
  char *out = NULL;

  if (reply)
    out = json_dumps (reply, JSON_COMPACT | JSON_REAL_PRECISION (6));
  json_decref (reply);
  if (out == NULL) {            /* out of memory, or a string not UTF-8 */
    reply = ctl_error_reply ("internal error: the reply could not be "
                             "encoded");
    out = reply ? json_dumps (reply, JSON_COMPACT) : NULL;
    json_decref (reply);
    if (out == NULL)
      return NULL;
  }
  *len = strlen (out);
  out[(*len)++] = '\n';         /* replaces the terminating NUL */
  return out;
}

/* Queue reply (consumed) for c.  Returns -1 if out of memory. */
static int
queue_reply (struct client *c, json_t *reply)
{
  c->out = encode_reply (reply, &c->out_len);
  c->out_off = 0;
  c->out_since = now_ns ();
  return c->out ? 0 : -1;
}

/* Write what c's socket takes of its reply.  Returns -1 if the client
 * is to be dropped.
 */
static int
flush_reply (struct client *c)
{
  while (c->out_off < c->out_len) {
    ssize_t r = send (c->fd, c->out + c->out_off, c->out_len - c->out_off,
                      MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r == -1 && errno == EINTR)
      continue;
    if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (r <= 0)
      return -1;
    c->out_off += (size_t) r;
    c->out_since = now_ns ();
  }
  free (c->out);
  c->out = NULL;
  if (c->closing)
    shutdown (c->fd, SHUT_WR);
  else if (c->in_len > 0)
    c->line_since = now_ns ();  /* its time runs again */
  return 0;
}

/* Answer c with reply (consumed) and close the connection after it. */
static int
close_with (struct client *c, json_t *reply)
{
  c->closing = true;
  c->closing_since = now_ns ();
  c->in_len = 0;
  if (queue_reply (c, reply) == -1)
    return -1;
  return flush_reply (c);
}

/* ---- requests ------------------------------------------------------ */

/* Log request r from c and its reply, as its kind says. */
static void
audit (const struct client *c, const struct ctlreq *r, const json_t *reply)
{
  CLEANUP_FREE char *args = NULL;
  const char *msg = json_string_value (json_object_get (reply, "error"));
  bool ok = json_is_true (json_object_get (reply, "ok"));
  char line[1024];

  if (r->audit == CTL_AUDIT_NONE)
    return;
  args = json_dumps (r->json, JSON_COMPACT | JSON_ENSURE_ASCII);
  snprintf (line, sizeof line, "control: %s from %s: %.300s: %s%s", r->name,
            c->who, args ? args : "", ok ? "done" : "refused: ",
            ok ? "" : msg ? msg : "the reply could not be made");
  if (r->audit == CTL_AUDIT_ALWAYS)
    nbdkit_error ("%s", line);
  else
    nbdkit_debug ("%s", line);
}

/* Answer the request line of len bytes at line from c. */
static int
answer_line (struct control *ctl, struct client *c, const char *line,
             size_t len)
{
  struct ctlreq r;
  char err[512];
  json_t *reply;

  if (ctlreq_parse (line, len, &r, err, sizeof err) == -1)
    return queue_reply (c, ctl_error_reply ("%s", err));
  reply = ctlcmd_answer (ctl->v, &r, c);
  audit (c, &r, reply);
  ctlreq_free (&r);
  return queue_reply (c, reply);
}

/* Answer the whole lines c has sent, while its replies are taken.
 * Returns -1 if the client is to be dropped.
 */
static int
serve_lines (struct control *ctl, struct client *c)
{
  size_t n;

  while (c->out == NULL && !c->closing) {
    switch (ctlreq_frame (c->in, c->in_len, &n)) {
    case CTL_FRAME_PARTIAL:
      return 0;
    case CTL_FRAME_NUL:
      nbdkit_error ("control: %s sent a NUL byte: connection closed",
                    c->who);
      return close_with (c, ctl_error_reply ("request line with a NUL "
                                             "byte: connection closed"));
    case CTL_FRAME_TOO_LONG:
      nbdkit_error ("control: %s sent a line longer than %d bytes: "
                    "connection closed", c->who, CTL_MAX_LINE);
      return close_with (c, ctl_error_reply ("request line longer than %d "
                                             "bytes: connection closed",
                                             CTL_MAX_LINE));
    case CTL_FRAME_LINE:
      if (answer_line (ctl, c, c->in, n) == -1)
        return -1;
      c->in_len -= n + 1;
      memmove (c->in, c->in + n + 1, c->in_len);
      c->line_since = now_ns ();
      if (flush_reply (c) == -1)
        return -1;
    }
  }
  return 0;
}

/* Read what c sent.  Returns -1 if it is to be dropped now. */
static int
receive (struct client *c)
{
  ssize_t r;

  if (c->closing)               /* what it sends now is discarded */
    c->in_len = 0;
  r = recv (c->fd, c->in + c->in_len, sizeof c->in - c->in_len,
            MSG_DONTWAIT);
  if (r == -1)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  if (r == 0) {
    c->eof = true;
    return 0;
  }
  if (c->in_len == 0)
    c->line_since = now_ns ();
  if (!c->closing)
    c->in_len += (size_t) r;
  return 0;
}

/* Is c done: nothing more to answer or write? */
static bool
finished (const struct client *c)
{
  size_t n;

  if (c->out)
    return false;
  if (c->closing)
    return c->eof;
  return c->eof && ctlreq_frame (c->in, c->in_len, &n) != CTL_FRAME_LINE;
}

/* Serve c after poll reported revents.  Returns -1 to drop it. */
static int
serve_client (struct control *ctl, struct client *c, short revents)
{
  if (revents & POLLERR)
    return -1;
  if (c->out && flush_reply (c) == -1)
    return -1;
  if (c->out == NULL && (revents & (POLLIN | POLLHUP)) && !c->eof &&
      receive (c) == -1)
    return -1;
  if (serve_lines (ctl, c) == -1)
    return -1;
  if (c->out && (revents & POLLHUP))
    return -1;                  /* nobody will read it */
  return finished (c) ? -1 : 0;
}

/* ---- clients ------------------------------------------------------- */

/* When c is to be dropped if it stays idle (monotonic ns), or 0. */
static uint64_t
deadline (const struct client *c)
{
  if (c->out)
    return c->out_since + REPLY_TIMEOUT;
  if (c->closing)
    return c->closing_since + CLOSE_LINGER;
  if (c->in_len > 0)
    return c->line_since + LINE_TIMEOUT;
  return 0;
}

/* Close and free c. */
static void
free_client (struct client *c)
{
  close (c->fd);
  free (c->out);
  free (c);
}

/* Close and free the client in slot i (a backup it began counts as
 * failed).
 */
static void
drop_client (struct control *ctl, size_t i)
{
  backup_abandon (ctl->v, ctl->clients[i]);
  free_client (ctl->clients[i]);
  ctl->clients[i] = NULL;
}

/* A free slot in [from, to), or -1. */
static int
free_slot (const struct control *ctl, size_t from, size_t to)
{
  size_t i;

  for (i = from; i < to; ++i)
    if (ctl->clients[i] == NULL)
      return (int) i;
  return -1;
}

/* Describe the peer of fd in who. */
static void
peer_credentials (int fd, char *who, size_t len)
{
  struct ucred cred;
  socklen_t n = sizeof cred;

  if (getsockopt (fd, SOL_SOCKET, SO_PEERCRED, &cred, &n) == 0)
    snprintf (who, len, "uid %u pid %d", (unsigned) cred.uid, (int) cred.pid);
  else
    snprintf (who, len, "an unknown peer (SO_PEERCRED: %s)",
              strerror (errno));
}

/* Tell a client over the limit, in slot i or (-1) on the spot. */
static void
refuse (struct control *ctl, struct client *c, int i)
{
  nbdkit_error ("control: %s refused: %d clients are connected already",
                c->who, MAX_CLIENTS);
  if (close_with (c, ctl_error_reply ("too many control connections (%d): "
                                      "try again when one closes",
                                      MAX_CLIENTS)) == 0 && i >= 0) {
    ctl->clients[i] = c;
    return;
  }
  free_client (c);
}

/* Take a new connection on fd. */
static void
take_client (struct control *ctl, int fd)
{
  int i = free_slot (ctl, 0, MAX_CLIENTS);
  struct client *c = malloc (sizeof *c);

  if (c == NULL) {
    nbdkit_error ("control: out of memory");
    close (fd);
    return;
  }
  memset (c, 0, offsetof (struct client, in));
  c->fd = fd;
  peer_credentials (fd, c->who, sizeof c->who);
  if (i >= 0) {
    nbdkit_debug ("control: %s connected", c->who);
    ctl->clients[i] = c;
  }
  else
    refuse (ctl, c, free_slot (ctl, MAX_CLIENTS, MAX_SLOTS));
}

/* Accept every pending connection. */
static void
accept_clients (struct control *ctl)
{
  for (;;) {
    int fd = accept4 (ctl->listen_fd, NULL, NULL,
                      SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      take_client (ctl, fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      nbdkit_error ("control: accept: %m (pausing for 100 ms)");
      ctl->accept_resume = now_ns () + ACCEPT_PAUSE;
    }
    return;
  }
}

/* Drop the clients whose deadline had passed already when the last
 * poll began, and which what that poll found did not move on.
 */
static void
expire_clients (struct control *ctl, uint64_t polled_at)
{
  size_t i;

  for (i = 0; i < MAX_SLOTS; ++i) {
    struct client *c = ctl->clients[i];
    uint64_t d = c ? deadline (c) : 0;

    if (d == 0 || d > polled_at)
      continue;
    if (c->out && !c->closing)
      nbdkit_error ("control: %s dropped: it did not read its reply for "
                    "%" PRIu64 " s", c->who, REPLY_TIMEOUT / SECOND_NS);
    else if (!c->closing)
      nbdkit_error ("control: %s dropped: it did not finish its request "
                    "line within %" PRIu64 " s", c->who,
                    LINE_TIMEOUT / SECOND_NS);
    drop_client (ctl, i);
  }
}

/* ---- the thread ---------------------------------------------------- */

/* The poll timeout in ms until the nearest deadline, or -1. */
static int
poll_timeout (const struct control *ctl, uint64_t now)
{
  uint64_t first = backup_lapse_ns (ctl->v), d;
  size_t i;

  if (ctl->accept_resume > now && (first == 0 || ctl->accept_resume < first))
    first = ctl->accept_resume;
  for (i = 0; i < MAX_SLOTS; ++i)
    if (ctl->clients[i] && (d = deadline (ctl->clients[i])) != 0 &&
        (first == 0 || d < first))
      first = d;
  if (first == 0)
    return -1;
  if (first <= now)
    return 0;
  return (int) ((first - now + 999999) / 1000000);
}

/* The events to poll c for. */
static short
client_events (const struct client *c)
{
  if (c->out)
    return POLLOUT;
  return c->eof ? 0 : POLLIN;
}

/* One turn: poll, serve, expire.  Returns -1 when the thread is to
 * stop.
 */
static int
control_turn (struct control *ctl)
{
  struct pollfd pfd[MAX_SLOTS + 2];
  size_t map[MAX_SLOTS + 2];
  uint64_t now = now_ns ();
  size_t n = 0, i;

  pfd[n++] = (struct pollfd) { .fd = ctl->stop_fd[0], .events = POLLIN };
  pfd[n++] = (struct pollfd) { .fd = ctl->accept_resume > now ? -1
                               : ctl->listen_fd, .events = POLLIN };
  for (i = 0; i < MAX_SLOTS; ++i)
    if (ctl->clients[i]) {
      map[n] = i;
      pfd[n++] = (struct pollfd) { .fd = ctl->clients[i]->fd,
                                   .events = client_events (ctl->clients[i]) };
    }
  if (poll (pfd, n, poll_timeout (ctl, now)) == -1) {
    if (errno == EINTR)
      return 0;
    nbdkit_error ("control: poll: %m");
    return -1;
  }
  if (pfd[0].revents)
    return -1;
  for (i = 2; i < n; ++i)
    if (pfd[i].revents &&
        serve_client (ctl, ctl->clients[map[i]], pfd[i].revents) == -1)
      drop_client (ctl, map[i]);
  if (pfd[1].revents & POLLIN)
    accept_clients (ctl);
  /* Deadlines as of the poll: what a long command kept waiting was
   * served first.
   */
  expire_clients (ctl, now);
  backup_check_lapse (ctl->v, now);
  return 0;
}

/* The control thread. */
static void *
control_thread (void *arg)
{
  struct control *ctl = arg;

  while (control_turn (ctl) == 0)
    ;
  return NULL;
}

/* ---- the socket file ----------------------------------------------- */

/* Fill in the address of path.  Returns -1 after an error. */
static int
socket_address (const char *path, struct sockaddr_un *addr)
{
  *addr = (struct sockaddr_un) { .sun_family = AF_UNIX };
  if (strlen (path) >= sizeof addr->sun_path) {
    nbdkit_error ("control=%s: path too long", path);
    return -1;
  }
  strcpy (addr->sun_path, path);
  return 0;
}

/* What is at control=PATH (see the design note). */
enum path_state { PATH_ABSENT, PATH_STALE, PATH_REFUSED };

/* Probe path: absent, a stale socket (its inode in *st), or refused
 * (after an error naming the parameter and the path).
 */
static enum path_state
probe_path (const char *path, struct stat *st)
{
  struct sockaddr_un addr;
  int fd, r, e;

  if (lstat (path, st) == -1) {
    if (errno == ENOENT)
      return PATH_ABSENT;
    nbdkit_error ("control=%s: %m", path);
    return PATH_REFUSED;
  }
  if (!S_ISSOCK (st->st_mode)) {
    nbdkit_error ("control=%s: exists and is not a socket (it is left "
                  "alone: remove it or choose another path)", path);
    return PATH_REFUSED;
  }
  if (socket_address (path, &addr) == -1)
    return PATH_REFUSED;
  /* Non-blocking: a listener with a full backlog answers EAGAIN. */
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd == -1) {
    nbdkit_error ("control: socket: %m");
    return PATH_REFUSED;
  }
  r = connect (fd, (struct sockaddr *) &addr, sizeof addr);
  e = errno;
  close (fd);
  if (r == 0 || e == EAGAIN || e == EINPROGRESS) {
    nbdkit_error ("control=%s: another controller is listening on this "
                  "socket (stop it or choose another path)", path);
    return PATH_REFUSED;
  }
  if (e == ECONNREFUSED)
    return PATH_STALE;
  errno = e;
  nbdkit_error ("control=%s: cannot tell whether this socket is in use: %m",
                path);
  return PATH_REFUSED;
}

/* Check that control=PATH may be taken (before the fork). */
int
control_check_path (const char *path)
{
  struct stat st;

  return probe_path (path, &st) == PATH_REFUSED ? -1 : 0;
}

/* Create the listening socket at path (mode 0600 from the start) and
 * note its inode in ctl.
 */
static int
listen_on (struct control *ctl, const char *path)
{
  struct sockaddr_un addr;
  struct stat st;
  mode_t old_mask;
  int fd, r;

  if (socket_address (path, &addr) == -1)
    return -1;
  switch (probe_path (path, &st)) {
  case PATH_REFUSED:
    return -1;
  case PATH_STALE:
    nbdkit_debug ("control=%s: replacing a stale socket", path);
    if (unlink (path) == -1 && errno != ENOENT) {
      nbdkit_error ("control=%s: cannot remove the stale socket: %m", path);
      return -1;
    }
    break;
  case PATH_ABSENT:
    break;
  }
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd == -1) {
    nbdkit_error ("control: socket: %m");
    return -1;
  }
  old_mask = umask (0177);
  r = bind (fd, (struct sockaddr *) &addr, sizeof addr);
  umask (old_mask);
  if (r == -1 || listen (fd, MAX_CLIENTS) == -1 || lstat (path, &st) == -1) {
    nbdkit_error ("control=%s: %m", path);
    close (fd);
    return -1;
  }
  ctl->dev = st.st_dev;
  ctl->ino = st.st_ino;
  return fd;
}

/* Remove the socket file at path if it is still the one ctl created. */
static void
remove_socket (const struct control *ctl, const char *path)
{
  struct stat st;

  if (lstat (path, &st) == -1)
    nbdkit_debug ("control=%s: already gone: %m", path);
  else if (!S_ISSOCK (st.st_mode) || st.st_dev != ctl->dev ||
           st.st_ino != ctl->ino)
    nbdkit_debug ("control=%s: no longer our socket: left alone", path);
  else if (unlink (path) == -1)
    nbdkit_debug ("control=%s: unlink: %m", path);
}

/* Start the control socket. */
int
control_start (struct volume *v)
{
  struct control *ctl = calloc (1, sizeof *ctl);
  int r;

  if (ctl == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  ctl->v = v;
  ctl->listen_fd = listen_on (ctl, v->cfg.control);
  if (ctl->listen_fd == -1 || pipe2 (ctl->stop_fd, O_CLOEXEC) == -1) {
    if (ctl->listen_fd != -1)
      close (ctl->listen_fd);
    free (ctl);
    return -1;
  }
  r = pthread_create (&ctl->thread, NULL, control_thread, ctl);
  if (r != 0) {
    errno = r;
    nbdkit_error ("pthread_create: %m");
    close (ctl->listen_fd);
    close (ctl->stop_fd[0]);
    close (ctl->stop_fd[1]);
    free (ctl);
    return -1;
  }
  thread_name (ctl->thread, "rep-control");
  v->control = ctl;
  return 0;
}

/* Stop the control socket and remove its file if it is still ours. */
void
control_stop (struct volume *v)
{
  struct control *ctl = v->control;
  size_t i;

  if (ctl == NULL)
    return;
  if (write (ctl->stop_fd[1], "x", 1) != 1)
    nbdkit_debug ("control stop: %m");
  pthread_join (ctl->thread, NULL);
  for (i = 0; i < MAX_SLOTS; ++i)
    if (ctl->clients[i])
      drop_client (ctl, i);
  close (ctl->listen_fd);
  close (ctl->stop_fd[0]);
  close (ctl->stop_fd[1]);
  remove_socket (ctl, v->cfg.control);
  free (ctl);
  v->control = NULL;
}
