/* SPDX-License-Identifier: BSD-3-Clause */
/* Verify: compare every uptodate leg, run by run, and optionally repair.
 *
 * A background thread walks the volume in runs of VERIFY_RUN bytes at
 * verify-rate.  Each run is read from every leg uptodate while the
 * run's chunk lock is held (looked up under it: a leg a backup holds
 * out still answers reads, test-safety-verify-held.sh), so no client
 * write lands between the reads and none was missed by a leg compared
 * (invariant 5 holds for the repair too).  Runs are compared 4 KiB block
 * by block: the content most legs agree on, if more than half of them
 * do, is the reference and the other legs are the minority; a hole and
 * written zeroes compare equal because both read as zeroes.  Mismatching
 * blocks are merged into ranges (offset, length, legs).
 *
 * With repair, a mismatching block with a reference (a strict majority,
 * or the leg named by repair_from) is rewritten from the reference
 * through the ordinary write path (activity log, absent bitmaps, every
 * leg receiving writes) before the lock is released.  Without a
 * reference (two legs, a tie) the range is reported, not repaired.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "internal.h"
#include "state.h"
#include "ioreq.h"
#include "member.h"
#include "io.h"
#include "verify.h"
#include "cleanup.h"
#include "thread-name.h"

/* -D replicate.verify_pause=MS: a verify waits MS milliseconds before
 * taking the lock of its first run, the window in which a leg may stop
 * being uptodate (a backup holding it out keeps its connections open)
 * and a client write to the run may miss it.  For tests only
 * (test-safety-verify-held.sh).
 */
int replicate_debug_verify_pause = 0;       /* exported by the .syms */

#define VERIFY_RUN (1024 * 1024)
#define VERIFY_BLOCK 4096
#define MAX_REPORTED 1000

enum verify_state { V_RUNNING, V_DONE, V_STOPPED, V_FAILED };

struct mismatch {
  uint64_t offset, length;
  uint16_t legs;
};

struct verify {
  struct volume *v;
  pthread_t thread;
  _Atomic bool stop;
  _Atomic bool finished;
  bool repair;
  int repair_from;
  void *bufs[MAX_LEGS];

  pthread_mutex_t lock;         /* everything below */
  enum verify_state state;
  char error[256];
  uint64_t done, total, mismatched, repaired, start_ns;
  uint64_t pace_rate, pace_start_ns, pace_start_done;   /* verify thread */
  struct mismatch mm[MAX_REPORTED];
  size_t nr_mm;
};

/* Names of the verify states for status. */
static const char *
state_name (enum verify_state s)
{
  switch (s) {
  case V_RUNNING: return "running";
  case V_DONE: return "done";
  case V_STOPPED: return "stopped";
  case V_FAILED: return "failed";
  }
  return "unknown";
}

/* End the verify with a state (and an error message). */
static void
end_with (struct verify *vf, enum verify_state st, const char *why)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&vf->lock);
  vf->state = st;
  if (why)
    snprintf (vf->error, sizeof vf->error, "%s", why);
}

/* Record a mismatching block, merged into the last range if adjacent
 * with the same legs.
 */
static void
record_mismatch (struct verify *vf, uint64_t offset, uint64_t len,
                 uint16_t legs)
{
  struct mismatch *last;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&vf->lock);

  vf->mismatched += len;
  last = vf->nr_mm ? &vf->mm[vf->nr_mm - 1] : NULL;
  if (last && last->legs == legs && last->offset + last->length == offset)
    last->length += len;
  else if (vf->nr_mm < MAX_REPORTED)
    vf->mm[vf->nr_mm++] = (struct mismatch) { offset, len, legs };
}

/* Read [offset, offset+len) from every leg in legs into its buffer.
 * Returns the legs that failed (they are failed after the lock is let
 * go by the caller).
 */
static uint16_t
read_all (struct verify *vf, uint16_t legs, uint64_t offset, uint32_t len,
          unsigned *epochs)
{
  struct volume *v = vf->v;
  struct ioreq r;
  uint16_t failed = 0;
  unsigned i;

  ioreq_init (&r, v);
  for (i = 0; i < v->nr_legs; ++i) {
    struct leg_cmd cmd = {
      .op = OP_READ, .buf = vf->bufs[i], .count = len, .offset = offset,
    };
    if (legs & (1u << i))
      ioreq_submit (&r, &v->legs[i], &cmd);
  }
  ioreq_wait (&r);
  for (i = 0; i < v->nr_legs; ++i) {
    epochs[i] = r.epoch[i];
    if ((legs & (1u << i)) && ioreq_leg_error (&r, i) != 0)
      failed |= 1u << i;
  }
  ioreq_destroy (&r);
  return failed;
}

