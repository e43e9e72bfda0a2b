/* SPDX-License-Identifier: BSD-3-Clause */
/* The built-in ublk frontend: the controller is the ublk server of
 * /dev/ublkbID, and the kernel's requests go straight to the engine,
 * with no NBD socket in between.
 *
 * Kernel interface (Linux 6.0 or later with ublk_drv; the UAPI of
 * linux-libc-dev 6.1, no ublksrv).  Control commands (ADD_DEV,
 * SET_PARAMS, START_DEV, STOP_DEV, DEL_DEV, GET_DEV_INFO, GET_PARAMS,
 * START_USER_RECOVERY, END_USER_RECOVERY) are IORING_OP_URING_CMD on
 * /dev/ublk-control through a small SQE128 ring of our own.  Each queue
 * has an SQE128 ring on /dev/ublkcID (registered as fixed file 0)
 * carrying a FETCH_REQ, then a COMMIT_AND_FETCH_REQ after each request,
 * for every tag, and reads the request descriptors from the page the
 * driver maps for that queue.  Opcodes are the plain numbers of the 6.1
 * header, or their ioctl encoding once the kernel refuses those with
 * EOPNOTSUPP (kernels built without CONFIG_BLKDEV_UBLK_LEGACY_OPCODES).
 *
 * The queues, which serve the kernel's requests (their threads, the
 * states of a request's tag, which thread reads the legs' replies), are
 * ublk-queue.c's.
 *
 * Locks: u->lock (the start-up handshake, the device information shown
 * in status) and q->lock (the work and finisher lists) are leaves:
 * nothing is taken while they are held, and no ublk lock is held across
 * an engine call or a kernel command.  The engine keeps the frontend's
 * state (struct engine_frontend): status is called with the volume's
 * lock held and takes u->lock.
 *
 * Start (ublk_start, last in engine_after_fork: the election, the
 * activity-log recovery and the engine's threads are done).  GET_DEV_INFO
 * on ID, then ublk_map_decide (ublk-map.c):
 *   - no device: ADD_DEV (USER_RECOVERY | USER_RECOVERY_REISSUE, the
 *     volume's stamp), SET_PARAMS, open /dev/ublkcID, start the queues
 *     (each FETCHes all its tags), START_DEV;
 *   - this volume's device waiting for a server (QUIESCED: the last
 *     controller was killed, or stopped with ublk-keep=true): the kernel
 *     holds its I/O.  START_USER_RECOVERY (retried while the dead
 *     process's files are still being released), open, the queues (with
 *     the device's own queue count, depth and buffer size),
 *     END_USER_RECOVERY: held and re-issued requests flow again, and the
 *     filesystem on the device has seen a pause, no error;
 *   - LIVE with a dead server: the kernel has not noticed yet, ask again
 *     (for up to UBLK_TAKEOVER_WAIT seconds); DEAD (added, never
 *     started): delete it and add it again;
 *   - anything else (another volume's device, one served by a running
 *     process, one without user recovery): refuse, saying why.
 *
 * Why re-issued writes are safe.  With USER_RECOVERY_REISSUE the kernel
 * re-sends to the new controller every request the dead one had taken
 * and not committed.  A write among them may have reached all, some or
 * none of the legs.  Before serving, the new controller's start makes
 * the legs equal again: the activity log names every extent that had
 * writes in flight, and crash recovery copies those extents from one
 * elected leg to the others (start.c), so every leg holds the same
 * bytes there, old or new.  The re-issued write then writes the very
 * same bytes at the same offset to every leg: a block write is
 * idempotent, so whatever its first attempt did, the result is the
 * same.  Nothing newer is overwritten: the kernel keeps the request's
 * pages and a filesystem does not reuse its blocks until it completes,
 * and writes overlapping while in flight have no defined order on any
 * disk.  Zeroes and trims are idempotent likewise; flushes and reads
 * are harmless to repeat.
 *
 * Stop (ublk_stop, first in engine_stop, so that the activity log is
 * emptied after the last request).  By default the device is deleted,
 * as nbdublk does on SIGTERM (unmount first): STOP_DEV while the queues
 * still serve, so the kernel's last writeback completes; then the
 * queues end, their files are closed, and DEL_DEV waits until the
 * kernel has let go of the device.  With ublk-keep=true the device
 * stays: the queues stop taking requests (HELD), commit those being
 * served and close; the kernel holds further I/O until a controller
 * with the same ublk=ID takes the device back (a planned restart or an
 * upgrade under a mounted filesystem).
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "ublk-int.h"
#include "cleanup.h"

/* How long a start waits for a dead server's device to be released. */
#define UBLK_TAKEOVER_WAIT 60

