/* SPDX-License-Identifier: BSD-3-Clause */
/* The client data path: read, write, zero, trim, flush, cache, extents.
 *
 * Write-like requests (write, zero, trim) go through the same steps:
 *   1. split into pieces the activity log can always hold at once;
 *   2. take the range lock over the piece (overlapping writes in flight
 *      are serialised, so every leg applies them in the same order);
 *   3. make the piece's activity-log extents hot (metadata only);
 *   4. read the membership, mark the piece in the bitmaps of absent
 *      slots, give the ticket back;
 *   5. issue to every synchronous leg that receives writes, queue for
 *      the asynchronous ones (async.c: a copy of the data), sleep once;
 *   6. emulate FUA with a flush where the leg lacks it;
 *   7. judge the answers (judge.c): a refusal every leg returned alike
 *      fails nobody, any other error fails the legs that returned it,
 *      success needs `quorum` legs that were uptodate at step 4;
 *   8. release the extents and the range, and acknowledge a success
 *      only once every membership change under way is recorded and the
 *      legs it counted on are still uptodate (judge_acknowledge).
 *
 * The client's buffer goes straight to libnbd: no copy (but for an
 * asynchronous leg's queue, which must outlive the acknowledgement).
 *
 * Cost on the hot path (a write to hot extents of a healthy volume, each
 * leg answering): steps 3 and 4 are a compare-and-swap per extent and
 * one load of the membership word (no ticket: see member.c), and step
 * 7 looks only at the mask of legs that failed.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "io.h"
#include "state.h"
#include "select.h"
#include "ioreq.h"
#include "member.h"
#include "judge.h"
#include "al.h"
#include "async.h"
#include "cleanup.h"
#include "array.h"

/* -D replicate.queue_pause=MS: the first write that queues for an
 * asynchronous leg waits MS milliseconds after reading the membership
 * (its synchronous legs' requests issued), before it queues, its range
 * and extents held: a writer the scheduler stalls there while the leg
 * drops out and comes back.  For tests only
 * (test-async-late-queue.sh).
 */
int replicate_debug_queue_pause = 0;        /* exported by the .syms */

/* -D replicate.ticket_pause=MS: the first write that takes a write
 * ticket (the membership it read has an absent slot) waits MS
 * milliseconds after reading the membership, before it marks the
 * absent slots' bitmaps (step 4), its range and extents held: a writer
 * the scheduler stalls there while the membership changes, which must
 * not be published as done before it has marked (member.c,
 * membership_publish).  For tests only (test-safety-resync-publish.sh).
 */
int replicate_debug_ticket_pause = 0;       /* exported by the .syms */
static atomic_bool ticket_paused;           /* it paused a write */

/* A piece of a request of op, at most piece bytes, that every leg
 * accepts: a read, a write, and a zero that a leg without native
 * write-zeroes gets as writes of zeroes (when a leg declared a
 * maximum), go out within the maximum block size the clients were
 * told, which every leg accepts (caps_leg_fits).  A client may send more (nbdkit 1.32 and
 * libnbd 1.14 do not enforce the maximum): a leg whose server enforces
 * a smaller one would refuse what the others took, and be failed.
 */
uint64_t
io_piece_within (struct volume *v, enum leg_op op, uint64_t piece)
{
  uint32_t max = caps_request_max (&v->caps);

  if ((op == OP_READ || op == OP_WRITE ||
       (op == OP_ZERO && !v->caps.trim && v->caps.max_block != 0)) &&
      max < piece)
    return max;
  return piece;
}

/* Largest piece a write-like request is cut into. */
uint64_t
io_max_piece (struct volume *v)
{
  uint64_t piece = 64 * 1024 * 1024;

  if (v->al) {
    uint64_t extents = v->cfg.al_extents / 2 ? v->cfg.al_extents / 2 : 1;
    uint64_t al_span = extents * v->cfg.al_extent;
    if (al_span < piece)
      piece = al_span;
  }
  return piece;
}

/* Mark [offset, offset+count) in the bitmaps of the absent slots. */
void
io_mark_absent (struct volume *v, uint16_t absent, uint64_t offset,
                uint64_t count)
{
  uint64_t first = offset / v->cfg.chunk;
  uint64_t last = (offset + count - 1) / v->cfg.chunk;

  for (; absent != 0; absent &= absent - 1) {
    struct bitmap *b = volume_bitmap (v, (unsigned) __builtin_ctz (absent));
    if (b != NULL)
      bitmap_mark_range (b, first, last);
  }
}