/* The reference leg for one block: the leg whose content more than half
 * of the legs share, else repair_from (if it took part), else -1.
 * *differ gets the legs that differ from the reference (all legs
 * without a reference).
 */
static int
block_reference (struct verify *vf, uint16_t legs, size_t at,
                 uint16_t *differ)
{
  unsigned i, j, n = (unsigned) __builtin_popcount (legs), best_n = 0;
  int best = -1;

  for (i = 0; i < MAX_LEGS; ++i) {
    unsigned same = 0;
    if (!(legs & (1u << i)))
      continue;
    for (j = 0; j < MAX_LEGS; ++j)
      if ((legs & (1u << j)) &&
          memcmp ((char *) vf->bufs[i] + at, (char *) vf->bufs[j] + at,
                  VERIFY_BLOCK) == 0)
        same++;
    if (same > best_n) {
      best_n = same;
      best = (int) i;
    }
  }
  if (best_n == n) {
    *differ = 0;
    return best;
  }
  if (best_n * 2 <= n)
    best = vf->repair_from >= 0 && (legs & (1u << vf->repair_from))
      ? vf->repair_from : -1;
  *differ = 0;
  for (j = 0; j < MAX_LEGS; ++j)
    if ((legs & (1u << j)) &&
        (best < 0 || memcmp ((char *) vf->bufs[best] + at,
                             (char *) vf->bufs[j] + at, VERIFY_BLOCK) != 0))
      *differ |= 1u << j;
  return best;
}

/* Rewrite one block from the reference leg's buffer through the write
 * path (the run's lock is held).  Returns 0 or an errno.
 */
static int
repair_block (struct verify *vf, int ref, uint64_t offset, size_t at,
              uint32_t len)
{
  struct leg_cmd cmd = {
    .op = OP_WRITE, .buf = (char *) vf->bufs[ref] + at, .count = len,
    .offset = offset,
  };
  uint16_t counted;
  int e = io_write_locked (vf->v, &cmd, &counted);

  if (e == 0) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&vf->lock);
    vf->repaired += len;
  }
  return e;
}

/* Compare (and repair) one run whose buffers are filled. */
static int
compare_run (struct verify *vf, uint16_t legs, uint64_t offset,
             uint32_t len)
{
  size_t at;

  for (at = 0; at < len; at += VERIFY_BLOCK) {
    uint32_t n = len - at < VERIFY_BLOCK ? (uint32_t) (len - at)
                                          : VERIFY_BLOCK;
    uint16_t differ;
    int ref = block_reference (vf, legs, at, &differ);
    if (differ == 0)
      continue;
    record_mismatch (vf, offset + at, n, differ);
    if (vf->repair && ref >= 0 && repair_block (vf, ref, offset + at, at, n))
      return -1;
  }
  return 0;
}

/* Wait until the bytes done so far fit verify-rate, looking at the rate
 * (and at a stop) again every 50 ms.  The pace counts from the last
 * change of rate, so raising it takes effect at once.  Returns false
 * if the verify must stop.
 */
static bool
pace (struct verify *vf, uint64_t done)
{
  for (;;) {
    uint64_t rate = atomic_load (&vf->v->verify_rate), due, now;

    if (atomic_load (&vf->stop) || atomic_load (&vf->v->stopping))
      return false;
    if (rate != vf->pace_rate) {
      vf->pace_rate = rate;
      vf->pace_start_ns = now_ns ();
      vf->pace_start_done = done;
    }
    if (rate == 0)
      return true;
    due = vf->pace_start_ns + (done - vf->pace_start_done) * 1000000000 / rate;
    now = now_ns ();
    if (due <= now)
      return true;
    nanosleep (&(struct timespec) {
                 .tv_nsec = (long) (due - now < 50000000 ? due - now : 50000000)
               }, NULL);
  }
}

