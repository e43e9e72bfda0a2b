/* SPDX-License-Identifier: BSD-3-Clause */
/* The ublk frontend's queues: serving the kernel's requests (the
 * device's life cycle is ublk.c's).
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
 * queue's thread takes the poller over when it starts serving and gives
 * it back to the poller's own thread when it ends (moving the driving to
 * the busiest queue every second was tried, and measured no better).  A
 * timeout in the ring wakes the queue thread every second to apply the
 * engine's timeout= to the requests it started (engine_aio_expire):
 * nobody else waits on them.
 * Requests never wait for one another, only for a free worker.
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
 * Locks: q->lock (the work and finisher lists) is a leaf: nothing is
 * taken while it is held, and it is not held across an engine call or a
 * kernel command.
 */

#include <config.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ublk-int.h"
#include "cleanup.h"
#include "thread-name.h"

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

/* While q drives the engine's poller, keep a poll of the poller's
 * descriptor in its ring.
 */
static void
keep_polling (struct ublk_queue *q)
{
  struct io_uring_sqe *sqe;

  if (q->polling || q->poller_fd < 0)
    return;
  sqe = get_sqe (q);
  io_uring_prep_poll_add (sqe, q->poller_fd, POLLIN);
  io_uring_sqe_set_data64 (sqe, POLLER_DATA);
  q->polling = true;
}

/* The poller's descriptor is readable: drive the poller. */
static void
poller_ready (struct ublk_queue *q)
{
  q->polling = false;
  engine_aio_drive (q->u->v);
  keep_polling (q);
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
  t->result = ublk_map_result (&t->call, a->err ? -1 : 0, a->err);
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
    return true;              /* t may be DONE already: hands off */
  }
  t->state = TAG_QUEUED;
  t->in_engine = false;
  return false;
}

/* Reap every CQE: requests the engine cannot start go to the workers in
 * one batch; the commands the others send to the legs are corked and
 * leave together, one system call per leg connection (wire.c).
 */
static void
reap (struct ublk_queue *q)
{
  struct ublk_tag *first = NULL, *last = NULL;
  struct io_uring_cqe *cqe;
  struct engine_aio_batch batch;
  unsigned head, seen = 0, n = 0;

  engine_aio_batch_begin (&batch);
  io_uring_for_each_cqe (&q->ring, head, cqe) {
    seen++;
    if (cqe->user_data == EVENTFD_DATA) {
      atomic_store (&q->wake_pending, false);
      arm_eventfd (q);
    }
    else if (cqe->user_data == TICK_DATA) {
      expire_started (q);
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
  engine_aio_batch_end (&batch);
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
    atomic_store (&q->waiting, true);
    sleep = atomic_load (&q->done) == NULL && !queue_finished (q);
    r = sleep ? io_uring_submit_and_wait (&q->ring, 1)
              : io_uring_submit_and_get_events (&q->ring);
    atomic_store (&q->waiting, false);
    if (r < 0 && r != -EINTR) {
      nbdkit_error ("ublk=%u: queue %u: io_uring: %s", q->u->id, q->id,
                    strerror (-r));
      return;
    }
    reap (q);
  }
}

/* Enable the ring set up disabled, making this thread its issuer
 * (liburing 2.3 declares io_uring_enable_rings but does not export it).
 * Returns 0 or -1 with errno.
 */
static int
enable_ring (struct ublk_queue *q)
{
  return syscall (__NR_io_uring_register, q->ring.ring_fd,
                  IORING_REGISTER_ENABLE_RINGS, NULL, 0) == -1 ? -1 : 0;
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
  if (q->ring_deferred && enable_ring (q) == -1)
    return -errno;
  r = io_uring_submit_and_get_events (&q->ring);
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
  struct ublk_queue *q = arg;
  struct volume *v = q->u->v;
  int err = fetch_all (q);

  report_setup (q, err);
  if (err != 0)
    return NULL;
  if (q->id == 0)
    q->poller_fd = engine_aio_adopt (v);
  queue_loop (q);
  if (q->poller_fd >= 0 && engine_aio_release (v) == -1)
    nbdkit_error ("ublk=%u: the engine's poller did not restart: "
                  "requests to the legs will hang", q->u->id);
  q->poller_fd = -1;
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
  return ublk_map_result (&t->call, r, err);
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
    t->result = ublk_map_result (&t->call, t->aio.err ? -1 : 0, t->aio.err);
    t->state = TAG_DONE;
    post_done (q, t);
  }
  return NULL;
}

