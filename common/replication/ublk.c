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
 * Threads.  Per queue: one queue thread, which owns the ring (ublk wants
 * every command of a queue from one task, and completes them in that task),
 * and W = min(depth, UBLK_WORKERS_MAX) workers for what may sleep.  The
 * queue thread reaps CQEs and copies each request's descriptor.  Reads,
 * writes and zeroes that can go without waiting (most of them: aio.c says
 * which) it starts in the engine itself (engine_aio_start); the thread that
 * reads the last leg's answer completes them and puts the tag on the done
 * list.  The rest (flushes, a write whose range is busy or whose
 * activity-log extent is cold, a request larger than a piece) it appends to
 * the work list, waking as many idle workers as it brought requests; a
 * worker runs the synchronous engine call.  A request started without a
 * worker that turns out to need a thread that may sleep (a leg failed or
 * timed out, a membership change is being recorded) goes to the queue's
 * finisher thread (engine_aio_finish), not to the workers: an unfinished
 * write still holds its range, and a worker's write to the same range waits
 * for it in the range lock; were the finishing left to workers, all of them
 * (64 for 128 tags) could be waiting so.  The finisher waits for nothing a
 * worker holds.  Finished tags go on the lock-free done list; whoever puts
 * one there writes the queue's eventfd if the queue thread sleeps and no
 * wake-up is pending yet (the queue thread always has a read of it in its
 * ring), and the queue thread commits every finished tag in one
 * submission.  One queue's thread also drives the engine's poller
 * (poller_adopt: its ring polls the poller's epoll descriptor, and it reads
 * the legs' replies itself), so the requests it started are completed in
 * that thread, with no hand-off at all; the other queues' requests are
 * completed there too and handed over through their eventfds.  The first
 * queue drives at first; at every tick the driver hands the driving to the
 * queue that started the most requests in the last second if that is more
 * than twice its own count (the busiest queue completes its requests
 * itself: with one client process, the queue of that process's CPU).  The
 * poller's own thread drives again once the driving queue ends
 * (hand_driving and queue_thread say how a hand-over and an exit that meet
 * leave exactly one driver).  A timeout in the ring wakes
 * the queue thread every second to apply the engine's timeout= to the
 * requests it started (engine_aio_expire): nobody else waits on
 * them.  Requests never wait for one another, only for a free worker.
 *
 * Tag states (struct ublk_tag; each written only by the tag's owner of
 * the moment, ownership passing through the work list's lock, the done
 * list's atomics and the engine's completion):
 *   KERNEL   a FETCH or COMMIT_AND_FETCH is outstanding   (queue thread)
 *   QUEUED   a request waits on the work list             (queue thread)
 *   RUNNING  a worker serves it                           (worker)
 *   ASYNC    the engine serves it without a worker        (its completion)
 *   TAIL     on the finisher's list, or being finished    (finisher)
 *   DONE     its result is on the done list               (its server)
 *   HELD     it arrived once the queue was draining: left unanswered,
 *            the kernel re-issues it to the next server    (queue thread)
 *   GONE     the kernel ended the tag (device stopped)     (queue thread)
 * KERNEL -> QUEUED -> RUNNING -> DONE -> KERNEL;
 * KERNEL -> ASYNC -> DONE (or TAIL -> DONE) -> KERNEL; KERNEL -> DONE
 * (a request refused at once); KERNEL -> HELD; KERNEL -> GONE.  A queue
 * thread ends when every tag is GONE or, once draining, when no tag is
 * between KERNEL and DONE.
 *
 * Locks: u->lock (the start-up handshake, the device information shown
 * in status) and q->lock (the work and finisher lists) are leaves:
 * nothing is taken while they are held, and no ublk lock is held across
 * an engine call or a kernel command.  v->lock is taken only to
 * publish v->ublk (status reads it under v->lock, then takes u->lock).
 *
 * Start (ublk_start, last in engine_after_fork: the election, the
 * activity-log recovery and the engine's threads are done).  GET_DEV_INFO
 * on ID, then ublk_decide (ublk-map.c):
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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "internal.h"
#include "aio.h"
#include "ublk.h"
#include "cleanup.h"

/* Workers per queue at most (fewer when the depth is smaller). */
#define UBLK_WORKERS_MAX 64

/* How long a start waits for a dead server's device to be released. */
#define UBLK_TAKEOVER_WAIT 60

/* How long to wait for /dev/ublkcID to appear after ADD_DEV. */
#define UBLK_NODE_WAIT 10

/* user_data of the eventfd read, the tick and the poll of the adopted
 * poller (tags are below 4096).
 */
#define EVENTFD_DATA UINT64_MAX
#define TICK_DATA (UINT64_MAX - 1)
#define POLLER_DATA (UINT64_MAX - 2)

enum tag_state {
  TAG_KERNEL, TAG_QUEUED, TAG_RUNNING, TAG_ASYNC, TAG_TAIL, TAG_DONE,
  TAG_HELD, TAG_GONE,
};

struct ublk_queue;

/* One tag of a queue: a request slot with its buffer. */
struct ublk_tag {
  struct ublk_queue *q;
  uint16_t tag;
  enum tag_state state;
  struct ublksrv_io_desc iod;   /* copied from the driver's page */
  struct ublk_call call;        /* what it asks of the engine */
  char *buf;                    /* max_io_buf_bytes, for its data */
  int32_t result;
  struct ublk_tag *next;        /* on the work list or the done list */
  struct engine_aio aio;        /* served without a worker */
  bool in_engine;               /* aio started, not committed (queue thread) */
};

/* Tags waiting for a thread that may sleep (under their queue's lock). */
struct tag_list {
  pthread_cond_t cond;
  struct ublk_tag *head, *tail;
  unsigned idle;                /* threads waiting on the list */
};

/* One hardware queue of the device. */
struct ublk_queue {
  struct ublk *u;
  uint16_t id;
  unsigned depth;
  struct io_uring ring;
  bool ring_ready;
  int efd;                      /* eventfd: wakes the queue thread */
  uint64_t efd_value;           /* where the eventfd read lands */
  struct __kernel_timespec tick;   /* the period of the deadline checks */
  bool polling;                 /* a poll of the poller is in the ring */
  _Atomic bool exited;          /* the queue thread has left its loop */
  _Atomic uint64_t direct;      /* requests started without a worker */
  _Atomic uint64_t direct_seen; /* direct at the driver's last tick */
  const struct ublksrv_io_desc *descs;   /* the driver's page */
  size_t descs_len;
  char *bufs;
  size_t bufs_len;
  struct ublk_tag *tags;

  /* Queue thread only. */
  unsigned busy;                /* tags QUEUED, RUNNING or DONE */
  unsigned gone;                /* tags GONE */

  pthread_t thread;
  bool thread_started;
  pthread_t workers[UBLK_WORKERS_MAX];
  unsigned nr_workers;

  /* The lists of tags for threads that may sleep (q->lock). */
  pthread_mutex_t lock;
  struct tag_list work;         /* requests for the workers */
  struct tag_list tails;        /* started requests for the finisher */
  bool workers_stop;
  pthread_t finisher;
  bool finisher_started;

  /* Finished tags, pushed by workers, the finisher and the engine's
   * completions, taken all at once by the queue thread.  The eventfd
   * is written only while the queue thread waits (waiting), once per
   * wake-up (wake_pending, cleared when the queue thread reaps the
   * eventfd's read).
   */
  struct ublk_tag *_Atomic done;
  _Atomic bool waiting;
  _Atomic bool wake_pending;
};

/* The frontend of one volume. */
struct ublk {
  struct volume *v;
  unsigned id;
  bool keep;                    /* ublk-keep=true */
  uint64_t stamp;               /* the volume's, in ublksrv_flags */

  int ctrl_fd;                  /* /dev/ublk-control */
  struct io_uring ctrl;
  bool ctrl_ready;
  bool ioctl_encode;            /* opcodes in their ioctl encoding */
  int cdev_fd;                  /* /dev/ublkcID */

  /* A new device's information and parameters (ublk_derive). */
  struct ublksrv_ctrl_dev_info want;
  struct ublk_params params;
  uint64_t dev_bytes;
  bool trim;
  uint32_t piece;               /* the engine's largest read or write */

  bool added;                   /* this start added the device */
  bool started;                 /* the device is served by us */

  struct ublk_queue *queues;
  unsigned nr_queues;           /* queues allocated */

  /* u->lock: the device's information (status), the handshake with
   * the queue threads as they start.
   */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct ublksrv_ctrl_dev_info info;
  bool recovered;               /* taken over from an earlier server */
  unsigned nr_reported;         /* queue threads done with their fetches */
  int setup_error;              /* the first one's error, or 0 */

  _Atomic bool draining;        /* queues take no new requests */
  _Atomic enum ublk_state state;
  _Atomic uint64_t inflight, requests;
  _Atomic uint64_t direct;      /* requests served without a worker */

  /* The queue whose thread drives the engine's poller, or NULL (the
   * poller's own thread does); poller_fd is the descriptor to poll.
   */
  struct ublk_queue *_Atomic driver;
  int poller_fd;
};

/* ---- kernel commands -------------------------------------------------- */

/* The command area of an SQE (80 bytes in an SQE128 ring). */
static void *
sqe_cmd (struct io_uring_sqe *sqe)
{
  return (char *) sqe + offsetof (struct io_uring_sqe, cmd);
}

/* A blank URING_CMD SQE (both halves cleared) on fd. */
static void
prep_uring_cmd (struct io_uring_sqe *sqe, int fd, uint32_t cmd_op)
{
  memset (sqe, 0, 2 * sizeof *sqe);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = cmd_op;
}

/* A control opcode in the encoding the kernel takes. */
static uint32_t
ctrl_opcode (const struct ublk *u, unsigned op)
{
  return u->ioctl_encode ? _IOWR ('u', op, struct ublksrv_ctrl_cmd) : op;
}

/* An I/O opcode in the encoding the kernel takes. */
static uint32_t
io_opcode (const struct ublk *u, unsigned op)
{
  return u->ioctl_encode ? _IOWR ('u', op, struct ublksrv_io_cmd) : op;
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

/* ---- the queues ------------------------------------------------------- */

/* Wake the queue thread through its eventfd if it waits, once per
 * wake-up.  The caller has published what the queue thread must see
 * (a done tag, draining) before: with waiting set before the queue
 * thread looks at those, one of the two sides sees the other.
 */
static void
wake_queue (struct ublk_queue *q)
{
  uint64_t one = 1;

  if (atomic_load (&q->waiting) &&
      !atomic_exchange (&q->wake_pending, true) &&
      write (q->efd, &one, sizeof one) != sizeof one)
    nbdkit_debug ("ublk: eventfd write: %m");
}

/* Fill an SQE with a FETCH or COMMIT_AND_FETCH for tag t. */
static void
prep_io (struct ublk_queue *q, struct io_uring_sqe *sqe, unsigned op,
         const struct ublk_tag *t)
{
  struct ublksrv_io_cmd *cmd = sqe_cmd (sqe);

  prep_uring_cmd (sqe, 0, io_opcode (q->u, op));
  sqe->flags = IOSQE_FIXED_FILE;
  cmd->q_id = q->id;
  cmd->tag = t->tag;
  cmd->result = t->result;
  cmd->addr = (uintptr_t) t->buf;
  io_uring_sqe_set_data64 (sqe, t->tag);
}

/* An SQE, submitting what is queued if the ring is full. */
static struct io_uring_sqe *
get_sqe (struct ublk_queue *q)
{
  struct io_uring_sqe *sqe;

  while ((sqe = io_uring_get_sqe (&q->ring)) == NULL)
    io_uring_submit (&q->ring);
  return sqe;
}

/* Queue a read of the eventfd (always one in the ring). */
static void
arm_eventfd (struct ublk_queue *q)
{
  struct io_uring_sqe *sqe = get_sqe (q);

  io_uring_prep_read (sqe, q->efd, &q->efd_value, sizeof q->efd_value, 0);
  io_uring_sqe_set_data64 (sqe, EVENTFD_DATA);
}

/* Queue the next tick (always one in the ring). */
static void
arm_tick (struct ublk_queue *q)
{
  struct io_uring_sqe *sqe = get_sqe (q);

  io_uring_prep_timeout (sqe, &q->tick, 0, 0);
  io_uring_sqe_set_data64 (sqe, TICK_DATA);
}

/* Does q's thread drive the engine's poller? */
static bool
is_driver (const struct ublk_queue *q)
{
  return atomic_load (&q->u->driver) == q;
}

/* While q drives, keep a poll of the poller's descriptor in its ring. */
static void
keep_polling (struct ublk_queue *q)
{
  struct io_uring_sqe *sqe;

  if (q->polling || !is_driver (q))
    return;
  sqe = get_sqe (q);
  io_uring_prep_poll_add (sqe, q->u->poller_fd, POLLIN);
  io_uring_sqe_set_data64 (sqe, POLLER_DATA);
  q->polling = true;
}

/* The poller's descriptor is readable: drive it if q still drives (the
 * driving may have moved to another queue meanwhile).
 */
static void
poller_ready (struct ublk_queue *q)
{
  q->polling = false;
  if (is_driver (q))
    poller_drive (q->u->v->poller);
  keep_polling (q);
}

/* Make queue `to` the poller's driver and wake it.  Should its thread
 * have left its loop, the driving goes back to `back` (a queue, or NULL
 * for the poller's own thread, which is then started again).  The
 * exiting thread clears the driver only if it is itself (queue_thread):
 * each side looks at the other's flag after storing its own, so one of
 * the two sees the other and the poller always has a driver.
 */
static void
hand_driving (struct ublk *u, struct ublk_queue *to, struct ublk_queue *back)
{
  struct ublk_queue *expected = to;

  atomic_store (&u->driver, to);
  if (!atomic_load (&to->exited)) {
    wake_queue (to);
    return;
  }
  if (atomic_compare_exchange_strong (&u->driver, &expected, back) &&
      back == NULL && poller_release (u->v->poller) == -1)
    nbdkit_error ("ublk=%u: the engine's poller did not restart: "
                  "requests to the legs will hang", u->id);
}

/* At a tick of the driving queue q: hand the driving to the queue that
 * started the most requests in the last second if that is more than
 * twice as many as q started (its requests are then completed in their
 * own thread).  Should that queue's thread have left its loop, take the
 * driving back (see queue_thread for the other side).
 */
static void
move_driver (struct ublk_queue *q)
{
  struct ublk *u = q->u;
  struct ublk_queue *best = q;
  uint64_t best_n = 0, mine = 0;
  unsigned i;

  for (i = 0; i < u->nr_queues; ++i) {
    struct ublk_queue *o = &u->queues[i];
    uint64_t now = atomic_load (&o->direct);
    uint64_t n = now - atomic_exchange (&o->direct_seen, now);

    if (o == q)
      mine = n;
    if (n > best_n) {
      best = o;
      best_n = n;
    }
  }
  if (best != q && best_n > 2 * mine)
    hand_driving (u, best, q);
}

/* A tick: time out the late legs of the requests started in the
 * engine.
 */
static void
expire_started (struct ublk_queue *q)
{
  uint64_t now = now_ns ();
  unsigned i;

  for (i = 0; i < q->depth; ++i)
    if (q->tags[i].in_engine)
      engine_aio_expire (&q->tags[i].aio, now);
}

/* The serving loop has nothing left to do. */
static bool
queue_finished (const struct ublk_queue *q)
{
  return q->gone == q->depth ||
    (atomic_load (&q->u->draining) && q->busy == 0);
}

/* Commit every finished tag (COMMIT_AND_FETCH re-arms it). */
static void
commit_done (struct ublk_queue *q)
{
  struct ublk_tag *t = atomic_exchange (&q->done, NULL);

  while (t != NULL) {
    struct ublk_tag *next = t->next;

    prep_io (q, get_sqe (q), UBLK_IO_COMMIT_AND_FETCH_REQ, t);
    t->state = TAG_KERNEL;
    t->in_engine = false;
    q->busy--;
    atomic_fetch_sub (&q->u->inflight, 1);
    t = next;
  }
}

/* A CQE for tag t: returns true if t now holds a request to serve. */
static bool
tag_arrived (struct ublk_queue *q, struct ublk_tag *t, int res)
{
  if (t->state != TAG_KERNEL) {
    nbdkit_error ("ublk=%u: queue %u: completion for tag %u, which the "
                  "kernel does not own", q->u->id, q->id, t->tag);
    return false;
  }
  if (res == UBLK_IO_RES_OK) {
    if (atomic_load (&q->u->draining)) {
      t->state = TAG_HELD;
      return false;
    }
    t->iod = q->descs[t->tag];
    t->state = TAG_QUEUED;
    q->busy++;
    atomic_fetch_add (&q->u->inflight, 1);
    atomic_fetch_add (&q->u->requests, 1);
    return true;
  }
  if (res != UBLK_IO_RES_ABORT)
    nbdkit_error ("ublk=%u: queue %u tag %u: %s", q->u->id, q->id, t->tag,
                  strerror (-res));
  t->state = TAG_GONE;
  q->gone++;
  return false;
}

/* Append the tags first..last (n of them) to a list and wake up to n
 * of its idle threads.
 */
static void
hand_over (struct ublk_queue *q, struct tag_list *list,
           struct ublk_tag *first, struct ublk_tag *last, unsigned n)
{
  unsigned wake;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&q->lock);

  last->next = NULL;
  if (list->tail)
    list->tail->next = first;
  else
    list->head = first;
  list->tail = last;
  for (wake = n < list->idle ? n : list->idle; wake > 0; --wake)
    pthread_cond_signal (&list->cond);
}

/* Put a finished tag on the done list and wake the queue thread. */
static void
post_done (struct ublk_queue *q, struct ublk_tag *t)
{
  struct ublk_tag *head = atomic_load (&q->done);

  do
    t->next = head;
  while (!atomic_compare_exchange_weak (&q->done, &head, t));
  wake_queue (q);
}

/* The engine has served a tag's request (engine_aio_done): post the
 * result, or hand the request to the finisher.
 */
static void
started_done (struct engine_aio *a)
{
  struct ublk_tag *t = (struct ublk_tag *)
    ((char *) a - offsetof (struct ublk_tag, aio));

  if (a->unfinished) {
    t->state = TAG_TAIL;
    hand_over (t->q, &t->q->tails, t, t, 1);
    return;
  }
  t->result = ublk_result (&t->call, a->err ? -1 : 0, a->err);
  t->state = TAG_DONE;
  post_done (t->q, t);
}

/* The engine command for a call that may go without a worker: reads
 * and writes the engine takes in one piece, zeroes and trims (the
 * engine refuses those larger than its own piece).  Returns false for
 * the others.
 */
static bool
started_cmd (const struct ublk *u, const struct ublk_call *c, char *buf,
             struct leg_cmd *cmd)
{
  *cmd = (struct leg_cmd) {
    .buf = buf, .count = c->count, .offset = c->offset,
    .flags = c->flags & (ENGINE_FLAG_FUA | ENGINE_FLAG_MAY_TRIM),
  };
  switch (c->op) {
  case UBLK_CALL_READ:
    cmd->op = OP_READ;
    return c->count <= u->piece;
  case UBLK_CALL_WRITE:
    cmd->op = OP_WRITE;
    return c->count <= u->piece;
  case UBLK_CALL_TRIM:
    cmd->flags |= ENGINE_FLAG_MAY_TRIM;
    /* fall through */
  case UBLK_CALL_ZERO:
    cmd->op = OP_ZERO;
    cmd->buf = NULL;
    return true;
  case UBLK_CALL_FLUSH:
    break;
  }
  return false;
}

/* Serve tag t's request without a worker if it can be: a request the
 * kernel must be refused is answered at once, one the engine takes
 * without waiting is started.  Returns false if t is for a worker.
 */
static bool
serve_started (struct ublk_queue *q, struct ublk_tag *t)
{
  struct ublk *u = q->u;
  int r = ublk_map_request (&t->iod, u->dev_bytes, u->trim, &t->call);

  if (r < 0) {
    t->result = r;
    t->state = TAG_DONE;
    post_done (q, t);
    return true;
  }
  if (!started_cmd (u, &t->call, t->buf, &t->aio.cmd))
    return false;
  t->aio.done = started_done;
  t->state = TAG_ASYNC;
  t->in_engine = true;
  if (engine_aio_start (u->v, &t->aio)) {
    atomic_fetch_add_explicit (&u->direct, 1, memory_order_relaxed);
    atomic_fetch_add_explicit (&q->direct, 1, memory_order_relaxed);
    return true;              /* t may be DONE already: hands off */
  }
  t->state = TAG_QUEUED;
  t->in_engine = false;
  return false;
}

/* Reap every CQE: requests the engine cannot start go to the workers in
 * one batch.
 */
static void
reap (struct ublk_queue *q)
{
  struct ublk_tag *first = NULL, *last = NULL;
  struct io_uring_cqe *cqe;
  unsigned head, seen = 0, n = 0;

  io_uring_for_each_cqe (&q->ring, head, cqe) {
    seen++;
    if (cqe->user_data == EVENTFD_DATA) {
      atomic_store (&q->wake_pending, false);
      arm_eventfd (q);
    }
    else if (cqe->user_data == TICK_DATA) {
      expire_started (q);
      if (is_driver (q))
        move_driver (q);
      arm_tick (q);
    }
    else if (cqe->user_data == POLLER_DATA)
      poller_ready (q);
    else if (cqe->user_data < q->depth) {
      struct ublk_tag *t = &q->tags[cqe->user_data];
      if (!tag_arrived (q, t, cqe->res) || serve_started (q, t))
        continue;
      if (last)
        last->next = t;
      else
        first = t;
      last = t;
      n++;
    }
  }
  io_uring_cq_advance (&q->ring, seen);
  if (n > 0)
    hand_over (q, &q->work, first, last, n);
}

/* Serve until the device stops or the queue has drained.  Before it
 * sleeps, the queue thread says so (waiting) and looks once more for
 * finished tags and for the end: workers skip the eventfd while it is
 * awake.
 */
static void
queue_loop (struct ublk_queue *q)
{
  for (;;) {
    bool sleep;
    int r;

    commit_done (q);
    if (queue_finished (q)) {
      io_uring_submit (&q->ring);
      return;
    }
    keep_polling (q);
    /* A queue handed the driving wakes this one only if it sees it
     * waiting: look at the driving again after saying so.
     */
    atomic_store (&q->waiting, true);
    sleep = atomic_load (&q->done) == NULL && !queue_finished (q) &&
      (q->polling || !is_driver (q));
    r = sleep ? io_uring_submit_and_wait (&q->ring, 1)
              : io_uring_submit (&q->ring);
    atomic_store (&q->waiting, false);
    if (r < 0 && r != -EINTR) {
      nbdkit_error ("ublk=%u: queue %u: io_uring: %s", q->u->id, q->id,
                    strerror (-r));
      return;
    }
    reap (q);
  }
}

/* FETCH every tag and arm the eventfd.  Returns 0 or a negative errno
 * (a fetch the kernel refused at once).
 */
static int
fetch_all (struct ublk_queue *q)
{
  struct io_uring_cqe *cqe;
  unsigned i, head, seen = 0;
  int r, err = 0;

  for (i = 0; i < q->depth; ++i) {
    q->tags[i].state = TAG_KERNEL;
    q->tags[i].result = -1;
    prep_io (q, get_sqe (q), UBLK_IO_FETCH_REQ, &q->tags[i]);
  }
  arm_eventfd (q);
  arm_tick (q);
  r = io_uring_submit (&q->ring);
  if (r < 0)
    return r;
  /* A refused fetch completes during the submission. */
  io_uring_for_each_cqe (&q->ring, head, cqe) {
    seen++;
    if (cqe->user_data < q->depth && cqe->res < 0 && err == 0)
      err = cqe->res;
  }
  io_uring_cq_advance (&q->ring, seen);
  return err;
}

/* Tell the starting thread how this queue's fetches went. */
static void
report_setup (struct ublk_queue *q, int err)
{
  struct ublk *u = q->u;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&u->lock);

  if (err < 0 && u->setup_error == 0)
    u->setup_error = err;
  u->nr_reported++;
  pthread_cond_broadcast (&u->cond);
}

/* The queue thread.  The first queue's drives the engine's poller
 * while it serves.
 */
static void *
queue_thread (void *arg)
{
  struct ublk_queue *q = arg, *me = q;
  struct poller *p = q->u->v->poller;
  int err = fetch_all (q);

  report_setup (q, err);
  if (err == 0)
    queue_loop (q);
  /* Leave the driving to the poller's thread if this queue has it.  A
   * driver handing it over meanwhile looks at `exited` after storing
   * the new driver, so one of the two sides sees the other.
   */
  atomic_store (&q->exited, true);
  if (atomic_compare_exchange_strong (&q->u->driver, &me, NULL) &&
      poller_release (p) == -1)
    nbdkit_error ("ublk=%u: the engine's poller did not restart: "
                  "requests to the legs will hang", q->u->id);
  return NULL;
}

/* The next tag of a list, or NULL when its threads must stop. */
static struct ublk_tag *
next_tag (struct ublk_queue *q, struct tag_list *list)
{
  struct ublk_tag *t;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&q->lock);

  while (list->head == NULL && !q->workers_stop) {
    list->idle++;
    pthread_cond_wait (&list->cond, &q->lock);
    list->idle--;
  }
  t = list->head;
  if (t) {
    list->head = t->next;
    if (list->head == NULL)
      list->tail = NULL;
  }
  return t;
}

/* Run a call on the engine, reads and writes in pieces the engine
 * takes.  Returns 0 or -1 with *err.
 */
static int
call_engine (struct ublk *u, const struct ublk_call *c, char *buf, int *err)
{
  struct volume *v = u->v;
  uint32_t done, n;

  switch (c->op) {
  case UBLK_CALL_FLUSH:
    return engine_flush (v, err);
  case UBLK_CALL_TRIM:
    return engine_trim (v, c->count, c->offset, c->flags, err);
  case UBLK_CALL_ZERO:
    return engine_zero (v, c->count, c->offset, c->flags, err);
  case UBLK_CALL_READ:
  case UBLK_CALL_WRITE:
    break;
  }
  for (done = 0; done < c->count; done += n) {
    int r;

    n = c->count - done < u->piece ? c->count - done : u->piece;
    if (c->op == UBLK_CALL_READ)
      r = engine_pread (v, buf + done, n, c->offset + done, err);
    else
      r = engine_pwrite (v, buf + done, n, c->offset + done, c->flags, err);
    if (r == -1)
      return -1;
  }
  return 0;
}

/* Serve one request (mapped by serve_started); returns the result
 * for the kernel.
 */
static int32_t
serve (struct ublk *u, const struct ublk_tag *t)
{
  int err = 0, r;

  r = call_engine (u, &t->call, t->buf, &err);
  return ublk_result (&t->call, r, err);
}

/* A worker thread: synchronous engine calls. */
static void *
worker_thread (void *arg)
{
  struct ublk_queue *q = arg;
  struct ublk_tag *t;

  while ((t = next_tag (q, &q->work)) != NULL) {
    t->state = TAG_RUNNING;
    t->result = serve (q->u, t);
    t->state = TAG_DONE;
    post_done (q, t);
  }
  return NULL;
}

/* The finisher thread: started requests that need a thread that may
 * sleep (engine_aio_finish).
 */
static void *
finisher_thread (void *arg)
{
  struct ublk_queue *q = arg;
  struct ublk_tag *t;

  while ((t = next_tag (q, &q->tails)) != NULL) {
    engine_aio_finish (&t->aio);
    t->result = ublk_result (&t->call, t->aio.err ? -1 : 0, t->aio.err);
    t->state = TAG_DONE;
    post_done (q, t);
  }
  return NULL;
}

/* Allocate a queue's tags, buffers, eventfd, descriptor page and ring.
 * Returns 0 or -1 after nbdkit_error.
 */
static int
queue_open (struct ublk *u, struct ublk_queue *q, uint16_t id)
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  const size_t max_descs = (UBLK_MAX_QUEUE_DEPTH *
                            sizeof (struct ublksrv_io_desc) + page - 1)
    / page * page;
  struct io_uring_params p = {
    .flags = IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN,
  };
  unsigned i;
  int r;

  q->u = u;
  q->id = id;
  q->depth = u->info.queue_depth;
  q->efd = -1;
  pthread_mutex_init (&q->lock, NULL);
  pthread_cond_init (&q->work.cond, NULL);
  pthread_cond_init (&q->tails.cond, NULL);
  q->tags = calloc (q->depth, sizeof *q->tags);
  q->bufs_len = (size_t) q->depth * u->info.max_io_buf_bytes;
  q->bufs = mmap (NULL, q->bufs_len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (q->bufs == MAP_FAILED)
    q->bufs = NULL;
  if (q->tags == NULL || q->bufs == NULL) {
    nbdkit_error ("ublk=%u: queue %u: out of memory", u->id, id);
    return -1;
  }
  for (i = 0; i < q->depth; ++i) {
    q->tags[i].q = q;
    q->tags[i].tag = (uint16_t) i;
    q->tags[i].buf = q->bufs + (size_t) i * u->info.max_io_buf_bytes;
  }
  q->efd = eventfd (0, EFD_CLOEXEC);
  if (q->efd == -1) {
    nbdkit_error ("ublk=%u: eventfd: %m", u->id);
    return -1;
  }
  q->descs_len = (q->depth * sizeof *q->descs + page - 1) / page * page;
  q->descs = mmap (NULL, q->descs_len, PROT_READ, MAP_SHARED | MAP_POPULATE,
                   u->cdev_fd, UBLKSRV_CMD_BUF_OFFSET + id * max_descs);
  if (q->descs == MAP_FAILED) {
    q->descs = NULL;
    nbdkit_error ("ublk=%u: queue %u: mmap of the request descriptors: %m",
                  u->id, id);
    return -1;
  }
  q->tick = (struct __kernel_timespec) { .tv_sec = 1 };
  r = io_uring_queue_init_params (q->depth + 3, &q->ring, &p);
  if (r < 0) {
    nbdkit_error ("ublk=%u: queue %u: io_uring setup: %s", u->id, id,
                  strerror (-r));
    return -1;
  }
  q->ring_ready = true;
  r = io_uring_register_files (&q->ring, &u->cdev_fd, 1);
  if (r < 0) {
    nbdkit_error ("ublk=%u: queue %u: io_uring file registration: %s",
                  u->id, id, strerror (-r));
    return -1;
  }
  return 0;
}

/* Start a queue's finisher, its thread and its workers.  Returns 0 or
 * -1.
 */
static int
queue_run (struct ublk_queue *q)
{
  unsigned w = q->depth < UBLK_WORKERS_MAX ? q->depth : UBLK_WORKERS_MAX;
  int r;

  r = pthread_create (&q->finisher, NULL, finisher_thread, q);
  if (r != 0) {
    nbdkit_error ("ublk=%u: finisher thread: %s", q->u->id, strerror (r));
    return -1;
  }
  q->finisher_started = true;
  r = pthread_create (&q->thread, NULL, queue_thread, q);
  if (r != 0) {
    nbdkit_error ("ublk=%u: queue thread: %s", q->u->id, strerror (r));
    return -1;
  }
  q->thread_started = true;
  for (q->nr_workers = 0; q->nr_workers < w; q->nr_workers++) {
    r = pthread_create (&q->workers[q->nr_workers], NULL, worker_thread, q);
    if (r != 0) {
      nbdkit_error ("ublk=%u: worker thread: %s", q->u->id, strerror (r));
      return -1;
    }
  }
  return 0;
}

/* Stop the queue threads (after draining), the workers and the
 * finishers.
 */
static void
stop_queues (struct ublk *u)
{
  unsigned i, w;

  atomic_store (&u->draining, true);
  for (i = 0; i < u->nr_queues; ++i)
    if (u->queues[i].thread_started)
      wake_queue (&u->queues[i]);
  for (i = 0; i < u->nr_queues; ++i) {
    struct ublk_queue *q = &u->queues[i];

    if (q->thread_started)
      pthread_join (q->thread, NULL);
    q->thread_started = false;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&q->lock);
      q->workers_stop = true;
      pthread_cond_broadcast (&q->work.cond);
      pthread_cond_broadcast (&q->tails.cond);
    }
    for (w = 0; w < q->nr_workers; ++w)
      pthread_join (q->workers[w], NULL);
    q->nr_workers = 0;
    if (q->finisher_started)
      pthread_join (q->finisher, NULL);
    q->finisher_started = false;
  }
}