/* Step 5 for the asynchronous legs among the writing ones: their
 * queues (async.c), while the synchronous legs work.  The caller holds
 * the range lock and the activity-log extents.
 */
void
io_queue_async (struct volume *v, uint16_t async, const struct leg_cmd *cmd)
{
  static atomic_bool paused;

  if (async != 0)
    debug_pause_once (&paused, replicate_debug_queue_pause, "write",
                      "before it queues for the asynchronous legs",
                      "queue_pause");
  for (; async != 0; async &= async - 1)
    async_enqueue (v, &v->legs[__builtin_ctz (async)], cmd);
}

/* A write queued for the asynchronous legs among the writing ones was
 * not kept by the volume (the client gets an error): they fall behind
 * with its range in their bitmaps, so that what they hold there comes
 * from the volume again (async-behind.c).  The caller holds the range
 * lock and the activity-log extents.
 */
void
io_discard_async (struct volume *v, uint16_t async, const struct leg_cmd *cmd)
{
  for (; async != 0; async &= async - 1)
    async_discard (&v->legs[__builtin_ctz (async)], cmd);
}

/* Steps 3 to 7 of one piece whose range lock the caller holds (verify
 * repairs under the lock it compared with).  Returns 0 or an errno.
 */
int
io_write_locked (struct volume *v, const struct leg_cmd *cmd,
                 uint16_t *counted)
{
  struct ioreq r;
  uint64_t m;
  uint16_t ticket, writing, uptodate, w;
  int err;

  if (v->al) {
    err = al_acquire (v->al, cmd->offset, cmd->count);
    if (err != 0)
      return state_errno_for_client (err);
  }

  ticket = member_enter_write (v, &m);
  if (MB_ABSENT (m) != 0)
    debug_pause_once (&ticket_paused, replicate_debug_ticket_pause, "write",
                      "before it marks the bitmaps of the absent slots",
                      "ticket_pause");
  io_mark_absent (v, MB_ABSENT (m), cmd->offset, cmd->count);
  member_leave_write (v, ticket);
  writing = volume_sync_legs (v, MB_WRITING (m));
  uptodate = MB_UPTODATE (m);

  *counted = 0;
  if (!judge_is_quorum (v, uptodate))
    err = EIO;
  else {
    ioreq_init (&r, v);
    for (w = writing; w != 0; w &= w - 1)
      ioreq_submit (&r, &v->legs[__builtin_ctz (w)], cmd);
    io_queue_async (v, MB_WRITING (m) & ~writing, cmd);
    ioreq_wait_fua (&r);
    err = judge_write (v, &r, writing, uptodate, "write", counted);
    ioreq_destroy (&r);
    if (err != 0)
      io_discard_async (v, MB_WRITING (m) & ~writing, cmd);
  }

  if (v->al)
    al_release (v->al, cmd->offset, cmd->count);
  return err;
}

/* Does a client request break the minimum block size the clients are
 * told (the largest of the legs' minimums)?  A leg's server may refuse
 * such a request with EINVAL, as the NBD protocol allows: a leg that
 * refused a write another leg took would be failed (and a read would
 * fail or not depending on the leg chosen), so the controller refuses
 * it first, as every leg would.  A request may end at the end of the
 * volume.
 */
static bool
misaligned (struct volume *v, uint64_t offset, uint64_t count)
{
  uint32_t min = v->caps.min_block;

  if (min <= 1)
    return false;
  return offset % min != 0 || (count % min != 0 && offset + count != v->size);
}

/* One piece of a write-like request (steps 2 to 8). */
static int
write_piece (struct volume *v, const struct leg_cmd *cmd)
{
  struct range_hold hold;
  uint16_t counted;
  int err;

  if (rangelock_lock (v->rl, &hold, cmd->offset, cmd->count) == -1)
    return ENOMEM;
  err = io_write_locked (v, cmd, &counted);
  rangelock_unlock (v->rl, &hold);
  return judge_acknowledge (v, err, counted);
}