/* How long to wait for /dev/ublkcID to appear after ADD_DEV. */
#define UBLK_NODE_WAIT 10

/* ---- kernel commands -------------------------------------------------- */

/* A control opcode in the encoding the kernel takes. */
static uint32_t
ctrl_opcode (const struct ublk *u, unsigned op)
{
  return u->ioctl_encode ? _IOWR ('u', op, struct ublksrv_ctrl_cmd) : op;
}

/* Send one control command and wait for it.  Returns the kernel's
 * result: >= 0, or a negative errno.
 */
static int
ctrl_submit (struct ublk *u, unsigned op, const struct ublksrv_ctrl_cmd *cmd)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe (&u->ctrl);
  struct io_uring_cqe *cqe;
  int r;

  if (sqe == NULL)
    return -EBUSY;
  prep_uring_cmd (sqe, u->ctrl_fd, ctrl_opcode (u, op));
  memcpy (sqe_cmd (sqe), cmd, sizeof *cmd);
  r = io_uring_submit (&u->ctrl);
  if (r < 0)
    return r;
  do
    r = io_uring_wait_cqe (&u->ctrl, &cqe);
  while (r == -EINTR);
  if (r < 0)
    return r;
  r = cqe->res;
  io_uring_cqe_seen (&u->ctrl, cqe);
  return r;
}

/* A control command on our device with an optional buffer and one
 * inline argument; switches to the ioctl encoding if the plain opcodes
 * are refused.
 */
static int
ctrl_cmd (struct ublk *u, unsigned op, void *buf, size_t len, uint64_t arg)
{
  struct ublksrv_ctrl_cmd cmd = {
    .dev_id = u->id,
    .queue_id = UINT16_MAX,
    .len = (uint16_t) len,
    .addr = (uintptr_t) buf,
    .data = { arg },
  };
  int r = ctrl_submit (u, op, &cmd);

  if (r == -EOPNOTSUPP && !u->ioctl_encode) {
    u->ioctl_encode = true;
    r = ctrl_submit (u, op, &cmd);
  }
  return r;
}

/* Name a control command for messages. */
static const char *
ctrl_name (unsigned op)
{
  switch (op) {
  case UBLK_CMD_ADD_DEV: return "ADD_DEV";
  case UBLK_CMD_DEL_DEV: return "DEL_DEV";
  case UBLK_CMD_START_DEV: return "START_DEV";
  case UBLK_CMD_STOP_DEV: return "STOP_DEV";
  case UBLK_CMD_SET_PARAMS: return "SET_PARAMS";
  case UBLK_CMD_START_USER_RECOVERY: return "START_USER_RECOVERY";
  case UBLK_CMD_END_USER_RECOVERY: return "END_USER_RECOVERY";
  default: return "command";
  }
}

/* A control command whose failure is reported.  Returns 0 or -1. */
static int
ctrl_do (struct ublk *u, unsigned op, void *buf, size_t len, uint64_t arg)
{
  int r = ctrl_cmd (u, op, buf, len, arg);

  if (r < 0) {
    nbdkit_error ("ublk=%u: %s: %s", u->id, ctrl_name (op), strerror (-r));
    return -1;
  }
  return 0;
}

/* Stop every queue and close the device's files.  With the files gone,
 * the kernel either finishes stopping the device or, with user
 * recovery, holds its I/O for the next server.
 */
