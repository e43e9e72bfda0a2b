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
 *   5. issue to every leg that receives writes, sleep once;
 *   6. emulate FUA with a flush where the leg lacks it;
 *   7. judge the answers: a refusal of the request every leg returned
 *      alike (EINVAL, EPERM ...: nothing was touched) goes to the
 *      client and fails nobody; any other error fails the legs that
 *      returned it (recorded before we return), and when every leg
 *      returned one, all but one of them, so that the range reads the
 *      same on the uptodate legs again; success needs `quorum` legs
 *      that were uptodate at step 4;
 *   8. release the extents and the range, wait until any membership
 *      change is recorded, and acknowledge a success only if the legs
 *      it counted on are still uptodate then (a change that could not
 *      be recorded failed them: the write is EIO).
 *
 * The client's buffer goes straight to libnbd: no copy.
 *
 * Cost on the hot path (a write to hot extents of a healthy volume, each
 * leg answering): steps 3 and 4 are a compare-and-swap per extent and
 * one load of the membership word (no ticket: see member.c), step 7
 * looks only at the mask of legs that failed, and the quorum is counted
 * with an inline popcount of the 16-bit masks (x86-64's baseline has no
 * POPCNT instruction; __builtin_popcount would call libgcc), and only
 * for quorum > 1: with quorum 1 a non-empty mask is enough.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "al.h"
#include "cleanup.h"
#include "array.h"

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
    unsigned s = (unsigned) __builtin_ctz (absent);
    if (v->bitmaps[s] != NULL)
      bitmap_mark_range (v->bitmaps[s], first, last);
  }
}

/* Number of bits set in a 16-bit mask, without libgcc's popcount. */
static unsigned
count16 (uint16_t m)
{
  unsigned x = m;

  x = x - ((x >> 1) & 0x5555);
  x = (x & 0x3333) + ((x >> 2) & 0x3333);
  x = (x + (x >> 4)) & 0x0f0f;
  return (x + (x >> 8)) & 0x1f;
}

/* Does a set of legs make a quorum? */
bool
io_is_quorum (const struct volume *v, uint16_t legs)
{
  return v->quorum <= 1 ? legs != 0 : count16 (legs) >= v->quorum;
}

/* Do the legs agree on one refusal of the request (see
 * errno_is_refusal)?  Then it is returned to the client and nobody
 * fails: no leg touched its data.
 */
static int
common_refusal (const struct ioreq *r, uint16_t legs)
{
  int common = 0;
  unsigned i;

  for (i = 0; i < MAX_LEGS; ++i) {
    int e;
    if (!(legs & (1u << i)))
      continue;
    e = ioreq_leg_error (r, i);
    if (!errno_is_refusal (e) || (common && e != common))
      return 0;
    common = e;
  }
  return common;
}

/* Every leg of a write-like request failed it with a data-path error:
 * each may or may not hold the data now.  One leg is kept (the lowest
 * uptodate one that answered, rather than timed out or lost its
 * connection) and the others are failed, so the range reads the same
 * on every uptodate leg again; their bitmaps get the range (it is hot
 * in the activity log), and their resync makes them equal to the one
 * kept.  Returns the leg kept, as a mask (0 if none can be).
 */
static uint16_t
keep_one_leg (struct volume *v, const struct ioreq *r, uint16_t legs,
              uint16_t uptodate)
{
  uint16_t candidates = legs & uptodate & MB_UPTODATE (membership_load (v)) &
    ~r->timed_out;
  unsigned i;

  for (; candidates != 0; candidates &= candidates - 1) {
    i = (unsigned) __builtin_ctz (candidates);
    if (!errno_is_disconnect (ioreq_leg_error (r, i)))
      return (uint16_t) (1u << i);
  }
  return 0;
}

/* A write that no uptodate leg took was taken by syncing legs (took):
 * they may now hold data that no uptodate leg holds, in a range their
 * resync has copied already.  They are failed too, while the range is
 * still hot in the activity log (the caller holds its extents), so
 * their bitmaps get it and their next resync copies it again from an
 * uptodate leg.
 */
static void
fail_lone_takers (struct volume *v, const struct ioreq *r, uint16_t took)
{
  unsigned i;

  for (; took != 0; took &= took - 1) {
    i = (unsigned) __builtin_ctz (took);
    volume_fail_leg (v, &v->legs[i], r->epoch[i],
                     "took a write that no uptodate leg took");
  }
}

/* Judge the answers of a write-like request (what: "write", "flush")
 * sent to `legs`, failing the legs that must fail.  Returns 0 or an
 * errno for the client.
 *
 * A refusal every leg returned alike goes to the client and fails
 * nobody.  Any other error fails the legs that returned it, except
 * when every leg did: then one is kept (keep_one_leg) and the client
 * gets the error.
 *
 * Success counts only legs that took the request, were uptodate when
 * it started, and are still uptodate once the failures of the others
 * have been recorded: if recording a failure failed everywhere (the
 * generation could not be bumped), no leg is left to count and the
 * client is told EIO rather than a write nobody can vouch for.
 */