/* A write-like request, cut into pieces.  Returns 0 or -1 with *err. */
static int
write_request (struct volume *v, struct leg_cmd *cmd, int *err)
{
  uint64_t piece = io_piece_within (v, cmd->op, io_max_piece (v));
  uint64_t end = cmd->offset + cmd->count;
  int e;

  if (misaligned (v, cmd->offset, cmd->count)) {
    *err = EINVAL;
    return -1;
  }
  atomic_fetch_add_explicit (&v->client_requests, 1, memory_order_relaxed);
  if (cmd->op == OP_WRITE)
    atomic_fetch_add_explicit (&v->client_write_bytes, cmd->count,
                               memory_order_relaxed);
  for (;;) {
    uint64_t boundary = (cmd->offset / piece + 1) * piece;

    if (end <= boundary)        /* the last (usually the only) piece */
      break;
    cmd->count = (uint32_t) (boundary - cmd->offset);
    e = write_piece (v, cmd);
    if (e != 0) {
      *err = e;
      return -1;
    }
    if (cmd->buf)
      cmd->buf = (char *) cmd->buf + cmd->count;
    cmd->offset = boundary;
  }
  cmd->count = (uint32_t) (end - cmd->offset);
  e = write_piece (v, cmd);
  if (e != 0) {
    *err = e;
    return -1;
  }
  return 0;
}

/* Client write. */
int
engine_pwrite (struct volume *v, const void *buf, uint32_t count,
               uint64_t offset, uint32_t flags, int *err)
{
  struct leg_cmd cmd = {
    .op = OP_WRITE, .buf = (void *) buf, .count = count, .offset = offset,
    .flags = flags & ENGINE_FLAG_FUA,
  };
  return write_request (v, &cmd, err);
}

/* Client write-zeroes. */
int
engine_zero (struct volume *v, uint32_t count, uint64_t offset,
             uint32_t flags, int *err)
{
  struct leg_cmd cmd = {
    .op = OP_ZERO, .count = count, .offset = offset,
    .flags = flags & (ENGINE_FLAG_FUA | ENGINE_FLAG_MAY_TRIM),
  };
  return write_request (v, &cmd, err);
}

/* Client trim: forwarded as write-zeroes that may punch holes, so every
 * leg reads back the same zeroes (only advertised when every leg zeroes
 * natively).
 */
int
engine_trim (struct volume *v, uint32_t count, uint64_t offset,
             uint32_t flags, int *err)
{
  return engine_zero (v, count, offset,
                      (flags & ENGINE_FLAG_FUA) | ENGINE_FLAG_MAY_TRIM, err);
}

/* Client flush: every synchronous leg that receives writes; the
 * asynchronous legs' epochs end here (they flush in their own time).
 */
int
engine_flush (struct volume *v, int *err)
{
  async_cut_epochs (v);
  return judge_flush_legs (v, volume_sync_legs (v, MB_WRITING (membership_load (v))),
                           err);
}

/* Choose the leg for a read among candidates. */
int
io_choose_read_leg (struct volume *v, uint16_t candidates)
{
  unsigned inflight[MAX_LEGS];
  unsigned rr = atomic_load_explicit (&v->rr_next, memory_order_relaxed);
  size_t i;
  int li;

  for (i = 0; i < v->nr_legs; ++i)
    inflight[i] = atomic_load_explicit (&v->legs[i].inflight,
                                        memory_order_relaxed);
  li = select_read_leg (v->cfg.read, candidates, inflight, v->nr_legs, &rr);
  atomic_store_explicit (&v->rr_next, rr, memory_order_relaxed);
  return li;
}

/* Leg li, chosen among the uptodate legs `up`, answered a read-like
 * command with error e (its connections' epoch at issue: epoch).
 * Returns 0 after failing the leg (another leg is to be tried), or the
 * errno for the client: an error that is the request's fault, and a
 * media error of the last uptodate leg (as from a single disk), fail
 * nobody.
 */
int
io_read_failed (struct volume *v, uint16_t up, unsigned li, unsigned epoch,
                int e)
{
  if (!state_errno_fails_leg (e))
    return state_errno_for_client (e);
  if (!state_errno_is_disconnect (e) && (up & ~(1u << li)) == 0)
    return state_errno_for_client (e);
  member_fail_leg (v, &v->legs[li], epoch, "read failed: %s", strerror (e));
  return 0;
}

/* Send a read-like command (read, extents) to one uptodate leg after
 * another, skipping the legs in `tried`, until one answers (see
 * io_read_failed).  last is the error of the last leg tried.
 */
