/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous client requests, for a frontend whose threads must not
 * sleep in the engine (the ublk queue threads, ublk.c).  See aio.c.
 */

#ifndef REPLICATE_AIO_H
#define REPLICATE_AIO_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "wire.h"

struct engine_aio;

/* Called once for every request engine_aio_start took, by the thread
 * that completed it: a poller thread, or the caller inside
 * engine_aio_start.  It must not block: if a->unfinished, it hands the
 * request to a thread that may (engine_aio_finish).
 */
typedef void (*engine_aio_done) (struct engine_aio *a);

/* One request.  The caller owns the storage, which must stay put from
 * engine_aio_start until done has been called (and, if unfinished,
 * until engine_aio_finish has returned).
 */
struct engine_aio {
  /* Set by the caller: op (OP_READ, OP_WRITE or OP_ZERO), buf, count,
   * offset, flags (ENGINE_FLAG_FUA, and ENGINE_FLAG_MAY_TRIM for
   * zeroes); the function to call when done.
   */
  struct leg_cmd cmd;
  engine_aio_done done;

  /* Set before done is called. */
  bool unfinished;              /* engine_aio_finish must complete it */
  int err;                      /* otherwise: 0 or the client's errno */

  /* The engine's. */
  struct volume *v;
  struct ioreq r;
  struct range_hold hold;
  uint16_t writing, uptodate;   /* membership seen by a write: the */
  uint16_t async;               /* synchronous and asynchronous legs */
  unsigned leg;                 /* the leg a read went to */
};

/* Start a request without waiting for anything.  Returns true if it is
 * under way (done will be called), false if it cannot be served
 * without waiting (the caller serves it with the synchronous calls of
 * engine.h, which will wait).  Nothing is held when it returns false.
 */
extern bool engine_aio_start (struct volume *v, struct engine_aio *a)
  __attribute__ ((__nonnull__));

/* Complete an unfinished request (a leg failed, timed out or needs a
 * flush for FUA; a membership change is being recorded).  May block.
 * Sets a->err.
 */
extern void engine_aio_finish (struct engine_aio *a)
  __attribute__ ((__nonnull__));

/* Time out the silent legs of a request in flight once they are late;
 * the owner calls it from time to time (now from now_ns).
 */
extern void engine_aio_expire (struct engine_aio *a, uint64_t now)
  __attribute__ ((__nonnull__ (1)));

/* ---- what a frontend with its own event loop needs besides ------------ */

/* The ublk= parameters (id -1: none). */
struct engine_ublk_params {
  int id;
  unsigned queues, depth;
  bool keep;                    /* ublk-keep=true */
};
extern void engine_ublk_params (struct volume *v,
                                struct engine_ublk_params *p)
  __attribute__ ((__nonnull__));

/* From now on the poller's thread (or an adopter) reads the legs'
 * replies, never an issuer: nobody waits for an asynchronous request.
 */
extern void engine_aio_use_thread (struct volume *v)
  __attribute__ ((__nonnull__));

/* Take over the reading of the legs' replies from the poller's thread:
 * returns the descriptor to poll (readable: call engine_aio_drive), or
 * -1.  engine_aio_release gives it back (0, or -1 if no thread could
 * take it).
 */
extern int engine_aio_adopt (struct volume *v) __attribute__ ((__nonnull__));
extern void engine_aio_drive (struct volume *v) __attribute__ ((__nonnull__));
extern int engine_aio_release (struct volume *v)
  __attribute__ ((__nonnull__));

/* A batch: the commands this thread issues between begin and end are
 * held and sent together, one system call per connection.
 */
struct engine_aio_batch {
  struct wire_cork cork;
};
extern void engine_aio_batch_begin (struct engine_aio_batch *b)
  __attribute__ ((__nonnull__));
extern void engine_aio_batch_end (struct engine_aio_batch *b)
  __attribute__ ((__nonnull__));

#endif /* REPLICATE_AIO_H */
