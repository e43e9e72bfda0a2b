/* SPDX-License-Identifier: BSD-3-Clause */
/* aio-driver: drive the engine's asynchronous entry point (aio.c) as
 * the ublk frontend does, against real replicas, for test-aio.sh.
 *
 *   aio-driver PROGRESS STOPFILE EXPECTED KEY=VALUE...
 *
 * A controller without nbdkit: the engine is configured with the
 * KEY=VALUE parameters (replica=URI, control=SOCKET, timeout=...) and
 * started; then one thread keeps DEPTH requests in flight until
 * STOPFILE exists: reads, writes (some with FUA) and zeroes (some that
 * may trim) of 4 to 64 KiB at random 4 KiB blocks.  As in ublk.c,
 * that thread starts requests (engine_aio_start), the engine's
 * completions are queued back to it, unfinished ones go to a finisher
 * thread (engine_aio_finish), a request the engine will not start is
 * run with the synchronous call by the issuing thread, and every
 * second the deadlines of the requests in flight are checked
 * (engine_aio_expire).  One write in eight is aimed at the blocks of a
 * write in flight, so the range lock's refusals are exercised.
 *
 * Checks: every request succeeds; every read returns what was last
 * written there (a read never overlaps a write in flight; writes may
 * overlap writes: the range lock orders them, and the driver's image
 * follows the order of issue).  At the end, once every leg is uptodate
 * again, the whole volume read back must equal the image, which is
 * written to EXPECTED for the test's oracle (every leg equals it).
 * PROGRESS holds the number of completed requests, rewritten every 64.
 * The last line printed counts the requests: started without waiting,
 * refused (run synchronously) and finished by the finisher.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "aio.h"

#define DEPTH 32
#define BLOCK 4096
#define MAX_BLOCKS 16

/* One request slot. */
struct slot {
  struct engine_aio aio;
  bool busy;
  uint64_t first, nr;           /* blocks */
  char *buf, *want;             /* data; what a read must return */
  struct slot *next;            /* on the done or the tail list */
};

static struct volume *vol;
static struct slot slots[DEPTH];
static uint8_t *image;                  /* what the volume must hold */
static uint64_t nr_blocks;
static unsigned *writes_in_flight, *reads_in_flight;   /* per block */
static uint64_t rng_state = 0x9e3779b97f4a7c15;

/* Completions back to the issuing thread; tails to the finisher. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t tail_cond = PTHREAD_COND_INITIALIZER;
static struct slot *done_list, *tail_list;
static bool finisher_stop;

static uint64_t started, refused, finished, completed;

/* Give up: the test fails. */
static void __attribute__ ((noreturn, format (printf, 1, 2)))
die (const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  fputs ("aio-driver: ", stderr);
  vfprintf (stderr, fs, ap);
  fputc ('\n', stderr);
  va_end (ap);
  exit (EXIT_FAILURE);
}

