/* SPDX-License-Identifier: BSD-3-Clause */
/* Scope-based cleanup: free on scope exit, hold a mutex for a scope.
 *
 * Built on __attribute__((cleanup)), which configure insists on.  A
 * lock taken with ACQUIRE_LOCK_FOR_CURRENT_SCOPE is released however
 * the scope is left; bound it with a bare { } block to keep it short.
 */

#ifndef REPLICATE_CLEANUP_H
#define REPLICATE_CLEANUP_H

#include <pthread.h>
#include <stdlib.h>

/* Mark a parameter or variable as intentionally unused. */
#define UNUSED __attribute__ ((__unused__))

/* Free *ptr (a pointer to a heap pointer) on scope exit. */
void cleanup_free (void *ptr);
#define CLEANUP_FREE __attribute__ ((cleanup (cleanup_free)))

/* Unlock *mutexp on scope exit. */
void cleanup_mutex_unlock (pthread_mutex_t **mutexp);

#define CLEANUP_CONCAT_(a, b) a##b
#define CLEANUP_CONCAT(a, b) CLEANUP_CONCAT_ (a, b)
#define CLEANUP_UNIQUE(name) CLEANUP_CONCAT (name, __COUNTER__)

#define ACQUIRE_LOCK_FOR_CURRENT_SCOPE_(name, mutex)                    \
  __attribute__ ((cleanup (cleanup_mutex_unlock)))                      \
  pthread_mutex_t *name = (mutex);                                      \
  do {                                                                  \
    int r_ = pthread_mutex_lock (name);                                 \
    if (r_ != 0) abort ();                                              \
  } while (0)
#define ACQUIRE_LOCK_FOR_CURRENT_SCOPE(mutex) \
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE_ (CLEANUP_UNIQUE (scope_lock_), mutex)

#endif /* REPLICATE_CLEANUP_H */
