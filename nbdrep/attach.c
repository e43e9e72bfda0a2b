/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep attach and nbdrep detach: the kernel's /dev/nbdN on a
 * controller, kept across controller restarts (DESIGN.md section 17).
 *
 * attach negotiates --connections sockets with the controller
 * (nbdneg.c), connects the device over netlink (nbdnl.c) with a
 * dead-connection timeout and the backend identifier
 * "nbdrep:VOLUME-UUID", and stays as the device's supervisor.  When a
 * socket dies (the kernel's NBD_CMD_LINK_DEAD event, or lost events)
 * it negotiates new sockets every second until a controller serving the
 * same volume answers, and hands them to the device with
 * NBD_CMD_RECONFIGURE; the kernel takes one for each dead socket.
 * Meanwhile the kernel holds new requests for up to --dead-timeout
 * seconds, and the requests that were in flight on the dead sockets
 * are sent again once their --timeout expires (the kernel requeues a
 * timed-out request onto a live socket).  After --dead-timeout without
 * a socket the kernel fails requests with EIO; the supervisor says so
 * and goes on trying, and a later reconnection makes the device work
 * again.
 *
 * Which volume: every connection's export description must be
 * "nbdkit-replicate volume UUID" (the controller's engine_volume_label)
 * with the device's UUID.  It is checked on the very connection given
 * to the kernel, so no other process can come between the check and
 * the use (asking the control socket would check a different
 * endpoint).  A connection from another volume, or from a server that
 * is not a controller, is refused, logged, closed, and the device keeps
 * waiting.
 *
 * A controller stopped cleanly (SIGTERM) closes its client connections
 * unanswered before it quits (common/replication/handoff.c), so a
 * planned restart looks to the kernel like a crash: nothing is answered
 * with an error, and what was unanswered is sent again.
 *
 * Restarting the supervisor: the device outlives it.  A new
 * "nbdrep attach" on a connected device reads the volume from the
 * device's backend identifier (/sys/block/nbdN/backend), replaces the
 * sockets that died while nobody watched (one reconfiguration: the
 * kernel takes only what it needs) and supervises on.  A device
 * connected by anything else (nbd-client) is refused.
 *
 * The supervisor ends (status 0) when the device is disconnected
 * (nbdrep detach) or on SIGTERM/SIGINT, leaving the device as it is.
 * Its log lines go to stderr, with a syslog priority prefix ("<4>")
 * when stderr is the systemd journal (JOURNAL_STREAM).
 *
 * Why re-sent requests are safe: see the README, "Attaching the
 * kernel".  In short, the new controller serves no request before its
 * election and activity-log recovery have made the legs equal, and
 * before the killed controller's writes still held by the legs'
 * servers can no longer land (drain.c, the orphan checks); a re-sent
 * write then lands after every write of the old controller, as the
 * client's retry of a request it was never answered.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "nbdrep.h"
#include "nbdneg.h"
#include "nbdnl.h"

#define MAX_CONNECTIONS 64
#define NEGOTIATE_MS 10000      /* one connection's handshake */
#define RETRY_MS 1000           /* between reconnection attempts */
#define BACKEND_PREFIX "nbdrep:"
#define EXPORT_PREFIX "nbdrep-attach:" /* the controller's status counts
                                          connections named so */

struct attach {
  const char *target;           /* SOCKET or URI */
  char device[32];              /* /dev/nbdN */
  char export_name[48];         /* EXPORT_PREFIX device */
  uint32_t index;
  unsigned connections;
  uint64_t timeout, dead_timeout;
  char volume[37];              /* the device's volume */
  char backend[64];             /* BACKEND_PREFIX volume */
  struct nbdnl *cmd, *events;
};

static volatile sig_atomic_t stop_signal;

/* Signal handler: note the signal; the loop ends. */
static void
on_signal (int sig)
{
  stop_signal = sig;
}

/* Log a line of the supervisor's: "nbdrep attach: DEVICE: MESSAGE",
 * prefixed with the syslog priority when stderr is the journal.
 */
static void __attribute__ ((format (printf, 3, 4)))
say (const struct attach *a, int prio, const char *fs, ...)
{
  va_list ap;

  if (getenv ("JOURNAL_STREAM") != NULL)
    fprintf (stderr, "<%d>", prio);
  fprintf (stderr, "nbdrep attach: %s: ", a->device);
  va_start (ap, fs);
  vfprintf (stderr, fs, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Parse DEVICE (/dev/nbdN or nbdN) into a; usage error if bad. */
static void
parse_device (const struct subcommand *cmd, const char *str,
              struct attach *a)
{
  const char *n = str;
  unsigned long index;
  size_t digits;

  if (strncmp (n, "/dev/", 5) == 0)
    n += 5;
  /* N in decimal, as the kernel names the devices. */
  digits = strspn (n + (strncmp (n, "nbd", 3) == 0 ? 3 : 0), "0123456789");
  if (strncmp (n, "nbd", 3) != 0 || digits == 0 || digits > 9 ||
      n[3 + digits] != '\0' || (n[3] == '0' && digits > 1))
    usage_error (cmd, "'%s' is not an NBD device (/dev/nbdN)", str);
  index = strtoul (n + 3, NULL, 10);
  a->index = index;
  snprintf (a->device, sizeof a->device, "/dev/nbd%" PRIu32, a->index);
  snprintf (a->export_name, sizeof a->export_name, EXPORT_PREFIX "%s",
            a->device);
}

/* Open the command socket (and the event socket if events); print
 * why not and return -1 on failure.
 */
static int
open_netlink (struct attach *a, bool events)
{
  a->cmd = nbdnl_open (false);
  if (a->cmd != NULL && events)
    a->events = nbdnl_open (true);
  if (a->cmd != NULL && (!events || a->events != NULL))
    return 0;
  if (errno == ENOENT)
    nbdrep_error ("%s: the kernel has no NBD driver (no \"nbd\" generic "
                  "netlink family): load it with 'modprobe nbd'", a->device);
  else if (errno == EPERM)
    nbdrep_error ("%s: the kernel's NBD interface needs root "
                  "(CAP_SYS_ADMIN)", a->device);
  else
    nbdrep_error ("%s: cannot open the kernel's NBD netlink interface: %s",
                  a->device, strerror (errno));
  return -1;
}

/* Close fds[0..n-1]. */
static void
close_all (int *fds, size_t n)
{
  size_t i;

  for (i = 0; i < n; ++i)
    close (fds[i]);
}

/* Negotiate a->connections sockets into fds, each with an export of
 * volume a->volume (any controller's volume if a->volume is "", which
 * is then set).  0, or -1 with why set and nothing left open.
 */
static int
open_sockets (struct attach *a, int *fds, struct nbdneg_export *exp,
              char *why, size_t why_len)
{
  struct nbdneg_export e;
  unsigned i;

  for (i = 0; i < a->connections; ++i) {
    fds[i] = nbdneg_connect (a->target, a->export_name, NEGOTIATE_MS, &e,
                             why, why_len);
    if (fds[i] == -1)
      break;
    if (e.volume[0] == '\0')
      snprintf (why, why_len, "refused %s: it is not an nbdkit-replicate "
                "controller (its export is not described as "
                "\"nbdkit-replicate volume UUID\")", a->target);
    else if (a->volume[0] != '\0' && strcmp (e.volume, a->volume) != 0)
      snprintf (why, why_len, "refused %s: it serves volume %s, but %s "
                "belongs to volume %s", a->target, e.volume, a->device,
                a->volume);
    else {
      if (i == 0)
        *exp = e;
      strcpy (a->volume, e.volume);
      continue;
    }
    close (fds[i]);
    break;
  }
  if (i == a->connections)
    return 0;
  if (strncmp (why, "refused", 7) != 0) {
    char reason[256];
    snprintf (reason, sizeof reason, "%s", why);
    snprintf (why, why_len, "cannot connect to %s: %s", a->target, reason);
  }
  close_all (fds, i);
  return -1;
}

/* The device's block size from the export's: its preferred size, at
 * least its minimum and 512, at most 4096 (the kernel's limit is the
 * page size).
 */
static uint64_t
block_size (const struct nbdneg_export *exp)
{
  uint64_t bs = exp->block_pref > exp->block_min ? exp->block_pref
                                                 : exp->block_min;

  if (bs < 512)
    bs = 512;
  if (bs > 4096)
    bs = 4096;
  return bs;
}

/* Connect the unconfigured device to the controller; 0 or -1. */
static int
first_attach (struct attach *a)
{
  int fds[MAX_CONNECTIONS];
  struct nbdneg_export exp;
  struct nbdnl_device dev;
  char why[512];
  int r;

  if (open_sockets (a, fds, &exp, why, sizeof why) == -1) {
    nbdrep_error ("%s: %s", a->device, why);
    return -1;
  }
  snprintf (a->backend, sizeof a->backend, BACKEND_PREFIX "%s", a->volume);
  dev = (struct nbdnl_device) {
    .index = a->index, .size = exp.size, .block_size = block_size (&exp),
    .server_flags = exp.flags, .timeout = a->timeout,
    .dead_timeout = a->dead_timeout, .backend = a->backend,
  };
  r = nbdnl_connect (a->cmd, &dev, fds, a->connections);
  close_all (fds, a->connections);
  if (r < 0) {
    nbdrep_error ("%s: the kernel refused to connect it: %s%s", a->device,
                  strerror (-r), r == -EBUSY ? " (it is in use)" : "");
    return -1;
  }
  say (a, LOG_NOTICE, "attached to volume %s at %s: %" PRIi64 " bytes, "
       "%" PRIu64 "-byte blocks, %u connections, flags 0x%" PRIx64
       ", request timeout %" PRIu64 " s, dead-connection timeout %" PRIu64
       " s", a->volume, a->target, exp.size, dev.block_size, a->connections,
       exp.flags, a->timeout, a->dead_timeout);
  return 0;
}

/* A connected device: take its volume from its backend identifier;
 * 0, or -1 (printed) if nbdrep attach did not connect it.
 */
static int
adopt (struct attach *a)
{
  char path[64], line[128] = "";
  FILE *fp;
  size_t len;

  snprintf (path, sizeof path, "/sys/block/nbd%" PRIu32 "/backend",
            a->index);
  fp = fopen (path, "r");
  if (fp != NULL) {
    if (fgets (line, sizeof line, fp) == NULL)
      line[0] = '\0';
    fclose (fp);
  }
  len = strcspn (line, "\n");
  line[len] = '\0';
  if (strncmp (line, BACKEND_PREFIX, strlen (BACKEND_PREFIX)) != 0 ||
      len != strlen (BACKEND_PREFIX) + 36) {
    nbdrep_error ("%s is connected, but not by nbdrep attach (its backend "
                  "is \"%s\"): disconnect it first", a->device, line);
    return -1;
  }
  strcpy (a->backend, line);
  strcpy (a->volume, line + strlen (BACKEND_PREFIX));
  say (a, LOG_NOTICE, "already connected to volume %s: supervising it, "
       "replacing the connections that died meanwhile", a->volume);
  return 0;
}

/* One reconnection attempt: new sockets of the device's volume, given
 * to the kernel for its dead ones.  0, or -1 with why set.
 */
static int
reconnect (struct attach *a, char *why, size_t why_len)
{
  int fds[MAX_CONNECTIONS];
  struct nbdneg_export exp;
  int r;

  if (open_sockets (a, fds, &exp, why, why_len) == -1)
    return -1;
  r = nbdnl_reconfigure (a->cmd, a->index, a->backend, fds, a->connections);
  close_all (fds, a->connections);
  if (r < 0) {
    snprintf (why, why_len, "the kernel refused the new connections: %s",
              strerror (-r));
    return -1;
  }
  return 0;
}

/* Is the device still connected?  1, 0, or -1 (logged). */
static int
device_connected (struct attach *a)
{
  bool connected;
  int r = nbdnl_status (a->cmd, a->index, &connected);

  if (r < 0) {
    say (a, LOG_ERR, "cannot read the device's status: %s", strerror (-r));
    return -1;
  }
  return connected;
}

/* The supervisor: watch, reconnect; returns the exit status. */
static int
supervise (struct attach *a, bool waiting)
{
  struct pollfd pfd = { .fd = nbdnl_fd (a->events), .events = POLLIN };
  int64_t lost_at = now_ms (), next_try = 0, now;
  bool timed_out = false;
  char why[512], last_why[512] = "";

  while (!stop_signal) {
    poll (&pfd, 1, RETRY_MS);
    if (nbdnl_link_dead (a->events, a->index) && !waiting) {
      waiting = true;
      lost_at = now_ms ();
      next_try = 0;
      say (a, LOG_WARNING, "a connection to the controller died: "
           "reconnecting (the kernel holds requests for up to %" PRIu64
           " s)", a->dead_timeout);
    }
    if (device_connected (a) == 0) {
      say (a, LOG_NOTICE, "the device was disconnected: the supervisor "
           "exits");
      return EXIT_OK;
    }
    now = now_ms ();
    if (!waiting || now < next_try)
      continue;
    if (reconnect (a, why, sizeof why) == 0) {
      say (a, LOG_NOTICE, "reconnected to volume %s at %s after %.1f s",
           a->volume, a->target, (now_ms () - lost_at) / 1000.0);
      waiting = timed_out = false;
      last_why[0] = '\0';
      continue;
    }
    if (strcmp (why, last_why) != 0) {
      say (a, LOG_WARNING, "%s; the device keeps waiting", why);
      strcpy (last_why, why);
    }
    next_try = now_ms () + RETRY_MS;
    if (!timed_out && now - lost_at >= (int64_t) a->dead_timeout * 1000) {
      say (a, LOG_ERR, "no controller has served volume %s for %" PRIu64
           " s (--dead-timeout): the kernel now fails the device's "
           "requests with EIO; still trying", a->volume, a->dead_timeout);
      timed_out = true;
    }
  }
  say (a, LOG_NOTICE, "stopped by signal %d; the device stays connected",
       (int) stop_signal);
  return EXIT_OK;
}

/* Parse a whole number of seconds or connections; usage error if bad. */
static uint64_t
parse_count (const struct subcommand *cmd, const char *what,
             const char *str, uint64_t min, uint64_t max)
{
  uint64_t r;

  if (!parse_whole (str, min, max, &r))
    usage_error (cmd, "%s '%s' is not a whole number from %" PRIu64
                 " to %" PRIu64, what, str, min, max);
  return r;
}

/* nbdrep attach SOCKET DEVICE [--connections N] [--timeout SECS]
 * [--dead-timeout SECS].
 */
static int
run_attach (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = {
    { "connections", required_argument, NULL, 'C' },
    { "dead-timeout", required_argument, NULL, 'D' },
    { "timeout", required_argument, NULL, 'T' },
    COMMON_LONG_OPTIONS
  };
  struct attach a = { .connections = 4, .timeout = 30, .dead_timeout = 120 };
  struct sigaction sa = { .sa_handler = on_signal };
  int opt, connected, status = EXIT_ERROR;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1) {
    switch (opt) {
    case 'C':
      a.connections = parse_count (cmd, "--connections", optarg, 1,
                                   MAX_CONNECTIONS);
      break;
    case 'D':
      a.dead_timeout = parse_count (cmd, "--dead-timeout", optarg, 1,
                                    UINT32_MAX);
      break;
    case 'T':
      a.timeout = parse_count (cmd, "--timeout", optarg, 1, UINT32_MAX);
      break;
    default:
      other_option (cmd, opt);
    }
  }
  need_operands (cmd, argc, argv, optind, 2, 2);
  a.target = argv[optind];
  parse_device (cmd, argv[optind + 1], &a);

  sigaction (SIGTERM, &sa, NULL);
  sigaction (SIGINT, &sa, NULL);
  signal (SIGPIPE, SIG_IGN);
  if (open_netlink (&a, true) == 0 &&
      (connected = device_connected (&a)) >= 0 &&
      (connected ? adopt (&a) : first_attach (&a)) == 0)
    status = supervise (&a, connected);
  nbdnl_close (a.events);
  nbdnl_close (a.cmd);
  return status;
}

/* nbdrep detach DEVICE. */
static int
run_detach (const struct subcommand *cmd, int argc, char **argv)
{
  static const struct option longopts[] = { COMMON_LONG_OPTIONS };
  struct attach a = { 0 };
  int opt, connected, r, status = EXIT_ERROR;

  while ((opt = getopt_long (argc, argv, COMMON_SHORT_OPTIONS, longopts,
                             NULL)) != -1)
    other_option (cmd, opt);
  need_operands (cmd, argc, argv, optind, 1, 1);
  parse_device (cmd, argv[optind], &a);

  if (open_netlink (&a, false) == 0 &&
      (connected = device_connected (&a)) >= 0) {
    if (!connected)
      nbdrep_error ("%s is not connected", a.device);
    else if ((r = nbdnl_disconnect (a.cmd, a.index)) < 0)
      nbdrep_error ("%s: the kernel refused to disconnect it: %s",
                    a.device, strerror (-r));
    else
      status = EXIT_OK;
  }
  nbdnl_close (a.cmd);
  return status;
}

const struct subcommand cmd_attach = {
  .name = "attach",
  .run = run_attach,
  .synopsis = "SOCKET DEVICE [--connections N] [--timeout SECS] "
              "[--dead-timeout SECS]",
  .summary = "Attach /dev/nbdN to a controller and keep it across restarts.",
  .description =
  "SOCKET is the controller's NBD Unix socket (nbdkit -U) or an nbd:// or\n"
  "nbd+unix:// URI; DEVICE is /dev/nbdN.  Stays in the foreground as the\n"
  "device's supervisor: when the controller's connections die it\n"
  "reconnects as soon as a controller serves the same volume again, and\n"
  "the kernel holds the requests meanwhile.  Run again on a connected\n"
  "device, it takes over its supervision.  Needs root.\n",
  .options =
  "  --connections N   Sockets to the controller (default 4).\n"
  "  --timeout SECS    Request timeout: a request unanswered for SECS\n"
  "                    is sent again on another socket (default 30).\n"
  "  --dead-timeout SECS\n"
  "                    How long the kernel holds requests while no\n"
  "                    controller is connected (default 120); after\n"
  "                    that they fail with EIO.\n",
};

const struct subcommand cmd_detach = {
  .name = "detach",
  .run = run_detach,
  .synopsis = "DEVICE",
  .summary = "Disconnect /dev/nbdN (its supervisor then exits).",
};
