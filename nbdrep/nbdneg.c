/* SPDX-License-Identifier: BSD-3-Clause */
/* One negotiated NBD connection to hand to the kernel.
 *
 * libnbd does the newstyle handshake (as nbd-client would), then the
 * socket is taken from it: a dup of the handle's descriptor, after
 * which the handle is closed.  That is safe with libnbd 1.14 because
 *   - nbd_close on a connected handle sends nothing (NBD_CMD_DISC is
 *     only sent by nbd_shutdown and nbd_aio_disconnect) and only
 *     close ()s its descriptor, which leaves our duplicate open and the
 *     connection up (no shutdown ());
 *   - libnbd reads the handshake with exact-length reads and the
 *     server sends nothing after NBD_OPT_GO's reply until a request
 *     comes, so no byte of the transmission phase sits in libnbd's
 *     buffers;
 *   - structured replies are not requested (the kernel's client reads
 *     only simple replies) and no meta context is, so the server will
 *     send the kernel what it can read;
 *   - TLS is refused (the kernel cannot speak it; a TLS session's state
 *     would also be lost with the handle).
 * The socket is made blocking again (libnbd sets O_NONBLOCK), as the
 * kernel's client expects.
 *
 * The export name is chosen by the caller even for a URI (libnbd's
 * option mode: NBD_OPT_GO is sent after the URI has been applied):
 * nbdrep attach names the device, "nbdrep-attach:/dev/nbdN", which the
 * controller ignores for the data and counts for its status.
 *
 * With full info requested, NBD_OPT_GO also returns the export's
 * description: a controller describes its export as
 * "nbdkit-replicate volume UUID" (engine_volume_label), which is how
 * nbdrep attach checks, on the very connection it gives the kernel,
 * which volume is behind it.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <linux/nbd.h>
#include <libnbd.h>

#include "nbdneg.h"

#define LABEL_PREFIX "nbdkit-replicate volume "

/* The volume's UUID from an export description (see nbdneg.h). */
void
nbdneg_parse_label (const char *description, char volume[37])
{
  const char *u;
  size_t i;

  volume[0] = '\0';
  if (description == NULL ||
      strncmp (description, LABEL_PREFIX, strlen (LABEL_PREFIX)) != 0)
    return;
  u = description + strlen (LABEL_PREFIX);
  if (strlen (u) != 36)
    return;
  for (i = 0; i < 36; ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    bool hex = u[i] != '\0' && strchr ("0123456789abcdef", u[i]) != NULL;
    if (dash ? u[i] != '-' : !hex)
      return;
  }
  memcpy (volume, u, 37);
}

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Start connecting h to target; 0 or -1 (libnbd's error). */
static int
start_connect (struct nbd_handle *h, const char *target)
{
  if (strstr (target, "://") == NULL)
    return nbd_aio_connect_unix (h, target);
  if (nbd_set_uri_allow_tls (h, LIBNBD_TLS_DISABLE) == -1)
    return -1;
  return nbd_aio_connect_uri (h, target);
}

/* Poll h until done (true) or until the deadline; -1 with why set if
 * the handle died or the deadline passed.
 */
static int
poll_until (struct nbd_handle *h, bool (*done) (struct nbd_handle *h,
                                                void *arg),
            void *arg, int64_t deadline, int timeout_ms,
            char *why, size_t why_len)
{
  int64_t left;

  while (!done (h, arg)) {
    if (nbd_aio_is_dead (h) || nbd_aio_is_closed (h)) {
      snprintf (why, why_len, "%s", nbd_get_error ());
      return -1;
    }
    left = deadline - now_ms ();
    if (left <= 0) {
      snprintf (why, why_len, "no NBD handshake within %d s (is it the "
                "controller's NBD socket, nbdkit -U, and not its control "
                "socket?)", timeout_ms / 1000);
      return -1;
    }
    if (nbd_poll (h, (int) left) == -1) {
      snprintf (why, why_len, "%s", nbd_get_error ());
      return -1;
    }
  }
  return 0;
}

/* Is h negotiating options? */
static bool
negotiating (struct nbd_handle *h, void *arg __attribute__ ((unused)))
{
  return nbd_aio_is_negotiating (h);
}

/* NBD_OPT_GO's completion: its error. */
struct go {
  bool done;
  int error;
};

/* libnbd callback: NBD_OPT_GO has completed (only records it). */
static int
go_completed (void *user_data, int *error)
{
  struct go *go = user_data;

  go->done = true;
  go->error = *error;
  return 1;
}

/* Has NBD_OPT_GO completed? */
static bool
go_done (struct nbd_handle *h __attribute__ ((unused)), void *arg)
{
  return ((struct go *) arg)->done;
}

/* Run h's handshake within timeout_ms: the options, then NBD_OPT_GO
 * with export name (libnbd's option mode, so that a URI's own export
 * name does not replace ours).  0 when ready, or -1 with why set.
 */
static int
handshake (struct nbd_handle *h, const char *export_name, int timeout_ms,
           char *why, size_t why_len)
{
  int64_t deadline = now_ms () + timeout_ms;
  struct go go = { 0 };
  nbd_completion_callback cb = { .callback = go_completed, .user_data = &go };

  if (poll_until (h, negotiating, NULL, deadline, timeout_ms,
                  why, why_len) == -1)
    return -1;
  if (nbd_set_export_name (h, export_name) == -1 ||
      nbd_aio_opt_go (h, cb) == -1) {
    snprintf (why, why_len, "%s", nbd_get_error ());
    return -1;
  }
  if (poll_until (h, go_done, &go, deadline, timeout_ms, why, why_len) == -1)
    return -1;
  if (go.error != 0 || !nbd_aio_is_ready (h)) {
    snprintf (why, why_len, "the server refused export \"%s\": %s",
              export_name, strerror (go.error ? go.error : EINVAL));
    return -1;
  }
  return 0;
}

/* Fill exp from a ready handle; 0 or -1 with why set. */
static int
read_export (struct nbd_handle *h, struct nbdneg_export *exp,
             char *why, size_t why_len)
{
  char *description;

  memset (exp, 0, sizeof *exp);
  exp->size = nbd_get_size (h);
  exp->block_min = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);
  exp->block_pref = nbd_get_block_size (h, LIBNBD_SIZE_PREFERRED);
  if (exp->size == -1 || exp->block_min == -1 || exp->block_pref == -1) {
    snprintf (why, why_len, "%s", nbd_get_error ());
    return -1;
  }
  exp->flags = NBD_FLAG_HAS_FLAGS;
  if (nbd_is_read_only (h) == 1)
    exp->flags |= NBD_FLAG_READ_ONLY;
  if (nbd_can_flush (h) == 1)
    exp->flags |= NBD_FLAG_SEND_FLUSH;
  if (nbd_can_fua (h) == 1)
    exp->flags |= NBD_FLAG_SEND_FUA;
  if (nbd_can_trim (h) == 1)
    exp->flags |= NBD_FLAG_SEND_TRIM;
  if (nbd_can_multi_conn (h) == 1)
    exp->flags |= NBD_FLAG_CAN_MULTI_CONN;
  description = nbd_get_export_description (h);
  nbdneg_parse_label (description, exp->volume);
  free (description);
  return 0;
}