static void
close_device (struct ublk *u)
{
  unsigned i;

  if (u->queues) {
    ublk_queues_stop (u);
    for (i = 0; i < u->nr_queues; ++i)
      ublk_queue_close (&u->queues[i]);
    free (u->queues);
    u->queues = NULL;
    u->nr_queues = 0;
  }
  if (u->cdev_fd >= 0)
    close (u->cdev_fd);
  u->cdev_fd = -1;
}

/* Open /dev/ublkcID, waiting for it to appear.  Returns 0 or -1. */
static int
open_char_device (struct ublk *u)
{
  uint64_t deadline = now_ns () + UBLK_NODE_WAIT * UINT64_C (1000000000);
  const struct timespec pause = { 0, 50 * 1000 * 1000 };
  char path[64];

  snprintf (path, sizeof path, "/dev/ublkc%u", u->id);
  while ((u->cdev_fd = open (path, O_RDWR | O_CLOEXEC)) == -1 &&
         errno == ENOENT && now_ns () < deadline)
    nanosleep (&pause, NULL);
  if (u->cdev_fd == -1) {
    nbdkit_error ("ublk=%u: %s: %m", u->id, path);
    return -1;
  }
  return 0;
}

/* Open the device's files and start every queue; returns once each
 * queue has fetched all its tags.  Returns 0 or -1.
 */
static int
open_device (struct ublk *u)
{
  unsigned i, n = u->info.nr_hw_queues;

  if (open_char_device (u) == -1)
    return -1;
  u->queues = calloc (n, sizeof *u->queues);
  if (u->queues == NULL) {
    nbdkit_error ("ublk=%u: calloc: %m", u->id);
    return -1;
  }
  for (i = 0; i < n; ++i) {
    u->nr_queues++;
    if (ublk_queue_open (u, &u->queues[i], (uint16_t) i) == -1)
      return -1;
  }
  for (i = 0; i < n; ++i)
    if (ublk_queue_run (&u->queues[i]) == -1)
      return -1;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&u->lock);
    while (u->nr_reported < n)
      pthread_cond_wait (&u->cond, &u->lock);
    if (u->setup_error != 0) {
      nbdkit_error ("ublk=%u: the kernel refused the queues' fetches: %s",
                    u->id, strerror (-u->setup_error));
      return -1;
    }
  }
  return 0;
}

/* ---- start and stop -------------------------------------------------- */

/* The volume's stamp: 64 bits of its UUID, 0 without metadata. */
static uint64_t
volume_stamp (struct volume *v)
{
  uint8_t uuid[16];
  uint64_t stamp = 0;

  if (engine_volume_uuid (v, uuid))
    memcpy (&stamp, uuid, sizeof stamp);
  return stamp;
}

/* Derive a new device's information and parameters from the engine.
 * Returns 0 or -1.
 */
static int
derive_device (struct ublk *u)
{
  struct volume *v = u->v;
  struct ublk_engine_limits lim = {
    .size = (uint64_t) engine_get_size (v),
    .trim = engine_can_trim (v),
  };
  char err[256];

  engine_block_size (v, &lim.min_block, &lim.pref_block, &lim.max_block);
  if (ublk_map_derive (&lim, u->id, u->cfg.queues, u->cfg.depth,
                   u->stamp, &u->want, &u->params, err, sizeof err) == -1) {
    nbdkit_error ("ublk=%u: %s", u->id, err);
    return -1;
  }
  u->dev_bytes = u->params.basic.dev_sectors << 9;
  u->trim = lim.trim;
  u->piece = lim.max_block;
  return 0;
}

/* Set the device's information shown in status. */
static void
set_info (struct ublk *u, const struct ublksrv_ctrl_dev_info *info,
          bool recovered)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&u->lock);

  u->info = *info;
  u->recovered = recovered;
}

