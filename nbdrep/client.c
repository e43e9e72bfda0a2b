/* SPDX-License-Identifier: BSD-3-Clause */
/* The client side of the control socket (nbdrep(1), CONTROL PROTOCOL).
 *
 * A Unix stream socket; one JSON object per line each way.  A request
 * is answered by exactly one reply line carrying "ok": true, or
 * "ok": false with an "error" message, which we print naming the
 * request.  One connection may carry many requests (watch keeps its
 * connection across updates).
 *
 * Nothing here blocks for ever: connecting, sending and waiting for the
 * reply of one request share a deadline of NBDREP_TIMEOUT seconds
 * (default 30), so a controller that is stuck gives a clear error
 * instead of a hung script.  The socket is non-blocking and every wait
 * is a poll bounded by the time left.
 */

#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <jansson.h>

#include "params.h"

#include "nbdrep.h"

#define DEFAULT_TIMEOUT 30.0
#define MAX_REPLY (64 * 1024 * 1024)

struct ctl {
  int fd;
  char *path;
  char *buf;                    /* received, not yet consumed */
  size_t len, cap;
};

/* Now, in seconds on the monotonic clock. */
static double
now_seconds (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* How long a request may take: NBDREP_TIMEOUT or 30 s. */
static double
timeout_seconds (void)
{
  const char *env = getenv ("NBDREP_TIMEOUT");
  double t;

  if (env && config_parse_seconds (env, &t) == 0 && t > 0)
    return t;
  return DEFAULT_TIMEOUT;
}

/* Milliseconds left until deadline, for poll (at least 1 while any time
 * is left, 0 when none).
 */
static int
ms_left (double deadline)
{
  double left = deadline - now_seconds ();

  if (left <= 0)
    return 0;
  if (left > 1e6)
    return 1000000000;
  return (int) (left * 1000) + 1;
}

/* Say that the controller did not answer in time. */
static void
timed_out (const struct ctl *c)
{
  nbdrep_error ("the controller at %s did not answer within %g s "
                "(NBDREP_TIMEOUT)", c->path, timeout_seconds ());
}

/* Explain why connect failed (errno). */
static void
connect_error (const char *path)
{
  int e = errno;
  struct stat st;
  bool not_socket = stat (path, &st) == 0 && !S_ISSOCK (st.st_mode);

  errno = e;
  if (e == ECONNREFUSED && not_socket)
    nbdrep_error ("no controller at %s: not a socket", path);
  else if (e == ECONNREFUSED)
    nbdrep_error ("no controller at %s: %m (the socket is left over from a "
                  "controller that is gone)", path);
  else if (e == ENOENT)
    nbdrep_error ("no controller at %s: %m", path);
  else
    nbdrep_error ("cannot connect to the controller at %s: %m", path);
}

/* Connect the socket, retrying while the listen backlog is full. */
static int
connect_until (struct ctl *c, const struct sockaddr_un *addr, double deadline)
{
  for (;;) {
    if (connect (c->fd, (const struct sockaddr *) addr, sizeof *addr) == 0)
      return 0;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN)
      break;
    if (ms_left (deadline) == 0) {
      timed_out (c);
      return -1;
    }
    poll (NULL, 0, 50);
  }
  connect_error (c->path);
  return -1;
}

/* Open a connection. */
struct ctl *
ctl_open (const char *path)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  struct ctl *c;

  if (strlen (path) >= sizeof addr.sun_path) {
    nbdrep_error ("control socket path too long: %s", path);
    return NULL;
  }
  strcpy (addr.sun_path, path);
  c = calloc (1, sizeof *c);
  if (c == NULL || (c->path = strdup (path)) == NULL) {
    nbdrep_error ("out of memory");
    free (c);
    return NULL;
  }
  c->fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->fd == -1) {
    nbdrep_error ("socket: %m");
    ctl_close (c);
    return NULL;
  }
  if (connect_until (c, &addr, now_seconds () + timeout_seconds ()) == -1) {
    ctl_close (c);
    return NULL;
  }
  nbdrep_debug ("connected to %s", path);
  return c;
}

/* Close a connection. */
void
ctl_close (struct ctl *c)
{
  if (c == NULL)
    return;
  if (c->fd >= 0)
    close (c->fd);
  free (c->path);
  free (c->buf);
  free (c);
}

/* Wait until fd is ready for events or the deadline passes.  Returns
 * 1 ready, 0 timed out, -1 error.
 */
static int
wait_ready (struct ctl *c, short events, double deadline)
{
  struct pollfd pfd = { .fd = c->fd, .events = events };
  int ms, r;

  for (;;) {
    ms = ms_left (deadline);
    if (ms == 0)
      return 0;
    r = poll (&pfd, 1, ms);
    if (r > 0)
      return 1;
    if (r == -1 && errno != EINTR) {
      nbdrep_error ("poll: %m");
      return -1;
    }
  }
}

/* Send len bytes of data.  Returns 0, -1 after an error, or 1 if the
 * controller closed the connection (EPIPE, ECONNRESET): not reported
 * here, since it may have said why first (a refusal), for the caller
 * to read.
 */
