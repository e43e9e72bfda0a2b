/* SPDX-License-Identifier: BSD-3-Clause */
/* Requests fanned out to legs: issue, count down, wait, time out.
 *
 * An ioreq lives on the issuing thread's stack.  ioreq_submit sends one
 * command to one leg (the connection's wire for NBD legs, libnbd aio
 * for TLS ones, a direct call for the local leg) and adds one to the
 * countdown; each completion records its leg's result and subtracts
 * one; the completion that brings the countdown to zero wakes the
 * issuer.  The issuer holds one
 * extra count until it starts waiting, so it sleeps once and is woken
 * once, however many legs there are, and not at all when every leg has
 * answered before it waits.
 *
 * The wake-up is a futex on r->wake: IDLE, SLEEPING (the issuer is in,
 * or about to enter, futex_wait) or DONE.  The waker exchanges in DONE
 * and makes the futex_wake system call only if the issuer was
 * SLEEPING; the issuer checks for DONE before it sleeps and after
 * every return from the futex, so neither a wake-up before it sleeps
 * nor a spurious one (a late futex_wake aimed at an earlier ioreq that
 * had the same stack address) is lost or mistaken.  The exchange is
 * the last access to r by the waker: the issuer may return as soon as
 * it sees DONE, and a futex_wake on an address whose ioreq has gone
 * wakes nobody who would not re-check (glibc's semaphores rely on the
 * same).  Every write made for the request (results, error codes)
 * happens before that exchange: completions count down `pending` with
 * sequentially consistent read-modify-writes, so the last one sees
 * the others' writes, and the issuer sees them all through the
 * exchange (atomics, which thread sanitizers follow, unlike the futex
 * system calls of rangelock.h).  Compared with a semaphore this saves
 * sem_init, sem_destroy and glibc's cancellation bookkeeping on every
 * request, and the deadline is absolute (CLOCK_MONOTONIC, from start_ns) so no
 * clock is read to wait.
 *
 * Waiting (wait_until): an issuer whose request is not complete
 * drives its poller (r->p: the volume's, or for a request to one leg
 * prepared by ioreq_init_for_leg, that leg's) itself if nobody does
 * and issuers may lead it (it leads, see poller.c), until its request
 * is complete; its own completions then run in its own thread and its
 * state never leaves IDLE.  Otherwise it sleeps as a follower
 * (SLEEPING, counted in the poller); the completion that moves it to
 * DONE uncounts it.  With sched=auto the issuer's thread moves to
 * SCHED_OTHER when it leads and to SCHED_BATCH when it sleeps behind a
 * queue of followers (sched.c).
 *
 * One poller per request.  Every connection a request goes to is on
 * the poller its issuer waits on (asserted in ioreq_submit_on), so a
 * leader reads every reply it waits for.  A request to several legs
 * goes to synchronous legs only (volume_sync_legs), all on the
 * volume's poller; an asynchronous leg, whose connections have a
 * poller of their own (poller.c, "A leg's own poller"), is only ever
 * asked alone (ioreq_init_for_leg, ioreq_sync_io), but for a resync's
 * private connections, which are on the volume's poller (resync.c).
 *
 * Completions run in the connection's driver (the poller thread, a
 * leading issuer or the adopter), libnbd's with their handle's lock
 * held: they only record, count and queue the wake-up; they never call
 * into libnbd, and take no lock an issuer may hold while it waits.
 *
 * Timeouts (ioreq_wait): after timeout= seconds, legs still silent are
 * timed out (their sockets are shut down, which makes the wire or
 * libnbd complete their commands with an error) unless no other
 * uptodate leg remains, in which case they get a second period first.
 * Either way the issuer waits for every completion before it returns:
 * no late reply can land in a buffer that has been handed back to
 * nbdkit.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <libnbd.h>

#include "internal.h"
#include "ioreq.h"
#include "state.h"
#include "conn.h"
#include "poller.h"
#include "thread-sched.h"
#include "leg.h"
#include "cleanup.h"
#include "wire.h"

/* Largest request the engine sends to a leg in one command (zero
 * requests are split to this size; see io.c).
 */
#define ZERO_BUF_SIZE (64 * 1024 * 1024)

static const void *zero_buf;
static pthread_once_t zero_buf_once = PTHREAD_ONCE_INIT;

