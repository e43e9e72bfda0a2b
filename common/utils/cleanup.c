/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers behind the CLEANUP_* and ACQUIRE_LOCK_* macros. */

#include <config.h>

#include <stdlib.h>
#include <pthread.h>

#include "cleanup.h"

/* Free the pointer that ptr points to. */
void
cleanup_free (void *ptr)
{
  free (* (void **) ptr);
}

/* Unlock the mutex that mutexp points to; abort if that fails. */
void
cleanup_mutex_unlock (pthread_mutex_t **mutexp)
{
  if (pthread_mutex_unlock (*mutexp) != 0)
    abort ();
}