int
io_judge_write (struct volume *v, struct ioreq *r, uint16_t legs,
                uint16_t uptodate, const char *what, uint16_t *counted)
{
  uint16_t bad = (uint16_t) ((atomic_load (&r->failed) | r->timed_out) & legs);
  int common, first_err = 0;
  uint16_t took;
  unsigned i;

  /* Every leg took it (the common case): nothing to fail. */
  if (bad == 0) {
    *counted = legs & uptodate;
    return io_is_quorum (v, *counted & MB_UPTODATE (membership_load (v)))
      ? 0 : EIO;
  }
  *counted = 0;

  common = common_refusal (r, legs);
  if (common != 0)
    return errno_for_client (common);
  took = legs & ~bad;
  if (took == 0)
    bad &= ~keep_one_leg (v, r, legs, uptodate);
  for (; bad != 0; bad &= bad - 1) {
    int e;
    i = (unsigned) __builtin_ctz (bad);
    e = ioreq_leg_error (r, i);
    if (first_err == 0)
      first_err = e;
    volume_fail_leg (v, &v->legs[i], r->epoch[i], "%s failed: %s", what,
                     strerror (e));
  }
  if (first_err == 0)
    first_err = ioreq_leg_error (r, (unsigned) __builtin_ctz (legs));
  if ((took & uptodate) == 0)
    fail_lone_takers (v, r, took);
  took &= uptodate;
  *counted = took;
  if (io_is_quorum (v, took & MB_UPTODATE (membership_load (v))))
    return 0;
  return errno_for_client (first_err) == ENOSPC ? ENOSPC : EIO;
}

/* Step 8: wait until no membership change is being recorded, then let
 * a success stand only if the legs it counted on (see io_judge_write)
 * still make a quorum.  A change recorded meanwhile keeps them
 * uptodate; one that could not be recorded anywhere failed them all,
 * and the write, which no recorded generation vouches for, is EIO
 * (DESIGN.md section 13).  Returns the errno for the client.
 */
int
io_acknowledge (struct volume *v, int err, uint16_t counted)
{
  volume_wait_changes (v);
  if (err == 0 &&
      !io_is_quorum (v, counted & MB_UPTODATE (membership_load (v))))
    return EIO;
  return err;
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
      return errno_for_client (err);
  }

  ticket = membership_enter_write (v, &m);
  io_mark_absent (v, MB_ABSENT (m), cmd->offset, cmd->count);
  membership_leave_write (v, ticket);
  writing = MB_WRITING (m);
  uptodate = MB_UPTODATE (m);

  *counted = 0;
  if (!io_is_quorum (v, uptodate))
    err = EIO;
  else {
    ioreq_init (&r, v);
    for (w = writing; w != 0; w &= w - 1)
      ioreq_submit (&r, &v->legs[__builtin_ctz (w)], cmd);
    ioreq_wait_fua (&r);
    err = io_judge_write (v, &r, writing, uptodate, "write", counted);
    ioreq_destroy (&r);
  }

  if (v->al)
    al_release (v->al, cmd->offset, cmd->count);
  return err;
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
  return io_acknowledge (v, err, counted);
}

/* A write-like request, cut into pieces.  Returns 0 or -1 with *err. */
static int
write_request (struct volume *v, struct leg_cmd *cmd, int *err)
{
  uint64_t piece = io_max_piece (v);
  uint64_t end = cmd->offset + cmd->count;
  int e;

  atomic_fetch_add_explicit (&v->client_requests, 1, memory_order_relaxed);
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

/* Flush a set of legs; fail those that cannot.  Returns 0 if at least
 * `quorum` uptodate legs flushed, else -1 with *err.
 */
int
io_flush_legs (struct volume *v, uint16_t legs, int *err)
{
  static const struct leg_cmd flush = { .op = OP_FLUSH };
  struct ioreq r;
  uint16_t counted;
  int e;

  ioreq_init (&r, v);
  for (uint16_t l = legs; l != 0; l &= l - 1)
    ioreq_submit (&r, &v->legs[__builtin_ctz (l)], &flush);
  ioreq_wait (&r);
  e = io_judge_write (v, &r, legs, legs & MB_UPTODATE (membership_load (v)),
                      "flush", &counted);
  ioreq_destroy (&r);
  e = io_acknowledge (v, e, counted);
  if (e != 0) {
    *err = e;
    return -1;
  }
  return 0;
}

/* Client flush: every leg that receives writes. */
int
engine_flush (struct volume *v, int *err)
{
  return io_flush_legs (v, MB_WRITING (membership_load (v)), err);
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
  if (!errno_fails_leg (e))
    return errno_for_client (e);
  if (!errno_is_disconnect (e) && (up & ~(1u << li)) == 0)
    return errno_for_client (e);
  volume_fail_leg (v, &v->legs[li], epoch, "read failed: %s", strerror (e));
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
      *err = errno_for_client (last);
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

  atomic_fetch_add_explicit (&v->client_requests, 1, memory_order_relaxed);
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
