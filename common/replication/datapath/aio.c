/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous client requests: io.c's data path without a thread that
 * sleeps.
 *
 * The synchronous calls of io.c sleep until every leg has answered.  A
 * frontend with its own event loop (ublk: one thread per queue reaping
 * io_uring completions) then needs a worker per request in flight and
 * two thread hand-offs per request: loop -> worker, and worker -> loop
 * once the poller has woken the worker.  Here the loop's thread issues
 * the request to the legs itself and goes on; the poller thread that
 * reads the last answer completes the request and calls the caller's
 * function, which hands the result back to the loop: one hand-off, no
 * worker.
 *
 * Only the common case is served this way, the steps of io.c that never
 * wait:
 *   - reads: one uptodate leg, chosen as io.c chooses it;
 *   - writes and zeroes within one piece (io_max_piece), whose range is
 *     free (rangelock_trylock) and whose activity-log extents are hot
 *     already (al_try_acquire), queued for the asynchronous legs too
 *     (async_enqueue, which never waits unless async-full=block: such
 *     volumes' writes are refused);
 * on a volume without a local leg (the filter's plugin underneath is
 * called synchronously, so it would block the caller).  Anything else
 * is refused before anything is issued: engine_aio_start returns false
 * holding nothing, and the caller uses the synchronous calls.
 *
 * Once issued, what might wait is left to a thread that may: when a leg
 * failed or timed out, when a leg needs a flush for FUA, or when a
 * membership change is being recorded (invariant 1: the write waits
 * before it is acknowledged), done is called with a->unfinished, and
 * engine_aio_finish runs the rest of io.c's steps (flush for FUA, fail
 * legs, judge, try a read on another leg, wait for the change) as the
 * synchronous path would have.  A write keeps its range hold and its
 * extents' references until then, so overlapping writes still reach
 * every leg in one order and the activity log covers it until every
 * leg has answered.
 *
 * Nobody sleeps on an asynchronous request, so nobody times it out
 * while it waits: its owner calls engine_aio_expire from time to time
 * (ublk: every second), which applies ioreq_wait's rule; the legs it
 * times out end their commands with an error, which completes the
 * request as unfinished.
 *
 * Completion runs where ioreq.c wakes issuers: in a poller thread once
 * libnbd has let go of the handle, or in the caller's thread when every
 * leg answered during the issue.  It drops the range hold and the
 * extents' references (atomic operations, a futex wake) and calls done;
 * it never calls libnbd and never takes a lock that is held across I/O.
 *
 * A frontend with such a loop (ublk.c) sits above the engine and uses
 * only engine.h and this file's functions: besides the requests, its
 * parameters (engine_ublk_params), the reading of the legs' replies
 * from its own loop (engine_aio_adopt, _drive, _release; the poller's)
 * and batches of requests sent together (engine_aio_batch_begin, _end:
 * the wire's cork).
 */

#include <config.h>

#include <errno.h>
#include <stddef.h>

#include "aio.h"
#include "al.h"
#include "judge.h"
#include "poller.h"
#include "state.h"
#include "ioreq.h"
#include "member.h"
#include "io.h"

/* The request an ioreq belongs to. */
static struct engine_aio *
aio_of (struct ioreq *r)
{
  return (struct engine_aio *) ((char *) r - offsetof (struct engine_aio, r));
}

/* Drop a write's range hold and its extents' references. */
static void
release_write (struct engine_aio *a)
{
  if (a->v->al)
    al_release (a->v->al, a->cmd.offset, a->cmd.count);
  rangelock_unlock (a->v->rl, &a->hold);
}

/* The leg of a read has answered (ioreq on_done). */
static void
read_done (struct ioreq *r)
{
  struct engine_aio *a = aio_of (r);

  a->err = 0;
  a->unfinished = ioreq_leg_error (r, a->leg) != 0;
  a->done (a);
}

/* Every leg of a write has answered (ioreq on_done). */
static void
write_done (struct ioreq *r)
{
  struct engine_aio *a = aio_of (r);
  struct volume *v = a->v;

  a->unfinished = (atomic_load (&r->failed) | r->timed_out) != 0 ||
    r->fua_emulate != 0 || atomic_load (&v->pending_changes) != 0;
  if (!a->unfinished) {
    /* No leg failed: judging takes no lock and fails nobody. */
    uint16_t counted;

    a->err = judge_write (v, r, a->writing, a->uptodate, "write",
                             &counted);
    release_write (a);
  }
  a->done (a);
}

/* A read: issue it to one uptodate leg. */
static bool
start_read (struct volume *v, struct engine_aio *a)
{
  uint16_t up = MB_UPTODATE (membership_load (v));
  int li = io_choose_read_leg (v, up);

  if (li == -1)
    return false;
  a->uptodate = up;
  a->leg = (unsigned) li;
  atomic_fetch_add_explicit (&v->client_requests, 1, memory_order_relaxed);
  ioreq_init (&a->r, v);
  a->r.on_done = read_done;
  ioreq_submit (&a->r, &v->legs[li], &a->cmd);
  ioreq_release (&a->r);
  return true;
}

/* A write or zeroes: io.c's steps 2 to 5 of one piece, or nothing if
 * one of them would wait.
 */
static bool
start_write (struct volume *v, struct engine_aio *a)
{
  const struct leg_cmd *cmd = &a->cmd;
  uint64_t piece = io_max_piece (v), m;
  uint16_t ticket, w;

  /* Asynchronous legs' queues are fed here too, unless a full queue
   * would make the writer wait (async-full=block): then io.c does.
   */
  if (cmd->count == 0 ||
      cmd->offset / piece != (cmd->offset + cmd->count - 1) / piece ||
      (v->cfg.async_full == ASYNC_FULL_BLOCK &&
       atomic_load_explicit (&v->async_mask, memory_order_relaxed) != 0))
    return false;
  if (rangelock_trylock (v->rl, &a->hold, cmd->offset, cmd->count) != 1)
    return false;
  if (v->al && !al_try_acquire (v->al, cmd->offset, cmd->count)) {
    rangelock_unlock (v->rl, &a->hold);
    return false;
  }
  ticket = member_enter_write (v, &m);
  io_mark_absent (v, MB_ABSENT (m), cmd->offset, cmd->count);
  member_leave_write (v, ticket);
  a->writing = volume_sync_legs (v, MB_WRITING (m));
  a->uptodate = MB_UPTODATE (m);
  if (!judge_is_quorum (v, a->uptodate)) {
    release_write (a);          /* the synchronous path says EIO */
    return false;
  }
  atomic_fetch_add_explicit (&v->client_requests, 1, memory_order_relaxed);
  ioreq_init (&a->r, v);
  a->r.on_done = write_done;
  for (w = a->writing; w != 0; w &= w - 1)
    ioreq_submit (&a->r, &v->legs[__builtin_ctz (w)], cmd);
  /* Before the release, which may complete the request and let go of
   * its range and extents, which the queueing needs held.
   */
  a->async = MB_WRITING (m) & ~a->writing;
  io_queue_async (v, a->async, cmd);
  ioreq_release (&a->r);
  return true;
}

/* Start a request if it can go without waiting (see the note). */
bool
engine_aio_start (struct volume *v, struct engine_aio *a)
{
  a->v = v;
  a->unfinished = false;
  a->err = 0;
  if (v->shape != SHAPE_PLUGIN)
    return false;
  switch (a->cmd.op) {
  case OP_READ:
    return start_read (v, a);
  case OP_WRITE:
  case OP_ZERO:
    return start_write (v, a);
  default:
    return false;
  }
}

/* The rest of an unfinished read: fail the leg, try the others. */
static int
finish_read (struct engine_aio *a)
{
  int e = ioreq_leg_error (&a->r, a->leg), err;

  err = io_read_failed (a->v, a->uptodate, a->leg, a->r.epoch[a->leg], e);
  if (err != 0)
    return err;
  if (io_read_from_legs (a->v, &a->cmd, (uint16_t) (1u << a->leg), e,
                         &err) == -1)
    return err;
  return 0;
}

/* The rest of an unfinished write: io.c's steps 6 to 8. */
static int
finish_write (struct engine_aio *a)
{
  uint16_t counted;
  int err;

  ioreq_fua_flush (&a->r);
  err = judge_write (a->v, &a->r, a->writing, a->uptodate, "write",
                        &counted);
  if (err != 0)
    io_discard_async (a->v, a->async, &a->cmd);
  release_write (a);
  return judge_acknowledge (a->v, err, counted);
}

/* Complete an unfinished request (may block). */
void
engine_aio_finish (struct engine_aio *a)
{
  a->err = a->cmd.op == OP_READ ? finish_read (a) : finish_write (a);
  a->unfinished = false;
  ioreq_destroy (&a->r);
}

/* Time out a request's late legs. */
void
engine_aio_expire (struct engine_aio *a, uint64_t now)
{
  ioreq_expire (&a->r, now);
}

/* The ublk= parameters (see aio.h). */
void
engine_ublk_params (struct volume *v, struct engine_ublk_params *p)
{
  p->id = v->cfg.ublk_id;
  p->queues = v->cfg.ublk_queues;
  p->depth = v->cfg.ublk_depth;
  p->keep = v->cfg.ublk_keep;
}

/* Only the poller's thread, or an adopter, reads replies from now on. */
void
engine_aio_use_thread (struct volume *v)
{
  poller_use_thread (v->poller);
}

/* Take over the reading of replies (see aio.h). */
int
engine_aio_adopt (struct volume *v)
{
  return poller_adopt (v->poller);
}

/* Read the replies that have arrived (the adopter's iteration). */
void
engine_aio_drive (struct volume *v)
{
  poller_drive (v->poller);
}

/* Give the reading of replies back to a thread. */
int
engine_aio_release (struct volume *v)
{
  return poller_release (v->poller);
}

/* Hold this thread's commands until engine_aio_batch_end. */
void
engine_aio_batch_begin (struct engine_aio_batch *b)
{
  wire_cork (&b->cork);
}

/* Send the commands held since engine_aio_batch_begin. */
void
engine_aio_batch_end (struct engine_aio_batch *b)
{
  wire_uncork (&b->cork);
}
