/* SPDX-License-Identifier: BSD-3-Clause */
/* Copy a range between legs, sparse-aware.
 *
 * Used by resync, by crash recovery at start and by verify's repair.
 * The caller holds whatever lock keeps client writes out of the range
 * (the chunk lock, invariant 5).  The source's block status decides
 * what is data: an extent with the zero bit becomes write-zeroes that
 * may punch holes; a hole without the zero bit reads as whatever the
 * source returns, so it is copied.
 *
 * A range is copied in pieces no larger than the largest request the
 * legs accept (caps_request_max: a server may refuse a larger one with
 * EINVAL, which would fail the source).  Three round trips per piece,
 * whatever the number of extents:
 *   1. block status of the whole range from the source (repeated only
 *      if the source answers for part of it);
 *   2. the data extents, and only they, read from the source into buf
 *      at their offsets, all reads in flight at once;
 *   3. every extent written to every target, data as writes from buf
 *      and zero extents as write-zeroes, all in flight at once.
 * Every command of a step is waited for before the next step starts
 * and before returning, also when one fails: no reply lands in buf
 * after it has been handed back.  The targets' writes do not overlap
 * (the extents are disjoint), so their order does not matter, and the
 * chunk lock keeps client writes out of the whole range until the last
 * one has answered.  Reading only the data matters for sparse volumes:
 * with 5 % of the chunks holding data, half the 1 MiB runs of a full
 * resync hold some, and reading those whole read 14 times the data.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "ioreq.h"

#define MAX_EXTENTS 64

/* Extents of the range, as reported by the source. */
struct extent_list {
  uint64_t start, end;          /* the range asked about */
  uint64_t next;                /* where the reported extents end */
  size_t nr;
  struct { uint64_t offset, length; bool zero; } e[MAX_EXTENTS];
};

/* Record one reported extent (merging with the previous one if it has
 * the same kind).
 */
static int
add_extent (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  struct extent_list *el = opaque;
  bool zero = (type & ENGINE_EXTENT_ZERO) != 0;

  if (offset != el->next || offset >= el->end)
    return 0;
  if (length > el->end - offset)
    length = el->end - offset;
  if (el->nr > 0 && el->e[el->nr - 1].zero == zero)
    el->e[el->nr - 1].length += length;
  else if (el->nr < MAX_EXTENTS) {
    el->e[el->nr].offset = offset;
    el->e[el->nr].length = length;
    el->e[el->nr].zero = zero;
    el->nr++;
  }
  else {
    el->e[el->nr - 1].length += length;   /* too fragmented: copy it */
    el->e[el->nr - 1].zero = false;
  }
  el->next = offset + length;
  return 0;
}

/* Start a request to one endpoint: on the poller of the leg's shared
 * connections (an asynchronous leg has its own), or the volume's for a
 * private connection.
 */
static void
init_for (struct ioreq *r, struct volume *v, const struct endpoint *ep)
{
  if (ep->conn == NULL)
    ioreq_init_for_leg (r, ep->leg);
  else
    ioreq_init (r, v);
}

/* Run one command on one endpoint.  Returns 0 or an errno. */
static int
run_on (struct volume *v, const struct endpoint *ep,
        const struct leg_cmd *cmd)
{
  struct ioreq r;
  int e;

  init_for (&r, v, ep);
  ioreq_submit_on (&r, ep->leg, ep->conn, cmd);
  ioreq_wait (&r);
  e = ioreq_leg_error (&r, ep->leg->index);
  ioreq_destroy (&r);
  return e;
}

/* Ask the source for the extents of the whole range. */
static int
source_extents (struct volume *v, const struct endpoint *src,
                struct extent_list *el)
{
  while (el->next < el->end) {
    uint64_t before = el->next;
    struct leg_cmd cmd = {
      .op = OP_EXTENTS, .offset = el->next,
      .count = (uint32_t) (el->end - el->next),
      .fn = add_extent, .fn_opaque = el,
    };
    int e = run_on (v, src, &cmd);
    if (e != 0)
      return e;
    if (el->next == before)       /* nothing usable: call it data */
      add_extent (el, before, el->end - before, 0);
  }
  return 0;
}

/* The command that copies extent i of el to a target (buf holds the
 * range from el->start).
 */
