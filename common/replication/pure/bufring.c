/* SPDX-License-Identifier: BSD-3-Clause */
/* A byte ring for queued data (see bufring.h for the layout).
 *
 * Invariants: head, tail and used are multiples of BUFRING_ALIGN; the
 * blocks from tail to head (wrapping at size) follow each other with
 * no gap, each header giving its length; used is the sum of their
 * lengths; used == 0 iff there is no block, and then head == tail == 0.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bufring.h"

/* The header in front of each block's data. */
struct bufring_block {
  size_t len;                   /* header and data, aligned */
  bool given_back;
  char pad[BUFRING_ALIGN - sizeof (size_t) - sizeof (bool)];
};

_Static_assert (sizeof (struct bufring_block) == BUFRING_ALIGN,
                "a block header is one alignment unit");

/* Round n up to the alignment. */
static size_t
aligned (size_t n)
{
  return (n + BUFRING_ALIGN - 1) & ~(size_t) (BUFRING_ALIGN - 1);
}

/* The block at offset off. */
static struct bufring_block *
block_at (const struct bufring *r, size_t off)
{
  return (struct bufring_block *) (r->base + off);
}

/* Allocate a ring of about size bytes, its pages faulted in now
 * (MAP_POPULATE): a queue that fills up for the first time under load
 * would otherwise take a page fault every page it writes.
 */
int
bufring_init (struct bufring *r, size_t size)
{
  void *p;

  r->size = aligned (size);
  r->head = r->tail = r->used = 0;
  p = mmap (NULL, r->size, PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    r->base = NULL;
    return -1;
  }
  r->base = p;
  return 0;
}

/* Free the ring.  A destroyed ring is empty and has no room: a take
 * returns NULL.
 */
void
bufring_destroy (struct bufring *r)
{
  if (r->base)
    munmap (r->base, r->size);
  memset (r, 0, sizeof *r);
}

/* Lay down a block of len bytes at the head. */
static void *
put_block (struct bufring *r, size_t len, bool given_back)
{
  struct bufring_block *b = block_at (r, r->head);

  b->len = len;
  b->given_back = given_back;
  r->used += len;
  r->head += len;
  if (r->head == r->size)
    r->head = 0;
  return b + 1;
}

/* Take len bytes. */
void *
bufring_take (struct bufring *r, size_t len)
{
  size_t need = sizeof (struct bufring_block) + aligned (len);

  if (len == 0 || need > r->size - r->used)
    return NULL;
  if (r->head >= r->tail) {
    /* Free space: [head, size) and [0, tail) (all of it if empty). */
    size_t to_end = r->size - r->head;
    if (need <= to_end)
      return put_block (r, need, false);
    if (need > r->tail)
      return NULL;
    put_block (r, to_end, true);        /* filler up to the end */
    assert (r->head == 0);
  }
  /* Free space: [head, tail). */
  if (need > r->tail - r->head)
    return NULL;
  return put_block (r, need, false);
}

/* Give back a block; move the tail past every block given back. */
void
bufring_give_back (struct bufring *r, void *p)
{
  struct bufring_block *b = (struct bufring_block *) p - 1;

  assert (bufring_owns (r, p));
  assert (!b->given_back);
  b->given_back = true;
  while (r->used > 0 && (b = block_at (r, r->tail))->given_back) {
    r->used -= b->len;
    r->tail += b->len;
    if (r->tail == r->size)
      r->tail = 0;
  }
  if (r->used == 0)
    r->head = r->tail = 0;
}

/* Does p point into the ring? */
bool
bufring_owns (const struct bufring *r, const void *p)
{
  const char *c = p;

  return r->base != NULL && c >= r->base && c < r->base + r->size;
}