/* Release what queue_open allocated. */
static void
queue_close (struct ublk_queue *q)
{
  if (q->ring_ready)
    io_uring_queue_exit (&q->ring);
  q->ring_ready = false;
  if (q->descs)
    munmap ((void *) q->descs, q->descs_len);
  q->descs = NULL;
  if (q->bufs)
    munmap (q->bufs, q->bufs_len);
  q->bufs = NULL;
  if (q->efd >= 0)
    close (q->efd);
  q->efd = -1;
  free (q->tags);
  q->tags = NULL;
  pthread_mutex_destroy (&q->lock);
  pthread_cond_destroy (&q->work.cond);
  pthread_cond_destroy (&q->tails.cond);
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
    stop_queues (u);
    for (i = 0; i < u->nr_queues; ++i)
      queue_close (&u->queues[i]);
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
 * queue has fetched all its tags, the first queue then driving the
 * engine's poller.  Returns 0 or -1.
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
    if (queue_open (u, &u->queues[i], (uint16_t) i) == -1)
      return -1;
  }
  for (i = 0; i < n; ++i)
    if (queue_run (&u->queues[i]) == -1)
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
  u->poller_fd = poller_adopt (u->v->poller);
  hand_driving (u, &u->queues[0], NULL);
  return 0;
}

