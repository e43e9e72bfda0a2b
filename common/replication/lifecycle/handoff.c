/* SPDX-License-Identifier: BSD-3-Clause */
/* Handing the NBD clients over at a clean stop (SIGTERM, SIGINT, SIGHUP,
 * SIGQUIT: the signals nbdkit quits on).
 *
 * nbdkit, once told to quit, answers every request it still reads with
 * ESHUTDOWN.  The kernel's NBD client turns such an answer into an I/O
 * error, so a planned restart of a controller under a kernel device
 * (nbdrep attach) would fail the filesystem's requests, where a killed
 * controller fails none: the kernel sees its connections end, holds its
 * requests and sends the unanswered ones again to the next controller.
 *
 * Nor may the connections be closed under nbdkit 1.32 while it serves
 * them: a worker thread whose answer then fails marks the connection
 * dead, and another one already on its way to answer trips nbdkit's
 * assertion (raw_send_socket: `sock >= 0'; fixed in nbdkit 1.33.10).
 * The planned stop would abort, leaving the next start to recover.
 *
 * So the engine takes those signals first (installed when its
 * threads start, after nbdkit has installed its own handlers).  The
 * handler only wakes a thread, which counts the connections accepted on
 * one of the process's listening sockets other than the control socket:
 * nbdkit's NBD clients.
 *   - None: the thread gives the signal back to nbdkit (its old
 *     disposition, raised again), and nbdkit stops as it would have.
 *   - Some: the thread closes the door of the engine to the clients'
 *     requests (every data callback passes it: ENGINE_CLIENT_REQUEST)
 *     and waits until the requests inside have left.  A request that
 *     comes to the door later waits there for good, unanswered.  Then
 *     the engine stops cleanly (final flush, empty activity log), and
 *     the process ends with status 0 (_exit: nbdkit's threads are
 *     still serving) without nbdkit's own teardown, as a kill would
 *     end it.  From the start of this stop the four signals are
 *     ignored: nbdkit quitting under it would answer ESHUTDOWN and run
 *     the plugin's cleanup (a second engine_stop, closing the legs
 *     under this one).  The clients see their connections end; what
 *     they had sent and got no answer for, they send again to the
 *     next controller.  Nothing is answered ESHUTDOWN, and no answer
 *     fails while nbdkit serves.  The layers nbdkit would unload after
 *     the engine are not (the filters above, the filter shape's
 *     plugin, already flushed by the engine's stop).
 *
 * Which sockets: a connection accepted on a listening socket has that
 * socket's local address (a Unix socket's path; for TCP its port, the
 * listener often being bound to a wildcard address).  Connections this
 * process opened (to the legs) have an unnamed Unix address or an
 * ephemeral port.  The process's sockets are found in /proc/self/fd.
 * nbdkit -s (one client on stdin) has no listener: its client still
 * gets ESHUTDOWN answers.
 *
 * The door: a count of the requests inside and a closed flag, both
 * sequentially consistent atomics.  A request increments the count,
 * then reads the flag; the stop sets the flag, then reads the count:
 * either the request sees the door closed, or the stop sees it inside.
 *
 * The state is the process's (signal dispositions are): one volume per
 * process, as nbdkit loads one plugin.
 */

#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "internal.h"
#include "engine.h"
#include "cleanup.h"
#include "handoff.h"
#include "thread-name.h"

#define MAX_LISTENERS 16

/* An endpoint: a listening socket's local address. */
struct endpoint {
  struct sockaddr_storage ss;
  socklen_t len;
};

/* The signals nbdkit quits on, and its dispositions of them. */
static const int quit_signals[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };
#define NR_QUIT_SIGNALS (sizeof quit_signals / sizeof quit_signals[0])
static struct sigaction old_actions[NR_QUIT_SIGNALS];

static int wake_fds[2] = { -1, -1 };
static pthread_t thread;
static bool started;
static handoff_stop_fn stop_volume;

/* The door (see the design note). */
static atomic_ulong requests_inside;
static atomic_bool door_closed;

