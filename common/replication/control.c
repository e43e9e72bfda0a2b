/* SPDX-License-Identifier: BSD-3-Clause */
/* The control socket: one JSON request per line, one JSON reply per
 * line (DESIGN.md section 9).
 *
 * One thread polls the listening socket and up to MAX_CLIENTS clients.
 * Requests are handled one at a time, in arrival order; a command that
 * changes membership may take as long as a leg timeout.  Replies are
 * written blocking (clients are local and read what they asked for).
 *
 * The socket file.  control=PATH (made absolute by engine_config)
 * must be absent or a stale socket, one nobody listens on (connect is
 * refused: a controller killed with -9 left it).  A socket another controller listens on, or anything that
 * is not a socket, is refused by name: at .config_complete
 * (control_check_path), so the error reaches the terminal before
 * nbdkit forks, and again when the socket is created in .after_fork
 * (listen_on), since the path may have changed in between.  Only a
 * stale socket is unlinked.  The socket is created with mode 0600 (the
 * controller's owner operates it) under a umask, so it is never
 * reachable by others, and its inode is noted: at stop it is removed
 * only if it is still ours (the path may have been replaced
 * meanwhile).  Two controllers starting on the same path at the same
 * instant can still race between the probe and the bind.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
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
#include "admin.h"
#include "verify.h"
#include "backup.h"
#include "random.h"
#include "cleanup.h"

#define MAX_CLIENTS 16
#define MAX_LINE (64 * 1024)

struct client {
  int fd;
  size_t len;
  char buf[MAX_LINE];
};

struct control {
  struct volume *v;
  int listen_fd;
  dev_t dev;                    /* the socket file we created */
  ino_t ino;
  int stop_fd[2];               /* a pipe: written to stop the thread */
  pthread_t thread;
  struct client *clients[MAX_CLIENTS];
};

/* An error reply. */
static json_t *
error_reply (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
static json_t *
error_reply (const char *fs, ...)
{
  char msg[512];
  va_list ap;

  va_start (ap, fs);
  vsnprintf (msg, sizeof msg, fs, ap);
  va_end (ap);
  return json_pack ("{s:b, s:s}", "ok", 0, "error", msg);
}

/* The leg named by the request's "index", or NULL with *reply set. */
static struct leg *
leg_arg (struct volume *v, json_t *req, json_t **reply)
{
  json_t *ix = json_object_get (req, "index");
  json_int_t i;

  if (!json_is_integer (ix)) {
    *reply = error_reply ("missing or invalid \"index\"");
    return NULL;
  }
  i = json_integer_value (ix);
  if (i < 0 || (size_t) i >= v->nr_legs) {
    *reply = error_reply ("no leg %" JSON_INTEGER_FORMAT " (the volume has "
                          "%zu legs)", i, v->nr_legs);
    return NULL;
  }
  return &v->legs[i];
}

/* fail-leg: take a leg out for maintenance (it is reconnected and
 * resynced by the monitor as after any failure).
 */
static json_t *
cmd_fail_leg (struct volume *v, json_t *req)
{
  json_t *reply = NULL;
  struct leg *l = leg_arg (v, req, &reply);
  enum leg_state st;
  uint16_t up;

  if (l == NULL)
    return reply;
  st = atomic_load (&l->state);
  if (st != LEG_UPTODATE && st != LEG_SYNCING)
    return error_reply ("leg %u is %s, not uptodate or syncing", l->index,
                        leg_state_name (st));
  up = MB_UPTODATE (membership_load (v)) & ~(1u << l->index);
  if (st == LEG_UPTODATE && up == 0)
    return error_reply ("leg %u is the last uptodate leg: failing it would "
                        "fail the volume", l->index);
  if (st == LEG_UPTODATE && (unsigned) __builtin_popcount (up) < v->quorum)
    return error_reply ("failing leg %u would leave fewer uptodate legs "
                        "than quorum (the volume would turn read-only)",
                        l->index);
  volume_fail_leg (v, l, EPOCH_ANY, "failed by the operator");
  return json_pack ("{s:b}", "ok", 1);
}

/* resync: restart the resync of a leg that is not uptodate (full if
 * asked), by failing it so the monitor takes it from the top now.
 */
static json_t *
cmd_resync (struct volume *v, json_t *req)
{
  json_t *reply = NULL;
  struct leg *l = leg_arg (v, req, &reply);
  bool full = json_is_true (json_object_get (req, "full"));
  enum leg_state st;

  if (l == NULL)
    return reply;
  st = atomic_load (&l->state);
  if (st == LEG_UPTODATE && !full)
    return error_reply ("leg %u is uptodate: nothing to resync (ask for a "
                        "full resync to rebuild it anyway)", l->index);
  if (st == LEG_REMOVED)
    return error_reply ("leg %u is removed", l->index);
  if (l->held)
    return error_reply ("leg %u is the source of a running backup: it "
                        "resyncs when the backup ends", l->index);
  if (st == LEG_UPTODATE || st == LEG_SYNCING)
    volume_fail_leg (v, l, EPOCH_ANY, "resync requested by the operator");
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    l->force_full |= full;
    l->next_attempt_ns = 0;
    l->backoff = 0;
    pthread_cond_broadcast (&v->monitor_cond);
  }
  return json_pack ("{s:b}", "ok", 1);
}