/* xorshift64: the driver's random numbers. */
static uint64_t
rnd (void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Push a slot on a list and signal its waiter (lock held). */
static void
push (struct slot **list, struct slot *s, pthread_cond_t *cond)
{
  s->next = *list;
  *list = s;
  pthread_cond_signal (cond);
}

/* The engine's completion (engine_aio_done): a poller thread, or the
 * issuing thread inside engine_aio_start.
 */
static void
aio_done (struct engine_aio *a)
{
  struct slot *s = (struct slot *) ((char *) a - offsetof (struct slot, aio));

  pthread_mutex_lock (&lock);
  if (a->unfinished)
    push (&tail_list, s, &tail_cond);
  else
    push (&done_list, s, &done_cond);
  pthread_mutex_unlock (&lock);
}

/* The finisher thread. */
static void *
finisher (void *arg)
{
  pthread_mutex_lock (&lock);
  for (;;) {
    struct slot *s;

    while (tail_list == NULL && !finisher_stop)
      pthread_cond_wait (&tail_cond, &lock);
    if (tail_list == NULL)
      break;
    s = tail_list;
    tail_list = s->next;
    pthread_mutex_unlock (&lock);
    engine_aio_finish (&s->aio);
    pthread_mutex_lock (&lock);
    finished++;
    push (&done_list, s, &done_cond);
  }
  pthread_mutex_unlock (&lock);
  return arg;
}

/* Add d to the in-flight counts of a slot's blocks. */
static void
count_in_flight (const struct slot *s, unsigned *counts, int d)
{
  uint64_t b;

  for (b = s->first; b < s->first + s->nr; ++b)
    counts[b] += d;
}

/* Is any block of [first, first+nr) counted in counts? */
static bool
any_in_flight (const unsigned *counts, uint64_t first, uint64_t nr)
{
  uint64_t b;

  for (b = first; b < first + nr; ++b)
    if (counts[b])
      return true;
  return false;
}

/* Check a finished request and free its slot. */
static void
complete (struct slot *s, int err)
{
  const struct leg_cmd *c = &s->aio.cmd;

  if (err != 0)
    die ("%s of %" PRIu32 " bytes at %" PRIu64 " failed: %s",
         c->op == OP_READ ? "read" : c->op == OP_WRITE ? "write" : "zero",
         c->count, c->offset, strerror (err));
  if (c->op == OP_READ) {
    if (memcmp (s->buf, s->want, c->count) != 0)
      die ("read of %" PRIu32 " bytes at %" PRIu64 " returned other data "
           "than was written", c->count, c->offset);
    count_in_flight (s, reads_in_flight, -1);
  }
  else
    count_in_flight (s, writes_in_flight, -1);
  s->busy = false;
  completed++;
}

/* A random range for a request: 1 block half the time, else up to 16;
 * for a write, one time in eight the range of a write in flight.
 */
static void
choose_range (struct slot *s, bool write)
{
  unsigned i;

  s->nr = rnd () % 2 ? 1 : 1 + rnd () % MAX_BLOCKS;
  if (write && rnd () % 8 == 0)
    for (i = 0; i < DEPTH; ++i)
      if (slots[i].busy && slots[i].aio.cmd.op != OP_READ) {
        s->first = slots[i].first;
        s->nr = slots[i].nr;
        return;
      }
  s->first = rnd () % (nr_blocks - s->nr + 1);
}

/* Prepare a request in s: a read where no write is in flight, or a write
 * or zeroes where no read is.  The image follows at once.
 */
static void
prepare (struct slot *s)
{
  struct leg_cmd *c = &s->aio.cmd;
  unsigned kind = rnd () % 10, tries;
  uint64_t i;

  for (tries = 0; tries < 16; ++tries) {
    choose_range (s, kind >= 3);
    if (!any_in_flight (kind < 3 ? writes_in_flight : reads_in_flight,
                        s->first, s->nr))
      break;
  }
  if (tries == 16)
    kind = 3;                   /* no free range for it: write instead */
  while (kind >= 3 && any_in_flight (reads_in_flight, s->first, s->nr))
    choose_range (s, false);
  *c = (struct leg_cmd) {
    .buf = s->buf, .count = (uint32_t) (s->nr * BLOCK),
    .offset = s->first * BLOCK,
  };
  if (kind < 3) {
    c->op = OP_READ;
    memcpy (s->want, image + c->offset, c->count);
    count_in_flight (s, reads_in_flight, 1);
    return;
  }
  if (rnd () % 8 == 0)
    c->flags |= ENGINE_FLAG_FUA;
  if (kind < 9) {
    c->op = OP_WRITE;
    for (i = 0; i < c->count / 8; ++i)
      ((uint64_t *) s->buf)[i] = rnd ();
    memcpy (image + c->offset, s->buf, c->count);
  }
  else {
    c->op = OP_ZERO;
    c->buf = NULL;
    if (rnd () % 2)
      c->flags |= ENGINE_FLAG_MAY_TRIM;
    memset (image + c->offset, 0, c->count);
  }
  count_in_flight (s, writes_in_flight, 1);
}

/* Run a request the engine would not start with the synchronous call. */
static int
run_sync (const struct leg_cmd *c)
{
  int err = 0, r;

  switch (c->op) {
  case OP_READ:
    r = engine_pread (vol, c->buf, c->count, c->offset, &err);
    break;
  case OP_WRITE:
    r = engine_pwrite (vol, c->buf, c->count, c->offset, c->flags, &err);
    break;
  default:
    r = engine_zero (vol, c->count, c->offset, c->flags, &err);
    break;
  }
  return r == -1 ? err : 0;
}

/* Issue a request in a free slot. */
static void
issue (struct slot *s)
{
  prepare (s);
  s->aio.done = aio_done;
  s->busy = true;
  if (engine_aio_start (vol, &s->aio)) {
    started++;
    return;
  }
  refused++;
  complete (s, run_sync (&s->aio.cmd));
}

/* Wait up to a second for completions and check them; every second,
 * apply the deadlines of the requests in flight.
 */
static void
reap (void)
{
  static uint64_t last_expire;
  struct timespec ts;
  struct slot *list, *next;
  uint64_t now;
  unsigned i;

  clock_gettime (CLOCK_REALTIME, &ts);
  ts.tv_sec++;
  pthread_mutex_lock (&lock);
  while (done_list == NULL &&
         pthread_cond_timedwait (&done_cond, &lock, &ts) != ETIMEDOUT)
    ;
  list = done_list;
  done_list = NULL;
  pthread_mutex_unlock (&lock);
  now = now_ns ();
  if (now - last_expire >= 1000000000) {
    for (i = 0; i < DEPTH; ++i)
      if (slots[i].busy)
        engine_aio_expire (&slots[i].aio, now);
    last_expire = now;
  }
  for (; list != NULL; list = next) {
    next = list->next;
    complete (list, list->aio.err);
  }
}

/* Write the number of completed requests to the progress file. */
static void
report_progress (const char *path)
{
  char tmp[4096];
  FILE *fp;

  snprintf (tmp, sizeof tmp, "%s.tmp", path);
  fp = fopen (tmp, "w");
  if (fp == NULL || fprintf (fp, "%" PRIu64 "\n", completed) < 0 ||
      fclose (fp) == EOF || rename (tmp, path) == -1)
    die ("%s: %m", path);
}

/* Any request in flight? */
static bool
busy (void)
{
  unsigned i;

  for (i = 0; i < DEPTH; ++i)
    if (slots[i].busy)
      return true;
  return false;
}

/* Keep DEPTH requests in flight until stopfile exists, then drain. */
static void
run (const char *progress, const char *stopfile)
{
  uint64_t reported = 0;
  bool stopping = false;
  unsigned i;

  while (!stopping || busy ()) {
    for (i = 0; i < DEPTH && !stopping; ++i)
      if (!slots[i].busy)
        issue (&slots[i]);
    reap ();
    if (completed - reported >= 64) {
      report_progress (progress);
      reported = completed;
    }
    stopping = stopping || access (stopfile, F_OK) == 0;
  }
  report_progress (progress);
}

/* Wait until every leg is uptodate again (resyncs done). */
static void
wait_healthy (void)
{
  uint16_t all = (uint16_t) ((1u << vol->nr_legs) - 1);
  unsigned tenths;

  for (tenths = 0; tenths < 1200; ++tenths) {
    if ((MB_UPTODATE (membership_load (vol)) & all) == all)
      return;
    nanosleep (&(struct timespec) { .tv_nsec = 100000000 }, NULL);
  }
  die ("the legs are not all uptodate after 120 s");
}

/* Read the whole volume back, compare it with the image, save the image. */
static void
verify_and_save (const char *expected, uint64_t size)
{
  const uint32_t piece = 1024 * 1024;
  char *buf = malloc (piece);
  uint64_t off;
  int fd, err = 0;

  if (buf == NULL)
    die ("malloc: %m");
  for (off = 0; off < size; off += piece) {
    uint32_t n = size - off < piece ? (uint32_t) (size - off) : piece;
    if (engine_pread (vol, buf, n, off, &err) == -1)
      die ("reading back at %" PRIu64 ": %s", off, strerror (err));
    if (memcmp (buf, image + off, n) != 0)
      die ("the volume differs from what was written in [%" PRIu64
           ", %" PRIu64 ")", off, off + n);
  }
  free (buf);
  fd = open (expected, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd == -1 || write (fd, image, size) != (ssize_t) size || close (fd))
    die ("%s: %m", expected);
}

/* Configure and start the engine from KEY=VALUE arguments. */
static void
start_engine (int argc, char **argv)
{
  int i;

  vol = engine_new (SHAPE_PLUGIN);
  if (vol == NULL)
    die ("engine_new failed");
  for (i = 0; i < argc; ++i) {
    char *eq = strchr (argv[i], '=');
    if (eq == NULL)
      die ("%s: expected KEY=VALUE", argv[i]);
    *eq = '\0';
    if (engine_config (vol, argv[i], eq + 1) != 0)
      die ("bad parameter %s", argv[i]);
  }
  if (engine_config_complete (vol) == -1 || engine_start (vol) == -1 ||
      engine_after_fork (vol) == -1)
    die ("the engine did not start");
}

/* Allocate the image, the counts and the slots' buffers. */
static void
allocate (uint64_t size)
{
  unsigned i;

  nr_blocks = size / BLOCK;
  image = calloc (size, 1);
  writes_in_flight = calloc (nr_blocks, sizeof *writes_in_flight);
  reads_in_flight = calloc (nr_blocks, sizeof *reads_in_flight);
  if (image == NULL || writes_in_flight == NULL || reads_in_flight == NULL)
    die ("calloc: %m");
  for (i = 0; i < DEPTH; ++i) {
    slots[i].buf = malloc (MAX_BLOCKS * BLOCK);
    slots[i].want = malloc (MAX_BLOCKS * BLOCK);
    if (slots[i].buf == NULL || slots[i].want == NULL)
      die ("malloc: %m");
  }
}

/* Free what allocate took. */
static void
release (void)
{
  unsigned i;

  for (i = 0; i < DEPTH; ++i) {
    free (slots[i].buf);
    free (slots[i].want);
  }
  free (image);
  free (writes_in_flight);
  free (reads_in_flight);
}

int
main (int argc, char *argv[])
{
  pthread_t fin;
  int64_t size;
  int r;

  if (argc < 5)
    die ("usage: aio-driver PROGRESS STOPFILE EXPECTED KEY=VALUE...");
  signal (SIGPIPE, SIG_IGN);
  start_engine (argc - 4, argv + 4);
  size = engine_get_size (vol);
  if (size < (int64_t) (MAX_BLOCKS * BLOCK))
    die ("the volume is too small: %" PRIi64 " bytes", size);
  size -= size % BLOCK;
  allocate ((uint64_t) size);
  r = pthread_create (&fin, NULL, finisher, NULL);
  if (r != 0)
    die ("pthread_create: %s", strerror (r));

  /* Start from a known image: zero the whole volume. */
  {
    int err = 0;
    if (engine_zero (vol, (uint32_t) size, 0, 0, &err) == -1)
      die ("zeroing the volume: %s", strerror (err));
  }
  run (argv[1], argv[2]);

  pthread_mutex_lock (&lock);
  finisher_stop = true;
  pthread_cond_signal (&tail_cond);
  pthread_mutex_unlock (&lock);
  pthread_join (fin, NULL);
  wait_healthy ();
  verify_and_save (argv[3], (uint64_t) size);
  engine_stop (vol);
  engine_free (vol);
  release ();
  printf ("aio-driver: %" PRIu64 " requests: started %" PRIu64
          " refused %" PRIu64 " finished %" PRIu64 "\n",
          completed, started, refused, finished);
  return EXIT_SUCCESS;
}
