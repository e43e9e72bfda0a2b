/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the thread policy by queue depth
 * (common/replication/pure/sched.c).
 *
 * The table drives sched_next: each row is a thread's class, what it
 * is about to wait for (a lone request, or one behind `depth` sleeping
 * issuers) and the class it must move to.  Covered: a lone request
 * always brings a thread back to SCHED_OTHER; a sleeper behind 4 or
 * more moves to SCHED_BATCH; between the two a thread keeps its class
 * (no system call under a steady load); a thread not yet seen stays
 * unseen until it has to move; a foreign thread is never moved.
 *
 * Then sched_adapt runs in real threads and the kernel's view of each
 * is read back: a SCHED_OTHER thread goes to SCHED_BATCH at depth and
 * back for a lone request, keeping its nice value; a thread that
 * started as SCHED_BATCH (as if chrt -b had been used) is left alone
 * even for a lone request.
 */

#include <config.h>

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "thread-sched.h"
#include "unit.h"

struct sched_case {
  const char *name;
  enum thread_sched cur;
  bool lone;
  unsigned depth;
  enum thread_sched expect;
};

static const struct sched_case cases[] = {
  { "unseen, lone", TS_UNSEEN, true, 0, TS_NORMAL },
  { "unseen, shallow", TS_UNSEEN, false, 3, TS_UNSEEN },
  { "unseen, at depth", TS_UNSEEN, false, 4, TS_BATCH },
  { "normal, lone", TS_NORMAL, true, 0, TS_NORMAL },
  { "normal, lone with followers", TS_NORMAL, true, 9, TS_NORMAL },
  { "normal, behind none", TS_NORMAL, false, 0, TS_NORMAL },
  { "normal, behind 3", TS_NORMAL, false, 3, TS_NORMAL },
  { "normal, behind 4", TS_NORMAL, false, 4, TS_BATCH },
  { "normal, behind 63", TS_NORMAL, false, 63, TS_BATCH },
  { "batch, behind 4", TS_BATCH, false, 4, TS_BATCH },
  { "batch, behind 1 keeps batch", TS_BATCH, false, 1, TS_BATCH },
  { "batch, behind none keeps batch", TS_BATCH, false, 0, TS_BATCH },
  { "batch, lone", TS_BATCH, true, 0, TS_NORMAL },
  { "foreign, lone", TS_FOREIGN, true, 0, TS_FOREIGN },
  { "foreign, at depth", TS_FOREIGN, false, 40, TS_FOREIGN },
};

/* Check every row of the table. */
static void
test_table (void)
{
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const struct sched_case *c = &cases[i];

    CHECKF (sched_next (c->cur, c->lone, c->depth) == c->expect, "%s",
            c->name);
  }
}

/* The calling thread's policy as the kernel has it. */
static int
policy_now (void)
{
  struct sched_param sp;
  int policy;

  if (pthread_getschedparam (pthread_self (), &policy, &sp) != 0)
    return -1;
  return policy;
}

/* The calling thread's nice value. */
static int
nice_now (void)
{
  return getpriority (PRIO_PROCESS, (id_t) syscall (SYS_gettid));
}

/* A SCHED_OTHER thread at nice 3: batch at depth, back when lone. */
static void *
run_other (void *arg)
{
  bool *ok = arg;

  *ok = setpriority (PRIO_PROCESS, (id_t) syscall (SYS_gettid), 3) == 0;
  CHECK (policy_now () == SCHED_OTHER);
  sched_adapt (false, 2);
  CHECK (policy_now () == SCHED_OTHER);
  sched_adapt (false, 4);
  CHECK (policy_now () == SCHED_BATCH);
  CHECK (nice_now () == 3);
  sched_adapt (false, 0);
  CHECK (policy_now () == SCHED_BATCH);
  sched_adapt (true, 0);
  CHECK (policy_now () == SCHED_OTHER);
  CHECK (nice_now () == 3);
  return NULL;
}

/* A thread its administrator made SCHED_BATCH: never moved. */
static void *
run_foreign (void *arg)
{
  struct sched_param sp = { .sched_priority = 0 };
  bool *ok = arg;

  *ok = pthread_setschedparam (pthread_self (), SCHED_BATCH, &sp) == 0;
  sched_adapt (true, 0);
  CHECK (policy_now () == SCHED_BATCH);
  sched_adapt (false, 8);
  sched_adapt (true, 0);
  CHECK (policy_now () == SCHED_BATCH);
  return NULL;
}

/* Run fn in a new thread (the class is per thread). */
static void
in_thread (void *(*fn) (void *), const char *what)
{
  pthread_t t;
  bool ok = false;

  CHECK (pthread_create (&t, NULL, fn, &ok) == 0);
  CHECK (pthread_join (t, NULL) == 0);
  CHECKF (ok, "%s: setting up the thread failed", what);
}

int
main (void)
{
  test_table ();
  in_thread (run_other, "SCHED_OTHER at nice 3");
  in_thread (run_foreign, "SCHED_BATCH from the start");
  return unit_exit ("unit-sched");
}
