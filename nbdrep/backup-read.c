/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep backup: the reader threads, and the state both sides share.
 *
 * A reader takes the next block to read (b->todo), reads it through a
 * libnbd connection of its own, within the rate cap; an all-zero block
 * becomes a JOB_ZERO, a block whose hash is known (the shared hash set)
 * a JOB_KNOWN, any other is compressed into a JOB_NEW with its store
 * key; the job goes on the bounded queue to the main thread
 * (backup.c), the reader waiting while the queue is full.  Locking as
 * described in backup.c: b->lock is never held across I/O, and
 * bs_multi_wakeup is called after it is dropped.
 */

#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include <libnbd.h>

#include "cleanup.h"
#include "backupstore.h"
#include "tls.h"
#include "nbdrep.h"
#include "backup-int.h"

#define MAX_READ (32 * 1024 * 1024)  /* a read when the source says none */

/* Mark the backup failed and wake everyone. */
void
backup_set_failed (struct backup *b)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
    b->failed = true;
    pthread_cond_broadcast (&b->cond);
  }
  bs_multi_wakeup (b->multi);
}

/* Has the backup failed? */
bool
backup_has_failed (struct backup *b)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
  return b->failed;
}

/* Free a job. */
void
job_free (struct job *j)
{
  free (j->comp);
  free (j->key);
  free (j);
}

/* Wait until the rate cap allows reading len more bytes. */
static void
rate_wait (struct backup *b, uint32_t len)
{
  double start, wait;

  if (b->rate == 0)
    return;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
    double now = bs_now ();
    start = b->rate_next > now ? b->rate_next : now;
    b->rate_next = start + (double) len / (double) b->rate;
  }
  wait = start - bs_now ();
  if (wait > 0)
    sleep_seconds (wait);
}

/* The next block to read, or false when none is left or the backup
 * failed.
 */
static bool
next_block (struct backup *b, uint64_t *i)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
  if (b->failed || b->next_todo == b->nr_todo)
    return false;
  *i = b->todo[b->next_todo++];
  return true;
}

/* Hand a job to the main thread (waits while the queue is full). */
static void
push_job (struct backup *b, struct job *j)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
    while (b->queued >= b->max_live && !b->failed)
      pthread_cond_wait (&b->cond, &b->lock);
    if (b->failed) {
      job_free (j);
      return;
    }
    j->next = NULL;
    if (b->queue_tail)
      b->queue_tail->next = j;
    else
      b->queue = j;
    b->queue_tail = j;
    b->queued++;
  }
  bs_multi_wakeup (b->multi);
}

/* Classify a block just read into its job (hash, compress). */
static int
make_job (struct backup *b, struct job *j, const char *buf, uint32_t len)
{
  int added;

  if (bs_is_zero (buf, len)) {
    j->kind = JOB_ZERO;
    return 0;
  }
  if (bs_hash (buf, len, j->hash) == -1)
    return -1;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
    added = bs_hashset_add (b->known, j->hash);
  }
  if (added == -1) {
    nbdrep_error ("out of memory");
    return -1;
  }
  j->kind = added ? JOB_NEW : JOB_KNOWN;
  if (j->kind == JOB_NEW &&
      (bs_compress (buf, len, &j->comp, &j->complen) == -1 ||
       (j->key = bs_key_block (b->m->volume, j->hash)) == NULL))
    return -1;
  return 0;
}

/* The largest read the source takes (a block may be larger). */
static uint32_t
max_read (struct nbd_handle *h)
{
  int64_t max = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);

  return max > 0 && max < MAX_READ ? (uint32_t) max : MAX_READ;
}

/* Read len bytes at offset in pieces of at most piece bytes. */
static int
read_range (struct nbd_handle *h, char *buf, uint32_t len, uint64_t offset,
            uint32_t piece)
{
  while (len > 0) {
    uint32_t n = len < piece ? len : piece;
    if (nbd_pread (h, buf, n, offset, 0) == -1)
      return -1;
    buf += n;
    offset += n;
    len -= n;
  }
  return 0;
}

/* Read, hash and hand over blocks until none is left or the backup
 * failed.  -1 (message printed) on an error.
 */
static int
read_blocks (struct backup *b, struct nbd_handle *h, char *buf)
{
  uint32_t piece = max_read (h);
  uint64_t i;

  while (next_block (b, &i)) {
    uint32_t len = bs_manifest_block_len (b->m, i);
    uint64_t offset = i * b->m->block_size;
    struct job *j;

    rate_wait (b, len);
    if (read_range (h, buf, len, offset, piece) == -1) {
      nbdrep_error ("reading the volume at %s, offset %" PRIu64 ": %s",
                    b->source, offset, nbd_get_error ());
      return -1;
    }
    if ((j = calloc (1, sizeof *j)) == NULL) {
      nbdrep_error ("out of memory");
      return -1;
    }
    j->b = b;
    j->index = i;
    if (make_job (b, j, buf, len) == -1) {
      job_free (j);
      return -1;
    }
    push_job (b, j);
  }
  return 0;
}

/* A reader thread: blocks through a connection of its own. */
void *
backup_reader (void *arg)
{
  struct backup *b = arg;
  struct nbd_handle *h = nbd_create ();
  char *buf = malloc (b->m->block_size);
  const char *why = NULL;
  char err[256];

  if (h == NULL || buf == NULL) {
    nbdrep_error ("out of memory");
    backup_set_failed (b);
  }
  else if (tls_setup_handle (h, b->tls, b->source, err, sizeof err) == -1)
    why = err;
  else if (nbd_connect_uri (h, b->source) == -1)
    why = nbd_get_error ();
  else {
    if (read_blocks (b, h, buf) == -1)
      backup_set_failed (b);
    nbd_shutdown (h, 0);
  }
  if (why) {
    nbdrep_error ("cannot read the volume at %s: %s", b->source, why);
    backup_set_failed (b);
  }
  nbd_close (h);
  free (buf);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
    b->readers_running--;
  }
  bs_multi_wakeup (b->multi);
  return NULL;
}