/* Signal handler: wake the thread with the signal's number. */
static void
on_stop_signal (int sig)
{
  int e = errno;
  char c = (char) sig;

  if (write (wake_fds[1], &c, 1) != 1) {
    /* Nothing to do in a signal handler: the pipe is never full. */
  }
  errno = e;
}

/* The local address of socket fd; false if fd is not a socket. */
static bool
local_name (int fd, struct endpoint *ep)
{
  ep->len = sizeof ep->ss;
  return getsockname (fd, (struct sockaddr *) &ep->ss, &ep->len) == 0;
}

/* Is fd a listening socket? */
static bool
is_listening (int fd)
{
  int v = 0;
  socklen_t len = sizeof v;

  return getsockopt (fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v;
}

/* The port of an inet endpoint, 0 for other families. */
static in_port_t
port_of (const struct endpoint *ep)
{
  if (ep->ss.ss_family == AF_INET)
    return ((const struct sockaddr_in *) &ep->ss)->sin_port;
  if (ep->ss.ss_family == AF_INET6)
    return ((const struct sockaddr_in6 *) &ep->ss)->sin6_port;
  return 0;
}

/* Was a connection with local address c accepted on listener l? */
static bool
accepted_on (const struct endpoint *c, const struct endpoint *l)
{
  if (c->ss.ss_family == AF_UNIX && l->ss.ss_family == AF_UNIX)
    return c->len > offsetof (struct sockaddr_un, sun_path) + 1 &&
           c->len == l->len && memcmp (&c->ss, &l->ss, c->len) == 0;
  return port_of (c) != 0 && port_of (c) == port_of (l);
}

/* Is ep the Unix socket at path? */
static bool
is_path (const struct endpoint *ep, const char *path)
{
  return path != NULL && ep->ss.ss_family == AF_UNIX &&
         strcmp (((const struct sockaddr_un *) &ep->ss)->sun_path,
                 path) == 0;
}

/* The process's file descriptors (numbers) into fds[0..*n-1]; false if
 * /proc/self/fd cannot be read.
 */
static bool
list_fds (int *fds, size_t max, size_t *n)
{
  DIR *dir = opendir ("/proc/self/fd");
  struct dirent *d;

  *n = 0;
  if (dir == NULL)
    return false;
  while ((d = readdir (dir)) != NULL && *n < max)
    if (d->d_name[0] >= '0' && d->d_name[0] <= '9' &&
        atoi (d->d_name) != dirfd (dir))
      fds[(*n)++] = atoi (d->d_name);
  closedir (dir);
  return true;
}

/* How many connections were accepted on the process's listening
 * sockets but the control socket?
 */
static size_t
count_clients (const char *control)
{
  static int fds[4096];
  struct endpoint listeners[MAX_LISTENERS], ep;
  size_t nfds, nl = 0, i, j, n = 0;

  if (!list_fds (fds, sizeof fds / sizeof fds[0], &nfds))
    return 0;
  for (i = 0; i < nfds && nl < MAX_LISTENERS; ++i)
    if (is_listening (fds[i]) && local_name (fds[i], &listeners[nl]) &&
        !is_path (&listeners[nl], control))
      nl++;
  for (i = 0; i < nfds; ++i) {
    if (is_listening (fds[i]) || !local_name (fds[i], &ep))
      continue;
    for (j = 0; j < nl; ++j)
      if (accepted_on (&ep, &listeners[j])) {
        n++;
        break;
      }
  }
  return n;
}

/* Give signal sig back to nbdkit: its old disposition, raised again. */
static void
pass_on (int sig)
{
  size_t i;

  for (i = 0; i < NR_QUIT_SIGNALS; ++i)
    if (quit_signals[i] == sig) {
      sigaction (sig, &old_actions[i], NULL);
      if (old_actions[i].sa_handler != SIG_IGN)
        raise (sig);
    }
}

/* Close the door and wait until the requests inside have left. */
static void
close_door (void)
{
  const struct timespec ms = { .tv_nsec = 1000000 };

  atomic_store (&door_closed, true);
  while (atomic_load (&requests_inside) > 0)
    nanosleep (&ms, NULL);
}

/* Ignore nbdkit's quit signals from now on (see the design note). */
static void
ignore_quit_signals (void)
{
  struct sigaction sa = { .sa_handler = SIG_IGN };
  size_t i;

  sigemptyset (&sa.sa_mask);
  for (i = 0; i < NR_QUIT_SIGNALS; ++i)
    sigaction (quit_signals[i], &sa, NULL);
}

/* Stop the volume cleanly under its n NBD client connections and end
 * the process (see the design note).
 */
static _Noreturn void
stop_under_clients (struct volume *v, int sig, size_t n)
{
  nbdkit_debug ("signal %d: %zu NBD client connection(s): closing the "
                "volume to their requests, stopping it cleanly and ending "
                "the process; what they sent and got no answer for, they "
                "send again to the next controller", sig, n);
  ignore_quit_signals ();
  close_door ();
  stop_volume (v);
  nbdkit_debug ("stopped cleanly; exiting");
  _exit (EXIT_SUCCESS);
}

/* The thread: on a stop signal, hand the clients over or pass it on. */
static void *
handoff_thread (void *arg)
{
  struct volume *v = arg;
  ssize_t r;
  size_t n;
  char c;

  for (;;) {
    r = read (wake_fds[0], &c, 1);
    if (r == -1 && errno == EINTR)
      continue;
    if (r != 1 || c == 0)
      return NULL;
    n = count_clients (v->cfg.control);
    if (n > 0)
      stop_under_clients (v, c, n);
    nbdkit_debug ("signal %d: no NBD client connection: nbdkit stops", c);
    pass_on (c);
  }
}

/* Take nbdkit's quit signals and start the thread (see handoff.h). */
int
handoff_start (struct volume *v, handoff_stop_fn stop)
{
  struct sigaction sa = { .sa_handler = on_stop_signal };
  size_t i;
  int err;

  stop_volume = stop;
  if (pipe2 (wake_fds, O_CLOEXEC) == -1) {
    nbdkit_error ("pipe2: %m");
    return -1;
  }
  err = pthread_create (&thread, NULL, handoff_thread, v);
  if (err) {
    errno = err;
    nbdkit_error ("pthread_create: %m");
    close (wake_fds[0]);
    close (wake_fds[1]);
    return -1;
  }
  thread_name (thread, "rep-handoff");
  started = true;
  sigemptyset (&sa.sa_mask);
  for (i = 0; i < NR_QUIT_SIGNALS; ++i)
    sigaction (quit_signals[i], &sa, &old_actions[i]);
  return 0;
}

/* Give the signals back and end the thread (see handoff.h).  Called by
 * the thread itself through stop_volume: it is not joined then, its
 * pipe stays open until the process ends, and the signals stay ignored
 * (nbdkit must not quit under the stop).
 */
void
handoff_stop (void)
{
  char c = 0;
  size_t i;

  if (!started)
    return;
  started = false;
  if (pthread_equal (pthread_self (), thread))
    return;
  for (i = 0; i < NR_QUIT_SIGNALS; ++i)
    sigaction (quit_signals[i], &old_actions[i], NULL);
  if (write (wake_fds[1], &c, 1) == 1)
    pthread_join (thread, NULL);
  close (wake_fds[0]);
  close (wake_fds[1]);
}

/* A client's request comes to the door (see engine.h). */
int
engine_client_begin (void)
{
  atomic_fetch_add (&requests_inside, 1);
  if (atomic_load (&door_closed)) {
    atomic_fetch_sub (&requests_inside, 1);
    for (;;)
      pause ();
  }
  return 0;
}

/* A client's request leaves (see engine.h). */
void
engine_client_end (int *unused UNUSED)
{
  atomic_fetch_sub (&requests_inside, 1);
}
