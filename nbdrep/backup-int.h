/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep backup: what backup.c (the session), backup-read.c (the
 * reader threads) and backup-send.c (the transfers) share.  The design note, threads
 * and locking included, is at the top of backup.c.
 */

#ifndef NBDREP_BACKUP_INT_H
#define NBDREP_BACKUP_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backupstore.h"
#include "params.h"

/* A block on its way from a reader to the store. */
enum job_kind { JOB_ZERO, JOB_KNOWN, JOB_NEW };
struct job {
  struct backup *b;
  enum job_kind kind;
  uint64_t index;
  uint8_t hash[BS_HASH_LEN];
  void *comp;                   /* JOB_NEW: the compressed block */
  size_t complen;
  char *key;
  struct job *next;             /* in the queue, then in the live list */
};

struct backup {
  struct bs_store *store;
  struct bs_manifest *m;
  const char *source;
  const struct tls_params *tls; /* how to connect to the source */
  uint64_t *todo, nr_todo;      /* blocks to read */
  uint64_t rate;

  pthread_mutex_t lock;         /* protects the fields down to "known" */
  pthread_cond_t cond;
  uint64_t next_todo;
  struct job *queue, *queue_tail;
  size_t queued;
  unsigned readers_running;
  bool failed;
  double rate_next;             /* when the rate allows the next read */
  struct bs_hashset *known;

  /* main thread only */
  struct bs_multi *multi;
  struct job *live;             /* popped, not finished */
  size_t nr_live, max_live;
  uint64_t done_bytes, total_bytes;
  struct bs_counts counts;
};

/* Mark the backup failed and wake everyone. */
extern void backup_set_failed (struct backup *b);
/* Has the backup failed? */
extern bool backup_has_failed (struct backup *b);
/* Free a job. */
extern void job_free (struct job *j);
/* A reader thread (pthread start routine; arg is the struct backup). */
extern void *backup_reader (void *arg);
/* Start the queued jobs there is room for; true once everything is
 * finished (readers done, nothing queued or in flight).
 */
extern bool backup_take_jobs (struct backup *b);

#endif /* NBDREP_BACKUP_INT_H */
