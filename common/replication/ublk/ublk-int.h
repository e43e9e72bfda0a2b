/* SPDX-License-Identifier: BSD-3-Clause */
/* The ublk frontend's own structures, shared by the device's life cycle
 * (ublk.c) and the serving queues (ublk-queue.c).
 */

#ifndef REPLICATE_UBLK_INT_H
#define REPLICATE_UBLK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>

#include <liburing.h>

#include "engine.h"
#include "aio.h"
#include "nbdkit-calls.h"
#include "ublk.h"

/* Workers per queue at most (fewer when the depth is smaller). */
#define UBLK_WORKERS_MAX 64

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
  bool ring_deferred;           /* deferred task work (ublk-queue.c) */
  int efd;                      /* eventfd: wakes the queue thread */
  uint64_t efd_value;           /* where the eventfd read lands */
  struct __kernel_timespec tick;   /* the period of the deadline checks */
  int poller_fd;                /* the adopted poller's, or -1 */
  bool polling;                 /* a poll of it is in the ring */
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
  struct engine_ublk_params cfg;    /* ublk=, ublk-queues= ... */
  unsigned id;
  bool keep;                    /* ublk-keep=true */
  uint64_t stamp;               /* the volume's, in ublksrv_flags */

  int ctrl_fd;                  /* /dev/ublk-control */
  struct io_uring ctrl;
  bool ctrl_ready;
  bool ioctl_encode;            /* opcodes in their ioctl encoding */
  int cdev_fd;                  /* /dev/ublkcID */

  /* A new device's information and parameters (ublk_map_derive). */
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

};

/* ---- helpers for SQE128 commands -------------------------------------- */

/* The command area of an SQE (80 bytes in an SQE128 ring). */
static inline void *
sqe_cmd (struct io_uring_sqe *sqe)
{
  return (char *) sqe + offsetof (struct io_uring_sqe, cmd);
}

/* A blank URING_CMD SQE (both halves cleared) on fd. */
static inline void
prep_uring_cmd (struct io_uring_sqe *sqe, int fd, uint32_t cmd_op)
{
  memset (sqe, 0, 2 * sizeof *sqe);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = cmd_op;
}

/* An I/O opcode in the encoding the kernel takes. */
static inline uint32_t
io_opcode (const struct ublk *u, unsigned op)
{
  return u->ioctl_encode ? _IOWR ('u', op, struct ublksrv_io_cmd) : op;
}

/* ---- the queues (ublk-queue.c) ---------------------------------------- */

/* Allocate a queue's tags, buffers, eventfd, descriptor page and ring.
 * Returns 0 or -1 after nbdkit_error.
 */
extern int ublk_queue_open (struct ublk *u, struct ublk_queue *q,
                            uint16_t id);

/* Start a queue's finisher, its thread and its workers.  Returns 0 or
 * -1.
 */
extern int ublk_queue_run (struct ublk_queue *q);

/* Stop the queue threads (after draining), the workers and the
 * finishers.
 */
extern void ublk_queues_stop (struct ublk *u);

/* Release what ublk_queue_open allocated. */
extern void ublk_queue_close (struct ublk_queue *q);


#endif /* REPLICATE_UBLK_INT_H */