/* Add a new device and start it.  Returns 0 or -1. */
static int
add_device (struct ublk *u)
{
  struct ublksrv_ctrl_dev_info info = u->want;
  struct ublk_params params = u->params;

  if (ctrl_do (u, UBLK_CMD_ADD_DEV, &info, sizeof info, 0) == -1)
    return -1;
  u->added = true;
  set_info (u, &info, false);
  if (params.basic.max_sectors > info.max_io_buf_bytes >> 9)
    params.basic.max_sectors = info.max_io_buf_bytes >> 9;
  if (info.nr_hw_queues != u->want.nr_hw_queues)
    nbdkit_debug ("ublk=%u: the kernel gave %u queues (one per CPU at "
                  "most)", u->id, info.nr_hw_queues);
  if (ctrl_do (u, UBLK_CMD_SET_PARAMS, &params, sizeof params, 0) == -1 ||
      open_device (u) == -1 ||
      ctrl_do (u, UBLK_CMD_START_DEV, NULL, 0, (uint64_t) getpid ()) == -1)
    return -1;
  u->started = true;
  return 0;
}

/* Take back a device waiting for its server.  Returns 0, -1, or 1 if
 * the dead server's files are not released yet (try again).
 */
static int
recover_device (struct ublk *u, const struct ublksrv_ctrl_dev_info *info)
{
  int r = ctrl_cmd (u, UBLK_CMD_START_USER_RECOVERY, NULL, 0, 0);

  if (r == -EBUSY)
    return 1;
  if (r < 0) {
    nbdkit_error ("ublk=%u: START_USER_RECOVERY: %s", u->id, strerror (-r));
    return -1;
  }
  set_info (u, info, true);
  if (info->nr_hw_queues != u->want.nr_hw_queues ||
      info->queue_depth != u->want.queue_depth)
    nbdkit_debug ("ublk=%u: the device keeps its %u queue(s) of depth %u",
                  u->id, info->nr_hw_queues, info->queue_depth);
  if (open_device (u) == -1 ||
      ctrl_do (u, UBLK_CMD_END_USER_RECOVERY, NULL, 0,
               (uint64_t) getpid ()) == -1)
    return -1;
  u->started = true;
  return 0;
}

/* Is pid a process that may still serve a device: it exists and is not
 * a zombie (a killed controller its parent has not reaped yet)?
 */
static bool
process_alive (int32_t pid)
{
  char path[64], line[256], *end;
  FILE *fp;
  size_t n;

  if (pid <= 0 || (kill (pid, 0) == -1 && errno != EPERM))
    return false;
  snprintf (path, sizeof path, "/proc/%" PRId32 "/stat", pid);
  fp = fopen (path, "re");
  if (fp == NULL)
    return errno != ENOENT;
  n = fread (line, 1, sizeof line - 1, fp);
  fclose (fp);
  line[n] = '\0';
  end = strrchr (line, ')');        /* the state follows "(comm) " */
  return end == NULL || end[1] == '\0' ||
    (end[2] != 'Z' && end[2] != 'X');
}

/* Ask the kernel about device ID.  Returns 0 with *found filled (its
 * info pointing to *info, or NULL if there is no device), or -1.
 */
static int
probe_device (struct ublk *u, struct ublksrv_ctrl_dev_info *info,
              struct ublk_found *found)
{
  struct ublk_params params = { .len = sizeof params };
  int r = ctrl_cmd (u, UBLK_CMD_GET_DEV_INFO, info, sizeof *info, 0);

  memset (found, 0, sizeof *found);
  if (r == -ENODEV)
    return 0;
  if (r < 0) {
    nbdkit_error ("ublk=%u: GET_DEV_INFO: %s", u->id, strerror (-r));
    return -1;
  }
  found->info = info;
  found->server_alive = process_alive (info->ublksrv_pid);
  r = ctrl_cmd (u, UBLK_CMD_GET_PARAMS, &params, sizeof params, 0);
  if (r == 0 && (params.types & UBLK_PARAM_TYPE_BASIC))
    found->dev_bytes = params.basic.dev_sectors << 9;
  return 0;
}

/* Add device ID, or take it over (see the design note).  Returns 0 or
 * -1.
 */