static int
send_all (struct ctl *c, const char *data, size_t len, double deadline)
{
  size_t done = 0;

  while (done < len) {
    ssize_t r = send (c->fd, data + done, len - done, MSG_NOSIGNAL);
    if (r >= 0) {
      done += (size_t) r;
      continue;
    }
    if (errno == EINTR)
      continue;
    if (errno == EPIPE || errno == ECONNRESET)
      return 1;
    if (errno != EAGAIN) {
      nbdrep_error ("sending to the controller at %s: %m", c->path);
      return -1;
    }
    r = wait_ready (c, POLLOUT, deadline);
    if (r == 0)
      timed_out (c);
    if (r <= 0)
      return -1;
  }
  return 0;
}

/* Make room for at least one more read in the receive buffer. */
static int
grow_buffer (struct ctl *c)
{
  size_t cap = c->cap ? c->cap * 2 : 65536;
  char *p;

  if (c->len + 1 < c->cap)
    return 0;
  if (cap > MAX_REPLY) {
    nbdrep_error ("the reply of the controller at %s is longer than %d "
                  "bytes", c->path, MAX_REPLY);
    return -1;
  }
  p = realloc (c->buf, cap);
  if (p == NULL) {
    nbdrep_error ("out of memory");
    return -1;
  }
  c->buf = p;
  c->cap = cap;
  return 0;
}

/* Receive one line into a new string (without the newline). */
static char *
receive_line (struct ctl *c, double deadline)
{
  char *nl = NULL, *line;

  while (c->buf == NULL || (nl = memchr (c->buf, '\n', c->len)) == NULL) {
    ssize_t r;
    int w;

    if (grow_buffer (c) == -1)
      return NULL;
    r = recv (c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
    if (r > 0) {
      c->len += (size_t) r;
      continue;
    }
    if (r == 0) {
      nbdrep_error ("the controller at %s closed the connection without "
                    "replying", c->path);
      return NULL;
    }
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN) {
      nbdrep_error ("receiving from the controller at %s: %m", c->path);
      return NULL;
    }
    w = wait_ready (c, POLLIN, deadline);
    if (w == 0)
      timed_out (c);
    if (w <= 0)
      return NULL;
  }
  line = strndup (c->buf, (size_t) (nl - c->buf));
  if (line == NULL) {
    nbdrep_error ("out of memory");
    return NULL;
  }
  c->len -= (size_t) (nl + 1 - c->buf);
  memmove (c->buf, nl + 1, c->len);
  return line;
}

/* Decode a reply line into an object.  NULL after an error. */
static json_t *
decode_reply (const struct ctl *c, const char *line)
{
  json_error_t jerr;
  json_t *reply = json_loads (line, 0, &jerr);

  if (reply == NULL) {
    nbdrep_error ("cannot parse the reply of the controller at %s: %s "
                  "(column %d)", c->path, jerr.text, jerr.column);
    return NULL;
  }
  if (!json_is_object (reply) || !json_is_boolean (json_object_get (reply,
                                                                    "ok"))) {
    nbdrep_error ("the reply of the controller at %s is not an object with "
                  "\"ok\": %.200s", c->path, line);
    json_decref (reply);
    return NULL;
  }
  return reply;
}

/* Send a request and return its successful reply. */
json_t *
ctl_request (struct ctl *c, const json_t *req)
{
  double deadline = now_seconds () + timeout_seconds ();
  const char *cmd = jstr (req, "cmd");
  char *out, *line;
  json_t *reply;
  int r;

  out = json_dumps (req, JSON_COMPACT);
  if (out == NULL) {
    nbdrep_error ("out of memory");
    return NULL;
  }
  nbdrep_debug ("request: %s", out);
  r = send_all (c, out, strlen (out), deadline);
  free (out);
  if (r == 0)
    r = send_all (c, "\n", 1, deadline);
  if (r == -1)
    return NULL;
  line = receive_line (c, deadline);   /* if closed: why, or an error */
  if (line == NULL)
    return NULL;
  nbdrep_debug ("reply: %.1000s", line);
  reply = decode_reply (c, line);
  free (line);
  if (reply && !json_is_true (json_object_get (reply, "ok"))) {
    const char *msg = jstr (reply, "error");
    nbdrep_error ("%s: %s", cmd ? cmd : "request",
                  msg ? msg : "the controller refused without saying why");
    json_decref (reply);
    return NULL;
  }
  return reply;
}

/* Open, request, close. */
json_t *
ctl_call (const char *path, const json_t *req)
{
  struct ctl *c = ctl_open (path);
  json_t *reply;

  if (c == NULL)
    return NULL;
  reply = ctl_request (c, req);
  ctl_close (c);
  return reply;
}

/* Ask for the status and check its shape. */
json_t *
ctl_status (struct ctl *c)
{
  json_t *req = json_pack ("{s:s}", "cmd", "status");
  json_t *reply = ctl_request (c, req);

  json_decref (req);
  if (reply && (jobj (reply, "volume") == NULL ||
                jarr (reply, "legs") == NULL)) {
    nbdrep_error ("the status reply of the controller at %s has no "
                  "\"volume\" object or \"legs\" array", c->path);
    json_decref (reply);
    return NULL;
  }
  return reply;
}

/* Open, ask for the status, close. */
json_t *
ctl_get_status (const char *path)
{
  struct ctl *c = ctl_open (path);
  json_t *status;

  if (c == NULL)
    return NULL;
  status = ctl_status (c);
  ctl_close (c);
  return status;
}