/* The legs of legs with a buffer: a leg added since the verify began
 * (nbdrep add, then its resync done) has none yet, and gets one now.
 * One whose buffer cannot be had is left out of the run.  Verify
 * thread only.
 */
static uint16_t
with_buffers (struct verify *vf, uint16_t legs)
{
  unsigned i;

  for (i = 0; i < MAX_LEGS; ++i)
    if ((legs & (1u << i)) && vf->bufs[i] == NULL &&
        posix_memalign (&vf->bufs[i], 4096, VERIFY_RUN) != 0) {
      vf->bufs[i] = NULL;
      legs &= ~(1u << i);
    }
  return legs;
}

/* Verify one run.  Returns -1 to stop (the state is set). */
static int
verify_run (struct verify *vf, uint64_t offset, uint32_t len)
{
  struct volume *v = vf->v;
  uint16_t legs, failed;
  struct range_hold hold;
  unsigned i, epochs[MAX_LEGS];
  int r = 0;

  if (offset == 0)
    debug_pause (replicate_debug_verify_pause, "verify",
                 "before locking its first run", "verify_pause");
  if (rangelock_lock (v->rl, &hold, offset, len) == -1) {
    end_with (vf, V_FAILED, "out of memory");
    return -1;
  }
  /* The legs to compare are those uptodate while the run's lock is
   * held: a leg that stopped being uptodate before may have missed a
   * write to the run, and still answer reads (a backup's held leg keeps
   * its connections), so it must be neither compared nor a reference
   * (invariant 5); one that stops now misses no write to the run, which
   * waits for our lock.
   */
  legs = with_buffers (vf, MB_UPTODATE (membership_load (v)));
  if (__builtin_popcount (legs) < 2) {
    rangelock_unlock (v->rl, &hold);
    end_with (vf, V_FAILED, "fewer than two uptodate legs to compare");
    return -1;
  }
  failed = read_all (vf, legs, offset, len, epochs);
  if (__builtin_popcount (legs & ~failed) >= 2 &&
      compare_run (vf, legs & ~failed, offset, len) == -1) {
    end_with (vf, V_FAILED, "a repair write failed");
    r = -1;
  }
  rangelock_unlock (v->rl, &hold);
  for (i = 0; i < v->nr_legs; ++i)
    if (failed & (1u << i))
      member_fail_leg (v, &v->legs[i], epochs[i],
                       "read during verify failed");
  return r;
}

/* The verify thread. */
static void *
verify_thread (void *arg)
{
  struct verify *vf = arg;
  struct volume *v = vf->v;
  uint32_t run = VERIFY_RUN;
  uint64_t off;

  /* Reads within the legs' maximum block size. */
  if (caps_request_max (&v->caps) < run)
    run = caps_request_max (&v->caps);
  for (off = 0; off < v->size; off += run) {
    uint32_t len = v->size - off < run ? (uint32_t) (v->size - off) : run;
    if (!pace (vf, off)) {
      end_with (vf, V_STOPPED, NULL);
      break;
    }
    if (verify_run (vf, off, len) == -1)
      break;
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&vf->lock);
    vf->done += len;
  }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&vf->lock);
    if (vf->state == V_RUNNING)
      vf->state = V_DONE;
  }
  nbdkit_debug ("verify %s: %" PRIu64 " bytes mismatched, %" PRIu64
                " repaired", state_name (vf->state), vf->mismatched,
                vf->repaired);
  atomic_store (&vf->finished, true);
  return NULL;
}

/* Free a finished (joined) verify. */
static void
verify_free (struct verify *vf)
{
  unsigned i;

  for (i = 0; i < MAX_LEGS; ++i)
    free (vf->bufs[i]);
  pthread_mutex_destroy (&vf->lock);
  free (vf);
}

/* Check the arguments of a verify against the volume.  Returns NULL or
 * the reason to refuse.
 */
static const char *
refuse_reason (struct volume *v, bool repair, int repair_from, char *buf,
               size_t len)
{
  uint16_t up = MB_UPTODATE (membership_load (v));

  if (v->verify && !atomic_load (&v->verify->finished))
    return "a verify is already running";
  if (__builtin_popcount (up) < 2)
    return "fewer than two uptodate legs: nothing to compare";
  if (repair_from >= 0 && (repair_from >= (int) v->nr_legs ||
                           !(up & (1u << repair_from)))) {
    snprintf (buf, len, "repair-from=%d: not an uptodate leg", repair_from);
    return buf;
  }
  if (repair && repair_from < 0 && __builtin_popcount (up) == 2)
    return "with two legs there is no majority to repair from: "
      "name the leg to repair from";
  return NULL;
}