static int
take_device (struct ublk *u)
{
  uint64_t deadline = now_ns () + UBLK_TAKEOVER_WAIT * UINT64_C (1000000000);
  const struct timespec pause = { 0, 100 * 1000 * 1000 };

  for (;;) {
    struct ublksrv_ctrl_dev_info info;
    struct ublk_found found;
    char why[256];
    int r;

    if (probe_device (u, &info, &found) == -1)
      return -1;
    switch (ublk_map_decide (&found, u->stamp, u->dev_bytes, why, sizeof why)) {
    case UBLK_ADD:
      return add_device (u);
    case UBLK_RECOVER:
      atomic_store (&u->state, UBLK_STATE_RECOVERING);
      r = recover_device (u, &info);
      if (r <= 0)
        return r;
      break;
    case UBLK_REPLACE:
      nbdkit_debug ("ublk=%u: deleting the device left unstarted", u->id);
      if (ctrl_do (u, UBLK_CMD_DEL_DEV, NULL, 0, 0) == -1)
        return -1;
      continue;
    case UBLK_WAIT:
      atomic_store (&u->state, UBLK_STATE_RECOVERING);
      break;
    case UBLK_REFUSE:
      nbdkit_error ("ublk=%u: /dev/ublkb%u %s", u->id, u->id, why);
      return -1;
    }
    if (now_ns () >= deadline) {
      nbdkit_error ("ublk=%u: /dev/ublkb%u still belongs to its last "
                    "server after %d s", u->id, u->id, UBLK_TAKEOVER_WAIT);
      return -1;
    }
    nanosleep (&pause, NULL);
  }
}

/* Open /dev/ublk-control and the control ring.  Returns 0 or -1. */
static int
open_control (struct ublk *u)
{
  int r;

  u->ctrl_fd = open ("/dev/ublk-control", O_RDWR | O_CLOEXEC);
  if (u->ctrl_fd == -1) {
    nbdkit_error ("ublk=%u: /dev/ublk-control: %m (the kernel needs "
                  "ublk_drv: modprobe ublk_drv)", u->id);
    return -1;
  }
  r = io_uring_queue_init (4, &u->ctrl, IORING_SETUP_SQE128);
  if (r < 0) {
    nbdkit_error ("ublk=%u: io_uring setup: %s", u->id, strerror (-r));
    return -1;
  }
  u->ctrl_ready = true;
  return 0;
}

/* Close the control ring and /dev/ublk-control. */
static void
close_control (struct ublk *u)
{
  if (u->ctrl_ready)
    io_uring_queue_exit (&u->ctrl);
  u->ctrl_ready = false;
  if (u->ctrl_fd >= 0)
    close (u->ctrl_fd);
  u->ctrl_fd = -1;
}

/* Undo a start that failed: a device this start added is deleted; one
 * taken over is left waiting for the next server.
 */
static void
abandon_start (struct ublk *u)
{
  close_device (u);
  if (u->added && u->ctrl_ready)
    ctrl_cmd (u, UBLK_CMD_DEL_DEV, NULL, 0, 0);
  close_control (u);
  atomic_store (&u->state, UBLK_STATE_FAILED);
}