/* Map a read-only region of zero pages (no memory is used for it). */
static void
map_zero_buf (void)
{
  void *p = mmap (NULL, ZERO_BUF_SIZE, PROT_READ,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  zero_buf = p == MAP_FAILED ? NULL : p;
}

/* Zeroes to write when a leg cannot zero natively, or NULL. */
static const void *
zeroes (void)
{
  pthread_once (&zero_buf_once, map_zero_buf);
  return zero_buf;
}

const uint32_t latency_bounds_us[LATENCY_BUCKETS] = {
  50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
  250000, 1000000, 10000000,
};

/* Count one completed request's latency. */
static void
count_latency (struct leg_stats *s, uint64_t us)
{
  unsigned b = 0;

  while (b < LATENCY_BUCKETS && us > latency_bounds_us[b])
    b++;
  atomic_fetch_add_explicit (&s->latency_hist[b], 1, memory_order_relaxed);
  atomic_fetch_add_explicit (&s->latency_us_sum, us, memory_order_relaxed);
  atomic_fetch_add_explicit (&s->latency_count, 1, memory_order_relaxed);
}

/* The states of an ioreq's futex word (see the design note). */
enum { WAKE_IDLE, WAKE_SLEEPING, WAKE_DONE };

/* Prepare a request.  Nothing is issued yet.  err[] is left as it is:
 * only the entries of legs in `failed` are ever read.
 */
void
ioreq_init (struct ioreq *r, struct volume *v)
{
  r->v = v;
  atomic_init (&r->wake, WAKE_IDLE);
  atomic_init (&r->pending, 1);      /* the issuer's own count */
  atomic_init (&r->done, 0);
  atomic_init (&r->failed, 0);
  r->issued = 0;
  atomic_init (&r->timed_out, 0);
  r->fua_emulate = 0;
  r->p = v->poller;
  r->start_ns = now_ns ();
  r->ext_fn = NULL;
  r->ext_opaque = NULL;
  r->on_done = NULL;
}

/* Release the request (after ioreq_wait): it holds no resource. */
void
ioreq_destroy (struct ioreq *r UNUSED)
{
}

/* Count the request in the leg's statistics. */
static void
count_request (struct leg *l, const struct leg_cmd *cmd)
{
  struct leg_stats *s = &l->stats;

  switch (cmd->op) {
  case OP_READ:
    atomic_fetch_add_explicit (&s->reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit (&s->bytes_read, cmd->count,
                               memory_order_relaxed);
    break;
  case OP_WRITE:
    atomic_fetch_add_explicit (&s->writes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit (&s->bytes_written, cmd->count,
                               memory_order_relaxed);
    break;
  case OP_ZERO:
    atomic_fetch_add_explicit (&s->zeroes, 1, memory_order_relaxed);
    break;
  case OP_FLUSH:
    atomic_fetch_add_explicit (&s->flushes, 1, memory_order_relaxed);
    break;
  case OP_CACHE:
  case OP_EXTENTS:
    break;
  }
}

/* Tell the issuer its request is complete: the last access to r.  An
 * issuer that slept as a follower (poller.c) is uncounted here, so
 * that a driver finishing an iteration knows at once whether anybody
 * still waits for it.
 */
static void
wake_issuer (struct ioreq *r)
{
  struct poller *p = r->p;

  if (r->on_done) {
    r->on_done (r);
    return;
  }
  switch (atomic_exchange (&r->wake, WAKE_DONE)) {
  case WAKE_SLEEPING:
    if (p)
      poller_unfollow (p);
    futex_wake (&r->wake, 1);
    break;
  }
}

/* Wake-ups of issuers are deferred by completion callbacks until the
 * thread that ran them has let go of the libnbd handle lock: a callback
 * runs with that lock held, and a futex wake inside it would make every
 * worker issuing on the same connection wait for it.  The callback
 * pushes the request on its connection's wake list (a lock-free stack);
 * whoever called the libnbd function that ran it (the poller's notify
 * calls, or a worker's aio call, which runs callbacks when the
 * connection dies under it) drains the list afterwards.
 */
void
ioreq_wake_deferred (struct conn *c)
{
  struct ioreq *r;

  if (atomic_load_explicit (&c->wake_list, memory_order_relaxed) == NULL)
    return;
  r = atomic_exchange (&c->wake_list, NULL);
  while (r) {
    struct ioreq *next = r->next_wake;   /* r may be gone once woken */
    wake_issuer (r);
    r = next;
  }
}

/* Record one leg's answer and count down; the last answer wakes the
 * issuer, at once or (from a callback on connection c) through c's
 * wake list.  Nothing may touch r after the final decrement except
 * that wake-up.
 */
static void
finish_leg (struct ioreq *r, unsigned leg, int err, struct conn *c)
{
  if (err != 0) {
    r->err[leg] = err;
    atomic_fetch_or (&r->failed, 1u << leg);
    atomic_fetch_add_explicit (&r->v->legs[leg].stats.errors, 1,
                               memory_order_relaxed);
  }
  atomic_fetch_or (&r->done, 1u << leg);
  if (atomic_fetch_sub (&r->pending, 1) != 1)
    return;
  if (c == NULL) {
    wake_issuer (r);
    return;
  }
  r->next_wake = atomic_load (&c->wake_list);
  while (!atomic_compare_exchange_weak (&c->wake_list, &r->next_wake, r))
    ;
}

/* One leg's command on connection s->conn is complete (libnbd's
 * callback, or the wire's reader): count it and record its result.
 */
void
ioreq_slot_done (struct ioslot *s, int err)
{
  struct ioreq *r = s->req;
  struct conn *c = s->conn;
  struct leg *l = &r->v->legs[s->leg];

  count_latency (&l->stats, (now_ns () - r->start_ns) / 1000);
  atomic_fetch_sub (&c->inflight, 1);
  atomic_fetch_sub (&l->inflight, 1);
  finish_leg (r, s->leg, err, c);
}

/* libnbd completion callback (handle lock held).
 *
 * A successful command is retired at once (return 1).  A failed one is
 * left for the poller to retire (conn->unretired): when a connection
 * dies while a worker is issuing a command, libnbd 1.14 completes the
 * command inside the aio call and then reads it again, so it must not
 * be freed by this callback.
 */
static int
completion (void *user_data, int *error)
{
  struct ioslot *s = user_data;
  int err = *error;

  if (err != 0)
    atomic_fetch_add (&s->conn->unretired, 1);
  ioreq_slot_done (s, err);
  return err == 0;
}

/* Pass base:allocation extents (nr_entries numbers: length, type
 * pairs) starting at offset to the request's extent function.  Returns
 * 0 or -1.
 */
int
ioreq_slot_extents (struct ioslot *s, uint64_t offset,
                    const uint32_t *entries, size_t nr_entries)
{
  struct ioreq *r = s->req;
  size_t i;

  for (i = 0; i + 1 < nr_entries; i += 2) {
    uint32_t type = entries[i + 1] & (ENGINE_EXTENT_HOLE | ENGINE_EXTENT_ZERO);
    if (r->ext_fn (r->ext_opaque, offset, entries[i], type) == -1)
      return -1;
    offset += entries[i];
  }
  return 0;
}

/* libnbd extent callback: base:allocation extents to the request. */
static int
extent_cb (void *user_data, const char *metacontext, uint64_t offset,
           uint32_t *entries, size_t nr_entries, int *error)
{
  if (strcmp (metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0)
    return 0;
  if (ioreq_slot_extents (user_data, offset, entries, nr_entries) == -1) {
    *error = EIO;
    return -1;
  }
  return 0;
}

/* The libnbd flags for a command to leg l. */
static uint32_t
nbd_flags_for (const struct leg *l, const struct leg_cmd *cmd)
{
  uint32_t f = 0;

  if ((cmd->flags & ENGINE_FLAG_FUA) && l->caps.can_fua)
    f |= LIBNBD_CMD_FLAG_FUA;
  if (cmd->op == OP_ZERO && !(cmd->flags & ENGINE_FLAG_MAY_TRIM))
    f |= LIBNBD_CMD_FLAG_NO_HOLE;
  if (cmd->op == OP_EXTENTS && (cmd->flags & ENGINE_FLAG_REQ_ONE))
    f |= LIBNBD_CMD_FLAG_REQ_ONE;
  return f;
}

/* Issue cmd through libnbd.  Returns the cookie or -1. */
static int64_t
issue_libnbd (struct conn *c, const struct leg_cmd *cmd, struct ioslot *s)
{
  nbd_completion_callback cb = { .callback = completion, .user_data = s };
  uint32_t f = nbd_flags_for (c->leg, cmd);

  switch (cmd->op) {
  case OP_READ:
    return nbd_aio_pread (c->nbd, cmd->buf, cmd->count, cmd->offset, cb, 0);
  case OP_WRITE:
    return nbd_aio_pwrite (c->nbd, cmd->buf, cmd->count, cmd->offset, cb, f);
  case OP_ZERO:
    if (!c->leg->caps.can_zero)
      return nbd_aio_pwrite (c->nbd, zeroes (), cmd->count, cmd->offset,
                             cb, f & ~LIBNBD_CMD_FLAG_NO_HOLE);
    return nbd_aio_zero (c->nbd, cmd->count, cmd->offset, cb, f);
  case OP_FLUSH:
    return nbd_aio_flush (c->nbd, cb, 0);
  case OP_CACHE:
    return nbd_aio_cache (c->nbd, cmd->count, cmd->offset, cb, 0);
  case OP_EXTENTS:
    return nbd_aio_block_status (c->nbd, cmd->count, cmd->offset,
                                 (nbd_extent_callback) {
                                   .callback = extent_cb, .user_data = s },
                                 cb, f);
  }
  errno = EINVAL;
  return -1;
}

/* Issue cmd on the connection's own wire (wire.c; libnbd's flags are
 * the protocol's).  Returns 0 or an errno.
 */
static int
issue_wire (struct conn *c, const struct leg_cmd *cmd, struct ioslot *s)
{
  uint16_t f = nbd_flags_for (c->leg, cmd);

  switch (cmd->op) {
  case OP_READ:
    return wire_issue (c, NBD_CMD_READ, 0, cmd->buf, cmd->offset,
                       cmd->count, s);
  case OP_WRITE:
    return wire_issue (c, NBD_CMD_WRITE, f, cmd->buf, cmd->offset,
                       cmd->count, s);
  case OP_ZERO:
    if (!c->leg->caps.can_zero)
      return wire_issue (c, NBD_CMD_WRITE, f & ~LIBNBD_CMD_FLAG_NO_HOLE,
                         (void *) zeroes (), cmd->offset, cmd->count, s);
    return wire_issue (c, NBD_CMD_WRITE_ZEROES, f, NULL, cmd->offset,
                       cmd->count, s);
  case OP_FLUSH:
    return wire_issue (c, NBD_CMD_FLUSH, 0, NULL, 0, 0, s);
  case OP_CACHE:
    return wire_issue (c, NBD_CMD_CACHE, 0, NULL, cmd->offset, cmd->count, s);
  case OP_EXTENTS:
    return wire_issue (c, NBD_CMD_BLOCK_STATUS, f, NULL, cmd->offset,
                       cmd->count, s);
  }
  return EINVAL;
}

/* Run cmd on the local leg (the plugin underneath), synchronously.
 * Returns 0 or an errno.
 */
static int
run_local (struct leg *l, const struct leg_cmd *cmd)
{
  const struct local_ops *ops = l->v->local_ops;
  void *o = l->v->local_opaque;
  uint32_t fua = (cmd->flags & ENGINE_FLAG_FUA) && l->caps.can_fua
    ? ENGINE_FLAG_FUA : 0;
  int err = 0, r = -1;

  switch (cmd->op) {
  case OP_READ:
    r = ops->pread (o, cmd->buf, cmd->count, cmd->offset, &err);
    break;
  case OP_WRITE:
    r = ops->pwrite (o, cmd->buf, cmd->count, cmd->offset, fua, &err);
    break;
  case OP_ZERO:
    if (l->caps.can_zero)
      r = ops->zero (o, cmd->count, cmd->offset,
                     fua | (cmd->flags & ENGINE_FLAG_MAY_TRIM), &err);
    else
      r = ops->pwrite (o, zeroes (), cmd->count, cmd->offset, fua, &err);
    break;
  case OP_FLUSH:
    r = ops->flush (o, &err);
    break;
  case OP_CACHE:
    r = ops->cache (o, cmd->count, cmd->offset, &err);
    break;
  case OP_EXTENTS:
    r = ops->extents (o, cmd->count, cmd->offset, cmd->flags, cmd->fn,
                      cmd->fn_opaque, &err);
    break;
  }
  if (r == -1 && err == 0)
    err = EIO;
  return r == -1 ? err : 0;
}

/* Issue cmd on connection c.  Returns 0 or an errno: a dead or closed
 * libnbd handle means the leg is gone (ENOTCONN), never libnbd's
 * "invalid state".
 */
static int
issue (struct conn *c, const struct leg_cmd *cmd, struct ioslot *s)
{
  int e;

  if (c->wire)
    return issue_wire (c, cmd, s);
  if (issue_libnbd (c, cmd, s) != -1) {
    poller_kick_if_needed (c);
    return 0;
  }
  e = nbd_get_errno ();
  if (nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd) || e == 0)
    return ENOTCONN;
  return e;
}

/* Commands that a leg answers without being asked: extents from a leg
 * without block status ("all data"), flush and cache where the leg
 * has none, zeroes where it cannot zero and no zero buffer exists.
 * Returns true (after finishing the leg) if cmd was one of them.
 */
static bool
answer_locally (struct ioreq *r, struct leg *l, const struct leg_cmd *cmd)
{
  unsigned li = l->index;

  switch (cmd->op) {
  case OP_EXTENTS:
    if (l->caps.can_extents)
      return false;
    finish_leg (r, li,
                cmd->fn (cmd->fn_opaque, cmd->offset, cmd->count, 0) == -1
                ? EIO : 0, NULL);
    return true;
  case OP_ZERO:
    if (l->caps.can_zero || zeroes () != NULL)
      return false;
    finish_leg (r, li, ENOMEM, NULL);
    return true;
  case OP_FLUSH:
    if (l->caps.can_flush)
      return false;
    break;
  case OP_CACHE:
    if (l->caps.can_cache)
      return false;
    break;
  case OP_READ:
  case OP_WRITE:
    return false;
  }
  finish_leg (r, li, 0, NULL);
  return true;
}

/* Issue cmd to leg l on connection c (NULL: the least busy one). */
void
ioreq_submit_on (struct ioreq *r, struct leg *l, struct conn *c,
                 const struct leg_cmd *cmd)
{
  unsigned li = l->index;
  struct ioslot *s = &r->slots[li];
  int e;

  r->issued |= 1u << li;
  r->epoch[li] = atomic_load (&l->epoch);
  atomic_fetch_add (&r->pending, 1);
  count_request (l, cmd);
  if ((cmd->flags & ENGINE_FLAG_FUA) && !l->caps.can_fua &&
      (cmd->op == OP_WRITE || cmd->op == OP_ZERO) && l->caps.can_flush)
    r->fua_emulate |= 1u << li;
  if (cmd->op == OP_EXTENTS) {
    r->ext_fn = cmd->fn;
    r->ext_opaque = cmd->fn_opaque;
  }
  if (answer_locally (r, l, cmd))
    return;
  if (l->local) {
    finish_leg (r, li, run_local (l, cmd), NULL);
    return;
  }
  if (c == NULL && !leg_enter (l)) {
    finish_leg (r, li, ENOTCONN, NULL);
    return;
  }
  if (c == NULL)
    s->conn = leg_pick_conn (l);
  else
    s->conn = c;
  s->req = r;
  s->leg = li;
  /* One poller per request (see the design note). */
  assert (s->conn->poller == NULL || s->conn->poller == r->p);
  atomic_fetch_add (&s->conn->inflight, 1);
  atomic_fetch_add (&l->inflight, 1);
  e = issue (s->conn, cmd, s);
  if (e != 0) {
    atomic_fetch_sub (&s->conn->inflight, 1);
    atomic_fetch_sub (&l->inflight, 1);
    finish_leg (r, li, e, NULL);
  }
  ioreq_wake_deferred (s->conn);
  if (c == NULL)
    leg_leave (l);
}

/* Issue cmd to leg l on its least busy connection. */
void
ioreq_submit (struct ioreq *r, struct leg *l, const struct leg_cmd *cmd)
{
  ioreq_submit_on (r, l, NULL, cmd);
}

/* Time out legs: remember why, shut their sockets down. */
static void
time_out_legs (struct ioreq *r, uint32_t legs, double secs)
{
  unsigned i;

  for (i = 0; i < r->v->nr_legs; ++i) {
    struct leg *l = &r->v->legs[i];
    if (!(legs & (1u << i)))
      continue;
    r->timed_out |= 1u << i;
    leg_set_error (l, "request timed out after %gs", secs);
    atomic_store (&l->timed_out, r->epoch[i] + 1);
    leg_shutdown (l);
    if (!l->local && r->slots[i].conn)
      conn_shutdown (r->slots[i].conn);   /* a private connection */
  }
}

/* Sleep on the futex word while it says SLEEPING until the request is
 * complete, or until deadline_ns (CLOCK_MONOTONIC; 0: no limit).
 * Returns 0 when complete, -1 when the deadline passed first.
 */
static int
sleep_until (struct ioreq *r, uint64_t deadline_ns)
{
  struct timespec ts = {
    .tv_sec = (time_t) (deadline_ns / 1000000000),
    .tv_nsec = (long) (deadline_ns % 1000000000),
  };

  while (atomic_load (&r->wake) != WAKE_DONE)
    if (futex_wait (&r->wake, WAKE_SLEEPING, deadline_ns ? &ts : NULL) == -1 &&
        errno == ETIMEDOUT)
      return atomic_load (&r->wake) == WAKE_DONE ? 0 : -1;
  return 0;
}

/* Set the issuer's thread policy for what it waits for: its lone
 * request, or one behind depth followers (sched.c).
 */
static void
adapt_issuer (const struct ioreq *r, bool lone, unsigned depth)
{
  if (r->v->cfg.sched == SCHED_MODE_AUTO)
    sched_adapt (lone, depth);
}

/* Drive the request's poller (this thread holds its token) until the
 * request is complete or deadline_ns passes, then give the token
 * back.  The clock is read at every iteration, its coarse variant
 * (cheaper, a few milliseconds behind at most, so the deadline is
 * never early).  Returns 0 when complete, -1 at the deadline, -2 if
 * epoll failed (the caller sleeps instead).
 */
static int
lead_until (struct ioreq *r, struct poller *p, uint64_t deadline_ns)
{
  int rc = 0;

  adapt_issuer (r, true, 0);
  while (atomic_load (&r->wake) != WAKE_DONE) {
    int timeout_ms = -1;

    if (deadline_ns != 0) {
      uint64_t now = clock_ns (CLOCK_MONOTONIC_COARSE), ms;

      if (now >= deadline_ns) {
        rc = -1;
        break;
      }
      ms = (deadline_ns - now + 999999) / 1000000;
      timeout_ms = ms > INT_MAX ? INT_MAX : (int) ms;
    }
    if (poller_lead (p, timeout_ms) == -1) {
      rc = -2;
      break;
    }
  }
  poller_end_lead (p);
  return rc;
}

/* Count the issuer as a follower: its state becomes SLEEPING (it may
 * be already, after a wait that timed out).  *depth is set to the
 * number of other followers it joined (0 if it was counted already).
 * Returns false if the request is complete.
 */
static bool
become_follower (struct ioreq *r, unsigned *depth)
{
  uint32_t w = WAKE_IDLE;

  *depth = 0;
  if (atomic_compare_exchange_strong (&r->wake, &w, WAKE_SLEEPING)) {
    if (r->p)
      *depth = poller_follow (r->p);
    return true;
  }
  return w != WAKE_DONE;
}

/* Wait until the request is complete, or until deadline_ns (0: no
 * limit): lead the poller if nobody drives it, else sleep as a
 * follower (see poller.c).  After counting itself as a follower the
 * issuer tries the token once more: a leader that gave it back in
 * between may not have seen the count.  If epoll fails under a leader
 * (it cannot, short of a bug) the issuer only sleeps from then on.
 * Returns 0 when complete, -1 when the deadline passed first.
 */
static int
wait_until (struct ioreq *r, uint64_t deadline_ns)
{
  struct poller *p = r->p;
  uint32_t w = WAKE_SLEEPING;
  unsigned depth;
  int rc;

  if (p && poller_try_lead (p)) {
    rc = lead_until (r, p, deadline_ns);
    if (rc != -2)
      return rc;
    p = NULL;
  }
  if (!become_follower (r, &depth))
    return 0;
  if (p && poller_try_lead (p)) {
    if (atomic_compare_exchange_strong (&r->wake, &w, WAKE_IDLE))
      poller_unfollow (p);
    rc = lead_until (r, p, deadline_ns);
    if (rc != -2)
      return rc;
    if (!become_follower (r, &depth))
      return 0;
  }
  adapt_issuer (r, false, depth);
  return sleep_until (r, deadline_ns);
}

/* Prepare a request to leg l alone, its issuer waiting on the leg's
 * poller (see the design note).
 */
void
ioreq_init_for_leg (struct ioreq *r, struct leg *l)
{
  ioreq_init (r, l->v);
  r->p = leg_poller (l);
}

/* Wait until every leg has answered, timing out silent legs (see the
 * design note).  Returns when every callback has run.
 */
void
ioreq_wait (struct ioreq *r)
{
  double t = r->v->cfg.timeout;
  uint64_t period = (uint64_t) (t * 1e9);
  uint64_t deadline = r->start_ns + period;
  bool extended = false;
  uint32_t silent;
  uint16_t up;

  if (atomic_fetch_sub (&r->pending, 1) == 1)
    return;
  while (wait_until (r, deadline) == -1) {
    silent = r->issued & ~atomic_load (&r->done);
    up = MB_UPTODATE (membership_load (r->v));
    if (silent != 0 && !extended && (up & silent) && !(up & ~silent)) {
      extended = true;          /* the last uptodate legs: twice as long */
      deadline += period;
      continue;
    }
    if (silent != 0)
      time_out_legs (r, silent, extended ? 2 * t : t);
    wait_until (r, 0);
    return;
  }
}

/* Wait, then make FUA writes durable on the legs that do not support
 * FUA.
 */
void
ioreq_wait_fua (struct ioreq *r)
{
  ioreq_wait (r);
  ioreq_fua_flush (r);
}

/* In a finished request, flush the legs that took a FUA write without
 * FUA, and count a failed flush as that leg's error.
 */
void
ioreq_fua_flush (struct ioreq *r)
{
  static const struct leg_cmd flush = { .op = OP_FLUSH };
  struct ioreq f;
  uint32_t legs;
  unsigned i;

  if (r->fua_emulate == 0)
    return;
  legs = r->fua_emulate & ~r->timed_out & ~atomic_load (&r->failed);
  if (legs == 0)
    return;
  ioreq_init (&f, r->v);
  f.p = r->p;
  for (i = 0; i < r->v->nr_legs; ++i)
    if (legs & (1u << i))
      ioreq_submit (&f, &r->v->legs[i], &flush);
  ioreq_wait (&f);
  for (i = 0; i < r->v->nr_legs; ++i)
    if ((legs & (1u << i)) && (atomic_load (&f.failed) & (1u << i))) {
      r->err[i] = f.err[i];
      atomic_fetch_or (&r->failed, 1u << i);
    }
  r->timed_out |= f.timed_out;
  ioreq_destroy (&f);
}

/* An asynchronous request (r->on_done set) has been issued to every
 * leg: give up the issuer's count.  The last answer calls r->on_done,
 * here if every leg has answered already.
 */
void
ioreq_release (struct ioreq *r)
{
  if (atomic_fetch_sub (&r->pending, 1) == 1)
    r->on_done (r);
}

/* The deadline of an asynchronous request, which nobody waits on: its
 * owner calls this from time to time (now from now_ns) while the
 * request is in flight.  Legs still silent after timeout= seconds are
 * timed out as ioreq_wait does it, the last uptodate legs only after
 * twice as long.  Their callbacks then complete the request.
 */
void
ioreq_expire (struct ioreq *r, uint64_t now)
{
  double t = r->v->cfg.timeout;
  uint64_t period = (uint64_t) (t * 1e9);
  uint32_t silent = r->issued & ~atomic_load (&r->done) & ~r->timed_out;
  uint16_t up;
  bool last;

  if (silent == 0 || now < r->start_ns + period)
    return;
  up = MB_UPTODATE (membership_load (r->v));
  last = (up & silent) && !(up & ~silent);
  if (last && now < r->start_ns + 2 * period)
    return;
  time_out_legs (r, silent, last ? 2 * t : t);
}

/* The error of leg li in a finished request: its errno, ETIMEDOUT if
 * it was timed out, or 0.
 */
int
ioreq_leg_error (const struct ioreq *r, unsigned li)
{
  if (r->timed_out & (1u << li))
    return ETIMEDOUT;
  if (!(atomic_load (&r->failed) & (1u << li)))
    return 0;
  return r->err[li];
}

/* Run one command on one leg and wait (FUA made durable), on the
 * leg's poller.  Returns 0 or an errno.
 */
int
ioreq_sync_io (struct leg *l, const struct leg_cmd *cmd)
{
  struct ioreq r;
  int err;

  ioreq_init_for_leg (&r, l);
  ioreq_submit (&r, l, cmd);
  ioreq_wait_fua (&r);
  err = ioreq_leg_error (&r, l->index);
  ioreq_destroy (&r);
  return err;
}
