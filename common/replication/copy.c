/* SPDX-License-Identifier: BSD-3-Clause */
/* Copy a range between legs, sparse-aware.
 *
 * Used by resync, by crash recovery at start and by verify's repair.
 * The caller holds whatever lock keeps client writes out of the range
 * (the chunk lock, invariant 5).  The source's block status decides
 * what is data: an extent with the zero bit becomes write-zeroes that
 * may punch holes; a hole without the zero bit reads as whatever the
 * source returns, so it is copied.  A range with any data is read once
 * whole and its data extents written from that buffer.
 */

#include <config.h>

#include <errno.h>
#include <string.h>

#include "copy.h"

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

/* Run one command on one endpoint.  Returns 0 or an errno. */
static int
run_on (struct volume *v, const struct endpoint *ep,
        const struct leg_cmd *cmd)
{
  struct ioreq r;
  int e;

  ioreq_init (&r, v);
  ioreq_submit_on (&r, ep->leg, ep->conn, cmd);
  ioreq_wait_fua (&r);
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

/* Send cmd to every target; stop at the first that fails. */
static int
to_targets (struct volume *v, const struct endpoint *dst, size_t nr_dst,
            const struct leg_cmd *cmd, struct copy_result *res)
{
  struct ioreq r;
  size_t i;
  int ret = 0;

  ioreq_init (&r, v);
  for (i = 0; i < nr_dst; ++i)
    ioreq_submit_on (&r, dst[i].leg, dst[i].conn, cmd);
  ioreq_wait_fua (&r);
  for (i = 0; i < nr_dst && ret == 0; ++i) {
    int e = ioreq_leg_error (&r, dst[i].leg->index);
    if (e != 0) {
      res->failed = (int) i + 1;
      res->err = e;
      ret = -1;
    }
  }
  ioreq_destroy (&r);
  return ret;
}

/* Copy a range (see copy.h). */
int
copy_range (struct volume *v, const struct endpoint *src,
            const struct endpoint *dst, size_t nr_dst, uint64_t offset,
            uint32_t len, void *buf, struct copy_result *res)
{
  struct extent_list el = { .start = offset, .end = offset + len,
                            .next = offset };
  bool any_data = false;
  size_t i;
  int e;

  res->failed = -1;
  res->err = 0;
  e = source_extents (v, src, &el);
  for (i = 0; e == 0 && i < el.nr; ++i)
    any_data |= !el.e[i].zero;
  if (e == 0 && any_data) {
    struct leg_cmd rd = {
      .op = OP_READ, .buf = buf, .count = len, .offset = offset,
    };
    e = run_on (v, src, &rd);
  }
  if (e != 0) {
    res->failed = 0;
    res->err = e;
    return -1;
  }
  for (i = 0; i < el.nr; ++i) {
    struct leg_cmd wr = {
      .op = el.e[i].zero ? OP_ZERO : OP_WRITE,
      .buf = (char *) buf + (el.e[i].offset - offset),
      .count = (uint32_t) el.e[i].length, .offset = el.e[i].offset,
      .flags = el.e[i].zero ? ENGINE_FLAG_MAY_TRIM : 0,
    };
    if (to_targets (v, dst, nr_dst, &wr, res) == -1)
      return -1;
    if (el.e[i].zero)
      res->zero += el.e[i].length;
    else
      res->data += el.e[i].length;
  }
  return 0;
}
