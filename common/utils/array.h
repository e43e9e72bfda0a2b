/* SPDX-License-Identifier: BSD-3-Clause */
/* Growable arrays: the one growth rule of the tree's vectors (an array
 * of items with a count and a capacity that doubles when full, so that
 * appending costs amortised constant time and steady state does not
 * allocate).
 */

#ifndef REPLICATE_ARRAY_H
#define REPLICATE_ARRAY_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

/* Make room for one more item in items (nr used, *cap allocated, each
 * item elem bytes): when full, the capacity doubles (initial when the
 * array is empty).  Returns the array, moved or not, or NULL with errno
 * set, the old array and *cap left as they were.
 */
static inline void *
array_reserve_one (void *items, size_t nr, size_t *cap, size_t elem,
                   size_t initial)
{
  size_t n;
  void *p;

  if (nr < *cap)
    return items;
  n = *cap ? *cap * 2 : initial;
  p = reallocarray (items, n, elem);
  if (p == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  *cap = n;
  return p;
}

#endif /* REPLICATE_ARRAY_H */