/* The success reply, or the error in err. */
static json_t *
result (int r, const char *err)
{
  return r == -1 ? error_reply ("%s", err) : json_pack ("{s:b}", "ok", 1);
}

/* add-leg: a new leg, synced fully. */
static json_t *
cmd_add_leg (struct volume *v, json_t *req)
{
  const char *uri = json_string_value (json_object_get (req, "uri"));
  char err[512];
  int i;

  if (uri == NULL)
    return error_reply ("missing \"uri\"");
  i = volume_add_leg (v, uri, err, sizeof err);
  if (i == -1)
    return error_reply ("%s", err);
  return json_pack ("{s:b, s:i}", "ok", 1, "index", i);
}

/* remove-leg: take a leg out of the volume for good. */
static json_t *
cmd_remove_leg (struct volume *v, json_t *req)
{
  json_t *reply = NULL;
  struct leg *l = leg_arg (v, req, &reply);
  char err[512];

  if (l == NULL)
    return reply;
  return result (volume_remove_leg (v, l->index, err, sizeof err), err);
}

/* set: change a rate. */
static json_t *
cmd_set (struct volume *v, json_t *req)
{
  const char *key = json_string_value (json_object_get (req, "key"));
  const char *value = json_string_value (json_object_get (req, "value"));
  char err[512];

  if (key == NULL || value == NULL)
    return error_reply ("missing \"key\" or \"value\"");
  return result (volume_set (v, key, value, err, sizeof err), err);
}

/* verify: start or stop. */
static json_t *
cmd_verify (struct volume *v, json_t *req)
{
  const char *action = json_string_value (json_object_get (req, "action"));
  json_t *from = json_object_get (req, "repair_from");
  json_t *rate = json_object_get (req, "rate");
  char err[512];

  if (action && strcmp (action, "stop") == 0)
    return result (verify_stop (v, err, sizeof err), err);
  if (action && strcmp (action, "start") != 0)
    return error_reply ("verify: unknown action \"%s\"", action);
  if (from && !json_is_null (from) && !json_is_integer (from))
    return error_reply ("verify: \"repair_from\" must be a leg index");
  if (rate && !json_is_null (rate) &&
      (!json_is_integer (rate) || json_integer_value (rate) < 0))
    return error_reply ("verify: \"rate\" must be bytes per second");
  return result (verify_start (v, json_is_true (json_object_get (req, "repair")),
                               json_is_integer (from)
                               ? (int) json_integer_value (from) : -1,
                               json_is_integer (rate)
                               ? json_integer_value (rate) : -1,
                               err, sizeof err), err);
}

/* The chunks set in b as merged [offset, length] byte ranges, clipped
 * to the volume.
 */