/* A new frontend for v, as its parameters say. */
static struct ublk *
ublk_new (struct volume *v, const struct engine_ublk_params *cfg)
{
  struct ublk *u = calloc (1, sizeof *u);

  if (u == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  u->v = v;
  u->cfg = *cfg;
  u->id = (unsigned) cfg->id;
  u->keep = cfg->keep;
  u->stamp = volume_stamp (v);
  u->ctrl_fd = u->cdev_fd = -1;
  pthread_mutex_init (&u->lock, NULL);
  pthread_cond_init (&u->cond, NULL);
  atomic_store (&u->state, UBLK_STATE_STARTING);
  return u;
}

/* Create /dev/ublkbID, or take it back from a controller that died or
 * stopped with ublk-keep=true, and serve it (nothing without ublk=).
 */
static int
ublk_start (struct volume *v, void **state)
{
  struct engine_ublk_params cfg;
  struct ublk *u;

  engine_ublk_params (v, &cfg);
  if (cfg.id < 0)
    return 0;
  /* Requests the queues start are not waited for by anybody, so
   * issuers must not lead the poller (poller.c): its thread, then the
   * first queue, drives all the time.
   */
  engine_aio_use_thread (v);
  u = ublk_new (v, &cfg);
  if (u == NULL)
    return -1;
  *state = u;
  if (derive_device (u) == -1 || open_control (u) == -1 ||
      take_device (u) == -1) {
    abandon_start (u);
    return -1;
  }
  atomic_store (&u->state, UBLK_STATE_LIVE);
  nbdkit_debug ("ublk=%u: /dev/ublkb%u %s: %u queue(s) of depth %u, "
                "%u-byte requests at most", u->id, u->id,
                u->recovered ? "recovered" : "created",
                u->info.nr_hw_queues, u->info.queue_depth,
                u->info.max_io_buf_bytes);
  return 0;
}

/* Stop serving: delete the device or keep it (see the design note).
 * Safe when ublk_start failed or never ran.
 */
static void
ublk_stop (void *state)
{
  struct ublk *u = state;

  if (u == NULL || atomic_load (&u->state) != UBLK_STATE_LIVE)
    return;
  atomic_store (&u->state, UBLK_STATE_STOPPING);
  if (!u->keep)
    ctrl_do (u, UBLK_CMD_STOP_DEV, NULL, 0, 0);
  close_device (u);
  if (!u->keep)
    ctrl_do (u, UBLK_CMD_DEL_DEV, NULL, 0, 0);
  close_control (u);
  atomic_store (&u->state, u->keep ? UBLK_STATE_KEPT : UBLK_STATE_DELETED);
  nbdkit_debug ("ublk=%u: /dev/ublkb%u %s", u->id, u->id,
                u->keep ? "kept for the next controller" : "deleted");
}

/* Free what ublk_start allocated (engine_free). */
static void
ublk_release (void *state)
{
  struct ublk *u = state;

  if (u == NULL)
    return;
  pthread_mutex_destroy (&u->lock);
  pthread_cond_destroy (&u->cond);
  free (u);
}

/* The "ublk" object of the status, or null without ublk=.  Before
 * ublk_start has returned, the configured values with the state
 * "starting".
 */
static json_t *
ublk_status_json (struct volume *v, void *frontend)
{
  struct ublk *u = frontend;
  struct engine_ublk_params cfg;
  enum ublk_state state = UBLK_STATE_STARTING;
  int queues, depth;
  uint64_t inflight = 0, requests = 0, direct = 0;
  bool recovered = false;
  char device[32];

  engine_ublk_params (v, &cfg);
  if (cfg.id < 0)
    return json_null ();
  queues = (int) cfg.queues;
  depth = (int) cfg.depth;
  if (u) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&u->lock);
    state = atomic_load (&u->state);
    if (u->info.nr_hw_queues != 0) {
      queues = u->info.nr_hw_queues;
      depth = u->info.queue_depth;
    }
    inflight = atomic_load (&u->inflight);
    requests = atomic_load (&u->requests);
    direct = atomic_load (&u->direct);
    recovered = u->recovered;
  }
  snprintf (device, sizeof device, "/dev/ublkb%d", cfg.id);
  return json_pack ("{s:s, s:i, s:s, s:i, s:i, s:I, s:I, s:I, s:b, s:b}",
                    "device", device, "id", cfg.id,
                    "state", ublk_map_state_name (state),
                    "queues", queues, "depth", depth,
                    "inflight", (json_int_t) inflight,
                    "requests", (json_int_t) requests,
                    "direct", (json_int_t) direct,
                    "recovered", recovered, "keep", cfg.keep);
}

/* The frontend, as the engine runs it (engine_set_frontend). */
const struct engine_frontend ublk_frontend = {
  .start = ublk_start,
  .stop = ublk_stop,
  .release = ublk_release,
  .status = ublk_status_json,
};