static struct leg_cmd
extent_cmd (const struct extent_list *el, size_t i, void *buf)
{
  return (struct leg_cmd) {
    .op = el->e[i].zero ? OP_ZERO : OP_WRITE,
    .buf = (char *) buf + (el->e[i].offset - el->start),
    .count = (uint32_t) el->e[i].length, .offset = el->e[i].offset,
    .flags = el->e[i].zero ? ENGINE_FLAG_MAY_TRIM : 0,
  };
}

/* Read the data extents of el from src into buf, all at once.  Returns
 * 0 or the first error.
 */
static int
read_data (struct volume *v, const struct endpoint *src,
           const struct extent_list *el, struct ioreq *r, void *buf)
{
  size_t i, n = 0;
  int err = 0;

  for (i = 0; i < el->nr; ++i) {
    struct leg_cmd rd = extent_cmd (el, i, buf);
    if (el->e[i].zero)
      continue;
    rd.op = OP_READ;
    init_for (&r[n], v, src);
    ioreq_submit_on (&r[n], src->leg, src->conn, &rd);
    n++;
  }
  for (i = 0; i < n; ++i) {
    int e;
    ioreq_wait (&r[i]);
    e = ioreq_leg_error (&r[i], src->leg->index);
    if (err == 0)
      err = e;
    ioreq_destroy (&r[i]);
  }
  return err;
}

/* Write every extent of el to every target, all at once.  Returns 0,
 * or -1 with the first target that failed in res.
 */
static int
write_targets (struct volume *v, const struct endpoint *dst, size_t nr_dst,
               const struct extent_list *el, struct ioreq *r, void *buf,
               struct copy_result *res)
{
  size_t i, j;
  int ret = 0;

  for (i = 0; i < el->nr; ++i) {
    struct leg_cmd wr = extent_cmd (el, i, buf);
    if (nr_dst == 1)
      init_for (&r[i], v, &dst[0]);
    else
      ioreq_init (&r[i], v);
    for (j = 0; j < nr_dst; ++j)
      ioreq_submit_on (&r[i], dst[j].leg, dst[j].conn, &wr);
  }
  for (i = 0; i < el->nr; ++i) {
    bool ok = true;
    ioreq_wait (&r[i]);
    for (j = 0; j < nr_dst; ++j) {
      int e = ioreq_leg_error (&r[i], dst[j].leg->index);
      ok &= e == 0;
      if (e != 0 && ret == 0) {
        res->failed = (int) j + 1;
        res->err = e;
        ret = -1;
      }
    }
    ioreq_destroy (&r[i]);
    if (ok && el->e[i].zero)
      res->zero += el->e[i].length;
    else if (ok)
      res->data += el->e[i].length;
  }
  return ret;
}

/* Copy a piece of a range, at most the legs' maximum request. */
static int
copy_piece (struct volume *v, const struct endpoint *src,
            const struct endpoint *dst, size_t nr_dst, uint64_t offset,
            uint32_t len, void *buf, struct copy_result *res)
{
  struct extent_list el = { .start = offset, .end = offset + len,
                            .next = offset };
  struct ioreq *r = malloc (MAX_EXTENTS * sizeof *r);
  int e, ret = 0;

  res->failed = -1;
  res->err = 0;
  if (r == NULL) {
    res->failed = 0;
    res->err = ENOMEM;
    return -1;
  }
  e = source_extents (v, src, &el);
  if (e == 0)
    e = read_data (v, src, &el, r, buf);
  if (e != 0) {
    res->failed = 0;
    res->err = e;
    ret = -1;
  }
  else
    ret = write_targets (v, dst, nr_dst, &el, r, buf, res);
  free (r);
  return ret;
}

/* Copy a range (see copy.h), in pieces no leg refuses (see the note
 * at the top).
 */
int
copy_range (struct volume *v, const struct endpoint *src,
            const struct endpoint *dst, size_t nr_dst, uint64_t offset,
            uint32_t len, void *buf, struct copy_result *res)
{
  uint32_t limit = caps_request_max (&v->caps), done = 0;

  res->failed = -1;
  res->err = 0;
  while (done < len) {
    uint32_t n = len - done < limit ? len - done : limit;
    if (copy_piece (v, src, dst, nr_dst, offset + done, n,
                    (char *) buf + done, res) == -1)
      return -1;
    done += n;
  }
  return 0;
}
