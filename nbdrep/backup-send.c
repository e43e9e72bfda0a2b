/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep backup: the main thread's transfers of the jobs the readers
 * hand over.
 *
 * A job popped from the queue goes on the live list.  A zero block is
 * recorded in the manifest and done; a known block (its hash in the
 * shared set) is recorded and done; a new block is recorded, then a
 * HEAD asks the store whether it has it already (another volume's
 * backup, an interrupted run) and, if not, a PUT sends it.  At most
 * max_live jobs are in flight; popping one wakes a reader waiting on a
 * full queue.  Main thread only, but for the queue under b->lock.
 */

#include <config.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "backupstore.h"
#include "nbdrep.h"
#include "backup-int.h"

/* Take a job out of the live list and free it, counting its bytes. */
static void
job_done (struct job *j)
{
  struct backup *b = j->b;
  struct job **pp;

  for (pp = &b->live; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
  b->nr_live--;
  b->done_bytes += bs_manifest_block_len (b->m, j->index);
  job_free (j);
}

/* A PUT of a block finished. */
static void
put_done (void *opaque, enum bs_result r, struct bs_buf *body UNUSED)
{
  struct job *j = opaque;

  if (r != BS_OK) {
    backup_set_failed (j->b);
    return;
  }
  j->b->counts.uploaded_blocks++;
  j->b->counts.uploaded_bytes += j->complen;
  job_done (j);
}

/* A HEAD of a block finished: stored already, or to be sent. */
static void
head_done (void *opaque, enum bs_result r, struct bs_buf *body UNUSED)
{
  struct job *j = opaque;

  if (r == BS_OK) {
    j->b->counts.existing_blocks++;
    job_done (j);
  }
  else if (r == BS_NOT_FOUND) {
    if (bs_multi_add (j->b->multi, BS_METHOD_PUT, j->key, j->comp,
                      j->complen, put_done, j) == -1)
      backup_set_failed (j->b);
  }
  else
    backup_set_failed (j->b);
}

/* Deal with a job a reader handed over. */
static void
start_job (struct backup *b, struct job *j)
{
  j->next = b->live;
  b->live = j;
  b->nr_live++;
  b->counts.read_blocks++;
  if (j->kind == JOB_ZERO) {
    b->m->zero[j->index] = true;
    job_done (j);
    return;
  }
  b->m->zero[j->index] = false;
  memcpy (b->m->hashes[j->index], j->hash, BS_HASH_LEN);
  if (j->kind == JOB_KNOWN) {
    b->counts.existing_blocks++;
    job_done (j);
  }
  else if (bs_multi_add (b->multi, BS_METHOD_HEAD, j->key, NULL, 0,
                         head_done, j) == -1)
    backup_set_failed (b);
}

/* Pop the queued jobs while there is room in flight; returns whether
 * everything is finished (readers done, nothing queued or in flight).
 */
bool
backup_take_jobs (struct backup *b)
{
  struct job *j;
  bool readers_done;

  for (;;) {
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
      readers_done = b->readers_running == 0;
      j = NULL;
      if (b->nr_live < b->max_live && b->queue) {
        j = b->queue;
        b->queue = j->next;
        if (b->queue == NULL)
          b->queue_tail = NULL;
        b->queued--;
        pthread_cond_broadcast (&b->cond);
      }
    }
    if (j == NULL)
      break;
    start_job (b, j);
  }
  return readers_done && b->queue == NULL && b->nr_live == 0;
}