static json_t *
ranges_json (struct volume *v, const struct bitmap *b)
{
  json_t *a = json_array ();
  uint64_t first = bitmap_next_set (b, 0), last;

  while (a && first < b->nr_bits) {
    uint64_t off = first * v->cfg.chunk, end;
    for (last = first; last + 1 < b->nr_bits && bitmap_test (b, last + 1);
         last++)
      ;
    end = (last + 1) * v->cfg.chunk;
    if (end > v->size)
      end = v->size;
    if (off < end)
      json_array_append_new (a, json_pack ("[I, I]", (json_int_t) off,
                                           (json_int_t) (end - off)));
    first = bitmap_next_set (b, last + 1);
  }
  return a;
}

/* backup-begin: hold a leg for a backup (backup.c), for owner. */
static json_t *
cmd_backup_begin (struct volume *v, json_t *req, const void *owner)
{
  json_t *base = json_object_get (req, "base");
  struct backup_info info;
  char err[512], uuid[37];

  if (base && !json_is_null (base) && !json_is_string (base))
    return error_reply ("backup-begin: \"base\" must be a token or null");
  if (backup_begin (v, json_string_value (base), owner, &info,
                    err, sizeof err) == -1)
    return error_reply ("%s", err);
  if (v->metadata)
    uuid_format (v->sb.volume_uuid, uuid);
  return json_pack ("{s:b, s:s, s:s?, s:o, s:s, s:s?, s:s?, s:I, s:I, s:o}",
                    "ok", 1, "token", info.token, "source", info.source,
                    "leg", info.leg >= 0 ? json_integer (info.leg)
                    : json_null (),
                    "consistency", info.point_in_time ? "point-in-time"
                    : "live",
                    "why_live", info.why_live,
                    "volume", v->metadata ? uuid : NULL,
                    "size", (json_int_t) v->size,
                    "chunk", (json_int_t) v->cfg.chunk,
                    "changed", info.changed ? ranges_json (v, info.changed)
                    : json_null ());
}

/* backup-end: the backup is done or failed. */
static json_t *
cmd_backup_end (struct volume *v, json_t *req)
{
  const char *token = json_string_value (json_object_get (req, "token"));
  const char *res = json_string_value (json_object_get (req, "result"));
  const char *name = json_string_value (json_object_get (req, "name"));
  char err[512];

  if (token == NULL)
    return error_reply ("backup-end: missing \"token\"");
  if (res == NULL || (strcmp (res, "done") != 0 && strcmp (res, "failed") != 0))
    return error_reply ("backup-end: \"result\" must be \"done\" or "
                        "\"failed\"");
  return result (backup_end (v, token, strcmp (res, "done") == 0, name,
                             err, sizeof err), err);
}

/* Answer one request from owner (the client connection). */
json_t *
control_handle (struct volume *v, json_t *req, const void *owner)
{
  static const struct {
    const char *name;
    json_t *(*fn) (struct volume *, json_t *);
  } commands[] = {
    { "add-leg", cmd_add_leg },
    { "backup-end", cmd_backup_end },
    { "fail-leg", cmd_fail_leg },
    { "remove-leg", cmd_remove_leg },
    { "resync", cmd_resync },
    { "set", cmd_set },
    { "verify", cmd_verify },
  };
  const char *cmd = json_string_value (json_object_get (req, "cmd"));
  size_t i;

  if (cmd == NULL)
    return error_reply ("missing \"cmd\"");
  if (strcmp (cmd, "status") == 0)
    return status_json (v);
  if (strcmp (cmd, "backup-begin") == 0)
    return cmd_backup_begin (v, req, owner);
  for (i = 0; i < sizeof commands / sizeof commands[0]; ++i)
    if (strcmp (cmd, commands[i].name) == 0)
      return commands[i].fn (v, req);
  return error_reply ("unknown command \"%s\"", cmd);
}

/* Decode one line from client c, answer it, write the reply.  Returns
 * -1 if the client is gone.
 */
