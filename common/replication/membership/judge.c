/* SPDX-License-Identifier: BSD-3-Clause */
/* Judging what the legs answered to a write-like request (write, zero,
 * trim, flush), and when a success may be acknowledged (DESIGN.md
 * section 13).  Used by the data path (io.c, aio.c), the activity log's
 * commits and cooling (al.c) and verify's repairs.
 *
 * The rules:
 *   - a refusal of the request every leg returned alike (EINVAL,
 *     EPERM ...: nothing was touched) goes to the client and fails
 *     nobody (common_refusal);
 *   - any other error fails the legs that returned it, recorded before
 *     judge_write returns; when every leg returned one, all but one
 *     (keep_one_leg), so that the range reads the same on the uptodate
 *     legs again; a write that only syncing legs took fails them too
 *     (fail_lone_takers);
 *   - success needs `quorum` legs that were uptodate when the request
 *     started and still are once the failures are recorded;
 *   - a success is acknowledged only after every membership change
 *     under way is recorded, and only if the legs it counted on still
 *     make a quorum then (judge_acknowledge): a change that could not
 *     be recorded anywhere failed them, and the write is EIO.
 *
 * Cost on the hot path (every leg took it): one load of the membership
 * word and, for quorum > 1, an inline popcount of a 16-bit mask
 * (count16: x86-64's baseline has no POPCNT instruction, and
 * __builtin_popcount would call libgcc).
 */

#include <config.h>

#include <errno.h>
#include <string.h>

#include "internal.h"
#include "state.h"
#include "ioreq.h"
#include "member.h"
#include "judge.h"

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
judge_is_quorum (const struct volume *v, uint16_t legs)
{
  return v->quorum <= 1 ? legs != 0 : count16 (legs) >= v->quorum;
}

/* Do the legs agree on one refusal of the request (see
 * state_errno_is_refusal)?  Then it is returned to the client and nobody
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
    if (!state_errno_is_refusal (e) || (common && e != common))
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
    if (!state_errno_is_disconnect (ioreq_leg_error (r, i)))
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
    member_fail_leg (v, &v->legs[i], r->epoch[i],
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
judge_write (struct volume *v, struct ioreq *r, uint16_t legs,
                uint16_t uptodate, const char *what, uint16_t *counted)
{
  uint16_t bad = (uint16_t) ((atomic_load (&r->failed) | r->timed_out) & legs);
  int common, first_err = 0;
  uint16_t took;
  unsigned i;

  /* Every leg took it (the common case): nothing to fail. */
  if (bad == 0) {
    *counted = legs & uptodate;
    return judge_is_quorum (v, *counted & MB_UPTODATE (membership_load (v)))
      ? 0 : EIO;
  }
  *counted = 0;

  common = common_refusal (r, legs);
  if (common != 0)
    return state_errno_for_client (common);
  took = legs & ~bad;
  if (took == 0)
    bad &= ~keep_one_leg (v, r, legs, uptodate);
  for (; bad != 0; bad &= bad - 1) {
    int e;
    i = (unsigned) __builtin_ctz (bad);
    e = ioreq_leg_error (r, i);
    if (first_err == 0)
      first_err = e;
    member_fail_leg (v, &v->legs[i], r->epoch[i], "%s failed: %s", what,
                     strerror (e));
  }
  if (first_err == 0)
    first_err = ioreq_leg_error (r, (unsigned) __builtin_ctz (legs));
  if ((took & uptodate) == 0)
    fail_lone_takers (v, r, took);
  took &= uptodate;
  *counted = took;
  if (judge_is_quorum (v, took & MB_UPTODATE (membership_load (v))))
    return 0;
  return state_errno_for_client (first_err) == ENOSPC ? ENOSPC : EIO;
}

/* Step 8: wait until no membership change is being recorded, then let
 * a success stand only if the legs it counted on (see judge_write)
 * still make a quorum.  A change recorded meanwhile keeps them
 * uptodate; one that could not be recorded anywhere failed them all,
 * and the write, which no recorded generation vouches for, is EIO
 * (DESIGN.md section 13).  Returns the errno for the client.
 */
int
judge_acknowledge (struct volume *v, int err, uint16_t counted)
{
  member_wait_changes (v);
  if (err == 0 &&
      !judge_is_quorum (v, counted & MB_UPTODATE (membership_load (v))))
    return EIO;
  return err;
}

/* Flush a set of legs; fail those that cannot.  Returns 0 if at least
 * `quorum` uptodate legs flushed, else -1 with *err.
 */
int
judge_flush_legs (struct volume *v, uint16_t legs, int *err)
{
  static const struct leg_cmd flush = { .op = OP_FLUSH };
  struct ioreq r;
  uint16_t counted;
  int e;

  ioreq_init (&r, v);
  for (uint16_t l = legs; l != 0; l &= l - 1)
    ioreq_submit (&r, &v->legs[__builtin_ctz (l)], &flush);
  ioreq_wait (&r);
  e = judge_write (v, &r, legs, legs & MB_UPTODATE (membership_load (v)),
                      "flush", &counted);
  ioreq_destroy (&r);
  e = judge_acknowledge (v, e, counted);
  if (e != 0) {
    *err = e;
    return -1;
  }
  return 0;
}
