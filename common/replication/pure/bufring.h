/* SPDX-License-Identifier: BSD-3-Clause */
/* A byte ring for the data of an asynchronous leg's queue: blocks are
 * taken at the head and given back in any order; the space of a block
 * given back is reused once every block before it has been given back
 * too (the queue gives data back almost always in the order it took
 * it).  Unlike malloc and free of each write's copy, the ring's pages
 * are faulted in once and stay, and taking and giving back are a few
 * additions.  Not thread-safe: the caller locks.
 *
 * Layout: blocks of BUFRING_ALIGN-aligned lengths, each starting with
 * a small header (its length, whether it was given back).  A block
 * that does not fit before the end of the ring leaves a filler block
 * (given back already) there and starts at the beginning.  `used`
 * counts every byte from the oldest block not given back (tail) to
 * the head, fillers and given-back blocks after the tail included, so
 * it tells a full ring (head == tail, used == size) from an empty one.
 */

#ifndef REPLICATE_BUFRING_H
#define REPLICATE_BUFRING_H

#include <stdbool.h>
#include <stddef.h>

#define BUFRING_ALIGN 64        /* a cache line: copies start aligned */

struct bufring {
  char *base;
  size_t size;                  /* a multiple of BUFRING_ALIGN */
  size_t head;                  /* where the next block goes */
  size_t tail;                  /* the oldest block not given back */
  size_t used;                  /* bytes from tail to head */
};

/* Allocate a ring of about size bytes, its memory touched now.  Returns
 * 0 or -1 (errno set).
 */
extern int bufring_init (struct bufring *r, size_t size);
/* Free the ring (its blocks with it). */
extern void bufring_destroy (struct bufring *r);
/* Take len bytes, BUFRING_ALIGN-aligned; NULL if there is no room. */
extern void *bufring_take (struct bufring *r, size_t len);
/* Give back a block returned by bufring_take. */
extern void bufring_give_back (struct bufring *r, void *p);
/* Does p point into the ring (else it came from somewhere else)? */
extern bool bufring_owns (const struct bufring *r, const void *p);

#endif /* REPLICATE_BUFRING_H */