/* ---- start and stop -------------------------------------------------- */

/* The volume's stamp: 64 bits of its UUID, 0 without metadata. */
static uint64_t
volume_stamp (struct volume *v)
{
  uint64_t stamp = 0;

  if (v->metadata)
    memcpy (&stamp, v->sb.volume_uuid, sizeof stamp);
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
  if (ublk_derive (&lim, u->id, v->cfg.ublk_queues, v->cfg.ublk_depth,
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
    switch (ublk_decide (&found, u->stamp, u->dev_bytes, why, sizeof why)) {
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

/* A new frontend for v, published in v->ublk. */
static struct ublk *
ublk_new (struct volume *v)
{
  struct ublk *u = calloc (1, sizeof *u);

  if (u == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  u->v = v;
  u->id = (unsigned) v->cfg.ublk_id;
  u->keep = v->cfg.ublk_keep;
  u->stamp = volume_stamp (v);
  u->ctrl_fd = u->cdev_fd = -1;
  pthread_mutex_init (&u->lock, NULL);
  pthread_cond_init (&u->cond, NULL);
  atomic_store (&u->state, UBLK_STATE_STARTING);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&v->lock);
    v->ublk = u;
  }
  return u;
}

/* Create or take back /dev/ublkbID (see ublk.h). */
int
ublk_start (struct volume *v)
{
  struct ublk *u;

  if (v->cfg.ublk_id < 0)
    return 0;
  u = ublk_new (v);
  if (u == NULL)
    return -1;
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

/* Stop serving: delete the device or keep it (see the design note). */
void
ublk_stop (struct volume *v)
{
  struct ublk *u = v->ublk;

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

/* Free the frontend (see ublk.h). */
void
ublk_free (struct ublk *u)
{
  if (u == NULL)
    return;
  pthread_mutex_destroy (&u->lock);
  pthread_cond_destroy (&u->cond);
  free (u);
}

/* The status object (see ublk.h).  v->lock held.  Before ublk_start
 * has run, the configured values with the state "starting".
 */
json_t *
ublk_status_json (struct volume *v)
{
  struct ublk *u = v->ublk;
  enum ublk_state state = UBLK_STATE_STARTING;
  int queues = (int) v->cfg.ublk_queues, depth = (int) v->cfg.ublk_depth;
  uint64_t inflight = 0, requests = 0, direct = 0;
  bool recovered = false;
  char device[32];

  if (v->cfg.ublk_id < 0)
    return json_null ();
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
  snprintf (device, sizeof device, "/dev/ublkb%d", v->cfg.ublk_id);
  return json_pack ("{s:s, s:i, s:s, s:i, s:i, s:I, s:I, s:I, s:b, s:b}",
                    "device", device, "id", v->cfg.ublk_id,
                    "state", ublk_state_name (state),
                    "queues", queues, "depth", depth,
                    "inflight", (json_int_t) inflight,
                    "requests", (json_int_t) requests,
                    "direct", (json_int_t) direct,
                    "recovered", recovered, "keep", v->cfg.ublk_keep);
}