int
io_read_from_legs (struct volume *v, const struct leg_cmd *cmd,
                   uint16_t tried, int last, int *err)
{
  for (;;) {
    uint16_t up = MB_UPTODATE (membership_load (v));
    struct ioreq r;
    unsigned epoch;
    int li, e;

    li = io_choose_read_leg (v, up & ~tried);
    if (li == -1) {
      *err = state_errno_for_client (last);
      return -1;
    }
    ioreq_init (&r, v);
    ioreq_submit (&r, &v->legs[li], cmd);
    ioreq_wait (&r);
    e = ioreq_leg_error (&r, (unsigned) li);
    epoch = r.epoch[li];
    ioreq_destroy (&r);
    if (e == 0)
      return 0;
    tried |= 1u << li;
    last = e;
    e = io_read_failed (v, up, (unsigned) li, epoch, e);
    if (e != 0) {
      *err = e;
      return -1;
    }
  }
}

/* Client read. */
int
engine_pread (struct volume *v, void *buf, uint32_t count, uint64_t offset,
              int *err)
{
  struct leg_cmd cmd = {
    .op = OP_READ, .buf = buf, .count = count, .offset = offset,
  };
  uint32_t piece = io_piece_within (v, OP_READ, UINT32_MAX);

  if (misaligned (v, offset, count)) {
    *err = EINVAL;
    return -1;
  }
  atomic_fetch_add_explicit (&v->client_requests, 1, memory_order_relaxed);
  while (count > piece) {       /* see io_piece_within */
    cmd.count = piece;
    if (io_read_from_legs (v, &cmd, 0, EIO, err) == -1)
      return -1;
    cmd.buf = (char *) cmd.buf + piece;
    cmd.offset += piece;
    count -= piece;
  }
  cmd.count = count;
  return io_read_from_legs (v, &cmd, 0, EIO, err);
}

/* Extents collected from a leg, passed on to the client's function
 * only once the leg has answered successfully (a failed leg's partial
 * answer must not reach the client, who may get another leg's).
 */
struct extent_buf {
  struct extent_item { uint64_t offset, length; uint32_t type; } *items;
  size_t nr, cap;
};

/* Collect one extent. */
static int
collect_extent (void *opaque, uint64_t offset, uint64_t length,
                uint32_t type)
{
  struct extent_buf *eb = opaque;

  struct extent_item *p = array_reserve_one (eb->items, eb->nr, &eb->cap,
                                             sizeof *p, 16);

  if (p == NULL)
    return -1;
  eb->items = p;
  eb->items[eb->nr++] = (struct extent_item) { offset, length, type };
  return 0;
}

/* Client block status, answered by one uptodate leg (a leg without
 * block status answers "allocated data", see ioreq.c).
 */
int
engine_extents (struct volume *v, uint32_t count, uint64_t offset,
                uint32_t flags, extent_fn fn, void *opaque, int *err)
{
  struct extent_buf eb = { 0 };
  struct leg_cmd cmd = {
    .op = OP_EXTENTS, .count = count, .offset = offset,
    .flags = flags & ENGINE_FLAG_REQ_ONE, .fn = collect_extent,
    .fn_opaque = &eb,
  };
  size_t i;
  int r = 0;

  if (io_read_from_legs (v, &cmd, 0, EIO, err) == -1) {
    free (eb.items);
    return -1;
  }
  for (i = 0; i < eb.nr && r == 0; ++i)
    r = fn (opaque, eb.items[i].offset, eb.items[i].length,
            eb.items[i].type);
  free (eb.items);
  if (r == -1)
    *err = EIO;
  return r;
}

/* Client cache: a prefetch hint passed to every uptodate leg that
 * supports it; errors are not the client's business.
 */
int
engine_cache (struct volume *v, uint32_t count, uint64_t offset,
              int *err UNUSED)
{
  struct leg_cmd cmd = { .op = OP_CACHE, .count = count, .offset = offset };
  uint16_t up = MB_UPTODATE (membership_load (v));
  struct ioreq r;
  unsigned i;

  ioreq_init (&r, v);
  for (i = 0; i < v->nr_legs; ++i)
    if ((up & (1u << i)) && v->legs[i].caps.can_cache)
      ioreq_submit (&r, &v->legs[i], &cmd);
  ioreq_wait (&r);
  ioreq_destroy (&r);
  return 0;
}