/* Set up a queue's ring.  The kernel's completions (ublk's requests,
 * polls, the eventfd) are posted by task work, run when the queue thread
 * asks for events (DEFER_TASKRUN, which needs a single issuer): the
 * sends and receives it makes to the legs in between are not
 * interrupted to post them one at a time, and each reap finds them
 * together.  The ring starts disabled so that the queue thread, which
 * enables it (fetch_all), is its issuer.  Kernels before 6.1 refuse
 * these flags: the ring is then set up without them.  Returns 0 or a
 * negative errno.
 */
static int
ring_init (struct ublk_queue *q)
{
  const unsigned base = IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN;
  struct io_uring_params p = {
    .flags = base | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
             IORING_SETUP_R_DISABLED,
  };
  int r = io_uring_queue_init_params (q->depth + 3, &q->ring, &p);

  q->ring_deferred = r == 0;
  if (r == -EINVAL) {
    p = (struct io_uring_params) { .flags = base };
    r = io_uring_queue_init_params (q->depth + 3, &q->ring, &p);
  }
  nbdkit_debug ("ublk=%u: queue %u: ring %s", q->u->id, q->id,
                q->ring_deferred ? "with deferred task work" : "plain");
  return r;
}

/* Allocate a queue's tags, buffers, eventfd, descriptor page and ring.
 * Returns 0 or -1 after nbdkit_error.
 */
int
ublk_queue_open (struct ublk *u, struct ublk_queue *q, uint16_t id)
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  const size_t max_descs = (UBLK_MAX_QUEUE_DEPTH *
                            sizeof (struct ublksrv_io_desc) + page - 1)
    / page * page;
  unsigned i;
  int r;

  q->u = u;
  q->id = id;
  q->depth = u->info.queue_depth;
  q->efd = -1;
  q->poller_fd = -1;
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
  r = ring_init (q);
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
int
ublk_queue_run (struct ublk_queue *q)
{
  unsigned w = q->depth < UBLK_WORKERS_MAX ? q->depth : UBLK_WORKERS_MAX;
  int r;

  r = pthread_create (&q->finisher, NULL, finisher_thread, q);
  if (r != 0) {
    nbdkit_error ("ublk=%u: finisher thread: %s", q->u->id, strerror (r));
    return -1;
  }
  thread_name (q->finisher, "rep-ublk-done");
  q->finisher_started = true;
  r = pthread_create (&q->thread, NULL, queue_thread, q);
  if (r != 0) {
    nbdkit_error ("ublk=%u: queue thread: %s", q->u->id, strerror (r));
    return -1;
  }
  thread_name (q->thread, "rep-ublk-queue");
  q->thread_started = true;
  for (q->nr_workers = 0; q->nr_workers < w; q->nr_workers++) {
    r = pthread_create (&q->workers[q->nr_workers], NULL, worker_thread, q);
    if (r != 0) {
      nbdkit_error ("ublk=%u: worker thread: %s", q->u->id, strerror (r));
      return -1;
    }
    thread_name (q->workers[q->nr_workers], "rep-ublk-work");
  }
  return 0;
}

/* Stop the queue threads (after draining), the workers and the
 * finishers.
 */
void
ublk_queues_stop (struct ublk *u)
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

/* Release what ublk_queue_open allocated. */
void
ublk_queue_close (struct ublk_queue *q)
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