/* Take the connected socket from h: a blocking, close-on-exec
 * duplicate.  -1 with why set.
 */
static int
take_socket (struct nbd_handle *h, char *why, size_t why_len)
{
  int fd = fcntl (nbd_aio_get_fd (h), F_DUPFD_CLOEXEC, 0);
  int fl;

  if (fd == -1 || (fl = fcntl (fd, F_GETFL)) == -1 ||
      fcntl (fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
    snprintf (why, why_len, "taking the socket: %s", strerror (errno));
    if (fd >= 0)
      close (fd);
    return -1;
  }
  return fd;
}

/* Connect, negotiate and take the socket (see nbdneg.h). */
int
nbdneg_connect (const char *target, const char *export_name, int timeout_ms,
                struct nbdneg_export *exp, char *why, size_t why_len)
{
  struct nbd_handle *h = nbd_create ();
  int fd = -1;

  if (h == NULL) {
    snprintf (why, why_len, "%s", nbd_get_error ());
    return -1;
  }
  if (nbd_set_request_structured_replies (h, false) == -1 ||
      nbd_set_full_info (h, true) == -1 ||
      nbd_set_opt_mode (h, true) == -1 ||
      nbd_set_tls (h, LIBNBD_TLS_DISABLE) == -1 ||
      start_connect (h, target) == -1)
    snprintf (why, why_len, "%s", nbd_get_error ());
  else if (handshake (h, export_name, timeout_ms, why, why_len) == 0 &&
           read_export (h, exp, why, why_len) == 0)
    fd = take_socket (h, why, why_len);
  nbd_close (h);
  return fd;
}
