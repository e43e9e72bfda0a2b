/* SPDX-License-Identifier: BSD-3-Clause */
/* The scheduling policy of the threads that wait for legs (sched=auto).
 *
 * At queue depth the driver (the poller thread, or a leading issuer)
 * reads a burst of replies and wakes their issuers one after the
 * other.  Under SCHED_OTHER each woken issuer usually preempts the
 * driver at once (wake-up preemption): one more context switch per
 * request, and while the driver waits to run again the replies behind
 * it are not read and the commands deferred to it (poller.c) are not
 * sent.  A SCHED_BATCH thread does not preempt when it is woken: it
 * runs when a CPU is free or at the next tick, so the driver finishes
 * its iteration and the woken issuers follow.  That suits a queue,
 * whose requests wait on each other anyway, and not a lone request,
 * which should run the moment its reply is in even on a busy machine.
 *
 * So the policy follows the depth.  An issuer that sleeps behind
 * BATCH_DEPTH or more other sleeping issuers moves its thread to
 * SCHED_BATCH; one that serves a lone request (it leads the poller
 * itself, which happens only when nobody else drives) moves back to
 * SCHED_OTHER.  Between the two a thread keeps what it has, so a
 * steady load makes no system call.  The poller thread follows the
 * same rule at each iteration, with the number of sleeping issuers as
 * its depth (at most one: lone).
 *
 * Only threads that were SCHED_OTHER when first seen are moved: one
 * the administrator gave another policy (chrt -b, -f, -r or -i, on
 * nbdkit or a thread) is left alone.  Moving between SCHED_OTHER and
 * SCHED_BATCH keeps the nice value and needs no privilege.
 * sched=keep turns all of this off.
 *
 * Measured on 2 CPUs, C1 4k random reads at QD32x2 (five interleaved
 * rounds): 48.6k IOPS with every thread SCHED_OTHER, 51.3k with every
 * thread SCHED_BATCH, context switches per request 3.4 against 2.4.
 * With two CPU hogs beside it, SCHED_BATCH throughout cost QD1 writes
 * a quarter of their IOPS, which is why a lone request is served
 * under SCHED_OTHER.  This rule against sched=keep, six rounds: reads
 * 52.7k against 49.7k, writes 66.1k against 63.6k, QD1 unchanged.
 *
 * The state is per thread, so no lock is involved.  It is kept in a
 * pthread key rather than a _Thread_local variable: a dlopen'd
 * module's thread-local storage is allocated on first use and freed
 * by glibc when another thread reuses the dead thread's stack, which
 * thread sanitizers report as a race.
 */

#include <config.h>

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nbdkit-calls.h"
#include "thread-sched.h"

/* A sleeping issuer behind this many others is at depth. */
#define BATCH_DEPTH 4

/* The key of each thread's class (NULL: TS_UNSEEN). */
static pthread_key_t class_key;
static pthread_once_t class_key_once = PTHREAD_ONCE_INIT;

/* Create the class key (once). */
static void
make_class_key (void)
{
  if (pthread_key_create (&class_key, NULL) != 0)
    abort ();
}

/* The calling thread's class. */
static enum thread_sched
self_class (void)
{
  return (enum thread_sched) (uintptr_t) pthread_getspecific (class_key);
}

/* Record the calling thread's class. */
static void
set_self_class (enum thread_sched cls)
{
  pthread_setspecific (class_key, (void *) (uintptr_t) cls);
}

/* The class a thread in class cur should move to, for a lone request
 * or for one behind depth sleeping issuers (pure; unit tested).
 */
enum thread_sched
sched_next (enum thread_sched cur, bool lone, unsigned depth)
{
  if (cur == TS_FOREIGN)
    return cur;
  if (lone)
    return TS_NORMAL;
  if (depth >= BATCH_DEPTH)
    return TS_BATCH;
  return cur;
}

/* The calling thread's class as the kernel has it: TS_NORMAL for
 * SCHED_OTHER, else TS_FOREIGN (never moved).
 */
static enum thread_sched
current_class (void)
{
  struct sched_param sp;
  int policy, err;

  err = pthread_getschedparam (pthread_self (), &policy, &sp);
  if (err != 0) {
    nbdkit_debug ("sched: pthread_getschedparam: %s", strerror (err));
    return TS_FOREIGN;
  }
  return policy == SCHED_OTHER ? TS_NORMAL : TS_FOREIGN;
}

/* Give the calling thread the policy of class to (TS_NORMAL or
 * TS_BATCH).  A thread that may not be moved is never tried again.
 */
static void
move_self (enum thread_sched to)
{
  struct sched_param sp = { .sched_priority = 0 };
  int err;

  err = pthread_setschedparam (pthread_self (),
                               to == TS_BATCH ? SCHED_BATCH : SCHED_OTHER,
                               &sp);
  if (err != 0) {
    nbdkit_debug ("sched: pthread_setschedparam: %s", strerror (err));
    set_self_class (TS_FOREIGN);
    return;
  }
  set_self_class (to);
}

/* Adapt the calling thread's policy to what it is about to wait for:
 * a lone request, or one behind depth sleeping issuers (see the top).
 */
void
sched_adapt (bool lone, unsigned depth)
{
  enum thread_sched self, to;

  pthread_once (&class_key_once, make_class_key);
  self = self_class ();
  to = sched_next (self, lone, depth);
  if (to == self)
    return;
  if (self == TS_UNSEEN) {
    self = current_class ();
    set_self_class (self);
    to = sched_next (self, lone, depth);
    if (to == self)
      return;
  }
  move_self (to);
}