static int
answer_line (struct volume *v, const struct client *c, const char *line)
{
  int fd = c->fd;
  json_error_t jerr;
  json_t *req = json_loads (line, 0, &jerr), *reply;
  char *out;
  size_t len, done = 0;

  if (req == NULL || !json_is_object (req))
    reply = error_reply ("invalid request: %s",
                         req ? "not a JSON object" : jerr.text);
  else
    reply = control_handle (v, req, c);
  json_decref (req);
  out = json_dumps (reply, JSON_COMPACT | JSON_REAL_PRECISION (6));
  json_decref (reply);
  if (out == NULL)
    return -1;
  len = strlen (out);
  out[len++] = '\n';            /* replaces the terminating NUL */
  while (done < len) {
    ssize_t r = write (fd, out + done, len - done);
    if (r == -1 && errno == EINTR)
      continue;
    if (r <= 0) {
      free (out);
      return -1;
    }
    done += (size_t) r;
  }
  free (out);
  return 0;
}

/* Read what a client sent and answer every complete line.  Returns -1
 * when the client is to be dropped.
 */
static int
serve_client (struct volume *v, struct client *c)
{
  ssize_t r = read (c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
  char *nl;

  if (r <= 0)
    return -1;
  c->len += (size_t) r;
  c->buf[c->len] = '\0';
  while ((nl = strchr (c->buf, '\n')) != NULL) {
    *nl = '\0';
    if (answer_line (v, c, c->buf) == -1)
      return -1;
    c->len -= (size_t) (nl + 1 - c->buf);
    memmove (c->buf, nl + 1, c->len + 1);
  }
  return c->len == sizeof c->buf - 1 ? -1 : 0;   /* line too long */
}

/* Accept a client if there is room. */
static void
accept_client (struct control *ctl)
{
  int fd = accept4 (ctl->listen_fd, NULL, NULL, SOCK_CLOEXEC);
  size_t i;

  if (fd == -1)
    return;
  for (i = 0; i < MAX_CLIENTS; ++i)
    if (ctl->clients[i] == NULL) {
      ctl->clients[i] = calloc (1, sizeof *ctl->clients[i]);
      if (ctl->clients[i] == NULL)
        break;
      ctl->clients[i]->fd = fd;
      return;
    }
  close (fd);
}

/* Drop a client (a backup it began counts as failed). */
static void
drop_client (struct control *ctl, size_t i)
{
  backup_abandon (ctl->v, ctl->clients[i]);
  close (ctl->clients[i]->fd);
  free (ctl->clients[i]);
  ctl->clients[i] = NULL;
}

/* The control thread. */
static void *
control_thread (void *arg)
{
  struct control *ctl = arg;
  struct pollfd pfd[MAX_CLIENTS + 2];
  size_t map[MAX_CLIENTS + 2];

  for (;;) {
    size_t n = 0, i;

    pfd[n++] = (struct pollfd) { .fd = ctl->stop_fd[0], .events = POLLIN };
    pfd[n++] = (struct pollfd) { .fd = ctl->listen_fd, .events = POLLIN };
    for (i = 0; i < MAX_CLIENTS; ++i)
      if (ctl->clients[i]) {
        map[n] = i;
        pfd[n++] = (struct pollfd) { .fd = ctl->clients[i]->fd,
                                     .events = POLLIN };
      }
    if (poll (pfd, n, -1) == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("control: poll: %m");
      break;
    }
    if (pfd[0].revents)
      break;
    if (pfd[1].revents & POLLIN)
      accept_client (ctl);
    for (i = 2; i < n; ++i)
      if (pfd[i].revents && serve_client (ctl->v, ctl->clients[map[i]]) == -1)
        drop_client (ctl, map[i]);
  }
  return NULL;
}

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
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1) {
    nbdkit_error ("control: socket: %m");
    return -1;
  }
  old_mask = umask (0177);
  r = bind (fd, (struct sockaddr *) &addr, sizeof addr);
  umask (old_mask);
  if (r == -1 || listen (fd, 8) == -1 || lstat (path, &st) == -1) {
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
  for (i = 0; i < MAX_CLIENTS; ++i)
    if (ctl->clients[i])
      drop_client (ctl, i);
  close (ctl->listen_fd);
  close (ctl->stop_fd[0]);
  close (ctl->stop_fd[1]);
  remove_socket (ctl, v->cfg.control);
  free (ctl);
  v->control = NULL;
}
