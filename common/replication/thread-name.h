/* SPDX-License-Identifier: BSD-3-Clause */
/* The names of the engine's threads, as top -H, ps -L, gdb and
 * /proc/PID/task/TID/comm show them: "rep-" and what the thread does
 * (the kernel keeps 15 characters).  nbdkit's own threads keep the
 * process's name.  bench/cpucost tells the asynchronous legs' threads
 * from the synchronous path's by these names.
 */

#ifndef REPLICATE_THREAD_NAME_H
#define REPLICATE_THREAD_NAME_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* Name thread t; a name that cannot be set is no error. */
static inline void __attribute__ ((__format__ (__printf__, 2, 3)))
thread_name (pthread_t t, const char *fmt, ...)
{
  char name[16];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (name, sizeof name, fmt, ap);
  va_end (ap);
  (void) pthread_setname_np (t, name);
}

#endif /* REPLICATE_THREAD_NAME_H */