/* Start a verify (see verify.h). */
int
verify_start (struct volume *v, bool repair, int repair_from, int64_t rate,
              char *err, size_t errlen)
{
  struct verify *vf;
  const char *why = refuse_reason (v, repair, repair_from, err, errlen);
  unsigned i;

  if (why) {
    if (why != err)
      snprintf (err, errlen, "%s", why);
    return -1;
  }
  vf = calloc (1, sizeof *vf);
  if (vf == NULL) {
    snprintf (err, errlen, "out of memory");
    return -1;
  }
  if (rate >= 0)
    atomic_store (&v->verify_rate, (uint64_t) rate);
  vf->v = v;
  vf->pace_rate = UINT64_MAX;
  vf->repair = repair || repair_from >= 0;
  vf->repair_from = repair_from;
  vf->total = v->size;
  vf->start_ns = now_ns ();
  pthread_mutex_init (&vf->lock, NULL);
  for (i = 0; i < v->nr_legs; ++i)
    if (posix_memalign (&vf->bufs[i], 4096, VERIFY_RUN) != 0) {
      verify_free (vf);
      snprintf (err, errlen, "out of memory");
      return -1;
    }
  if (v->verify) {
    pthread_join (v->verify->thread, NULL);
    verify_free (v->verify);
  }
  v->verify = vf;
  if (pthread_create (&vf->thread, NULL, verify_thread, vf) != 0) {
    v->verify = NULL;
    verify_free (vf);
    snprintf (err, errlen, "cannot create the verify thread");
    return -1;
  }
  thread_name (vf->thread, "rep-verify");
  return 0;
}

/* Ask a running verify to stop. */
int
verify_stop (struct volume *v, char *err, size_t errlen)
{
  if (v->verify == NULL || atomic_load (&v->verify->finished)) {
    snprintf (err, errlen, "no verify is running");
    return -1;
  }
  atomic_store (&v->verify->stop, true);
  return 0;
}

/* Stop and free the verify at engine stop. */
void
verify_shutdown (struct volume *v)
{
  if (v->verify == NULL)
    return;
  atomic_store (&v->verify->stop, true);
  pthread_join (v->verify->thread, NULL);
  verify_free (v->verify);
  v->verify = NULL;
}

/* The legs of a mask as a JSON array. */
static json_t *
legs_json (uint16_t legs)
{
  json_t *a = json_array ();
  unsigned i;

  for (i = 0; i < MAX_LEGS; ++i)
    if (legs & (1u << i))
      json_array_append_new (a, json_integer (i));
  return a;
}

/* The "verify" object of status, or null. */
json_t *
verify_json (struct volume *v)
{
  struct verify *vf = v->verify;
  json_t *mm, *j;
  double secs, rate;
  size_t i;

  if (vf == NULL)
    return json_null ();
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&vf->lock);
  secs = (double) (now_ns () - vf->start_ns) / 1e9;
  rate = secs >= 1 ? (double) vf->done / secs : 0;   /* not before a second */
  mm = json_array ();
  for (i = 0; i < vf->nr_mm; ++i)
    json_array_append_new (mm, json_pack ("{s:I, s:I, s:o}",
                                          "offset", (json_int_t) vf->mm[i].offset,
                                          "length", (json_int_t) vf->mm[i].length,
                                          "legs", legs_json (vf->mm[i].legs)));
  j = json_pack ("{s:s, s:b, s:I, s:I, s:f, s:f, s:I, s:I, s:o}",
                 "state", state_name (vf->state),
                 "repair", vf->repair,
                 "done", (json_int_t) vf->done,
                 "total", (json_int_t) vf->total,
                 "rate", rate,
                 "eta", rate > 0 && vf->state == V_RUNNING
                          ? (double) (vf->total - vf->done) / rate : -1.0,
                 "mismatched_bytes", (json_int_t) vf->mismatched,
                 "repaired_bytes", (json_int_t) vf->repaired,
                 "mismatches", mm);
  json_object_set_new (j, "error", vf->error[0] ? json_string (vf->error)
                                                : json_null ());
  return j;
}
