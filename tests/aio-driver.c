/* SPDX-License-Identifier: BSD-3-Clause */
/* aio-driver: drive the engine's asynchronous entry point (aio.c) as
 * the ublk frontend does, against real replicas, for test-aio.sh.
 *
 *   aio-driver PROGRESS STOPFILE EXPECTED KEY=VALUE...
 *
 * A controller without nbdkit: the engine is configured with the
 * KEY=VALUE parameters (replica=URI, control=SOCKET, timeout=...) and
 * started; then one thread keeps DEPTH requests in flight until
 * STOPFILE exists: reads, writes (one in AIO_DRIVER_FUA_EVERY, from the
 * environment, default 8, 0 for none, with FUA) and zeroes (some that
 * may trim) of 4 to 64 KiB at random 4 KiB blocks.  As the first queue
 * of ublk.c, that thread drives the engine's poller (poller_adopt: it
 * polls the poller's descriptor and reads the legs' replies itself),
 * starts requests (engine_aio_start), and gets completions inline or
 * through an eventfd; unfinished ones go to a finisher thread
 * (engine_aio_finish), a request the engine will not start to a worker
 * thread (the synchronous call), and every second the deadlines of the
 * requests in flight are checked (engine_aio_expire).  One write in
 * eight is aimed at the blocks of a started write in flight, so the
 * range lock's refusals are exercised.
 *
 * Checks: every request succeeds; every read returns what was last
 * written there (a read never overlaps a write in flight; a write may
 * overlap started writes, which the range lock orders, but never a
 * write left to the worker, which may not hold its range yet, so the
 * driver's image follows the order of issue).  At the end, once every
 * leg is uptodate again, the whole volume read back must equal the
 * image, which is written to EXPECTED for the test's oracle (every leg
 * equals it).
 * PROGRESS holds the number of completed requests, rewritten every 64.
 * The last line printed counts the requests: started without waiting,
 * refused (run synchronously by the worker) and finished by the
 * finisher.
 *
 *   aio-driver --script KEY=VALUE...
 *
 * One request at a time, for tests that drive an exact interleaving
 * around one asynchronous request (test-safety-aio-record.sh): commands
 * on stdin, one per line, each answered by one line on stdout.
 *   write OFFSET LENGTH FILE   write FILE's first LENGTH bytes, with FUA
 *   read OFFSET LENGTH FILE    read LENGTH bytes into FILE
 *   sync-write OFFSET LENGTH FILE
 *                              the same write with the synchronous call
 *                              (by the worker: this thread drives the
 *                              poller), to set the scene
 * LENGTH is at most 64 KiB.  The answer is "ok HOW", "error ENAME HOW"
 * (ENAME as strerrorname_np) or "refused": engine_aio_start would not
 * start it, so nothing was done (a write to a cold activity-log extent,
 * for one: such a test is about the asynchronous path, and may warm the
 * extent with sync-write and try again).  HOW is "inline" (done without
 * the finisher), "finished" (engine_aio_finish completed it: a leg
 * failed or timed out, or a membership change was under way) or "sync".
 * The poller is driven and deadlines are applied as in the random mode.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "internal.h"
#include "state.h"
#include "poller.h"
#include "aio.h"

#define DEPTH 32
#define BLOCK 4096
#define MAX_BLOCKS 16

/* One request slot. */
struct slot {
  struct engine_aio aio;
  bool busy;
  bool refused;                 /* left to the worker */
  bool finished;                /* engine_aio_finish completed it */
  uint64_t first, nr;           /* blocks */
  char *buf, *want;             /* data; what a read must return */
  struct slot *next;            /* on the done or the tail list */
};

static struct volume *vol;
static struct slot slots[DEPTH];
static uint8_t *image;                  /* what the volume must hold */
static uint64_t nr_blocks;
/* Per block: writes and reads in flight, writes left to the worker. */
static unsigned *writes_in_flight, *reads_in_flight, *refused_in_flight;
static uint64_t rng_state = 0x9e3779b97f4a7c15;
static unsigned long fua_every = 8;     /* AIO_DRIVER_FUA_EVERY */

/* Completions back to the issuing thread (and its eventfd); tails to
 * the finisher, refused requests to the worker.
 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tail_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_cond = PTHREAD_COND_INITIALIZER;
static struct slot *done_list, *tail_list, *work_list;
static bool threads_stop;
static int done_fd;

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

/* Push a finished slot for the issuing thread and wake it (lock held). */
static void
push_done (struct slot *s)
{
  uint64_t one = 1;

  s->next = done_list;
  done_list = s;
  if (write (done_fd, &one, sizeof one) != sizeof one)
    die ("eventfd write: %m");
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
    push_done (s);
  pthread_mutex_unlock (&lock);
}

/* Run a request the engine would not start with the synchronous call.
 * Returns 0 or an errno.
 */
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

/* The finisher thread (arg NULL) or the worker thread (non-NULL): take
 * slots off their list (oldest first), finish or run them, hand them
 * back.
 */
static void *
helper (void *arg)
{
  bool worker = arg != NULL;
  struct slot **list = worker ? &work_list : &tail_list;

  pthread_mutex_lock (&lock);
  for (;;) {
    struct slot *s, **pp;

    while (*list == NULL && !threads_stop)
      pthread_cond_wait (worker ? &work_cond : &tail_cond, &lock);
    if (*list == NULL)
      break;
    for (pp = list; (*pp)->next != NULL; pp = &(*pp)->next)
      ;
    s = *pp;
    *pp = NULL;
    pthread_mutex_unlock (&lock);
    if (worker)
      s->aio.err = run_sync (&s->aio.cmd);
    else
      engine_aio_finish (&s->aio);
    pthread_mutex_lock (&lock);
    if (!worker) {
      finished++;
      s->finished = true;
    }
    push_done (s);
  }
  pthread_mutex_unlock (&lock);
  return NULL;
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
  if (s->refused)
    count_in_flight (s, refused_in_flight, -1);
  s->busy = false;
  completed++;
}

/* A random range for a request: 1 block half the time, else up to 16;
 * for a write, one time in eight the range of a started write in
 * flight.
 */
static void
choose_range (struct slot *s, bool write)
{
  unsigned i;

  s->nr = rnd () % 2 ? 1 : 1 + rnd () % MAX_BLOCKS;
  if (write && rnd () % 8 == 0)
    for (i = 0; i < DEPTH; ++i)
      if (slots[i].busy && !slots[i].refused &&
          slots[i].aio.cmd.op != OP_READ) {
        s->first = slots[i].first;
        s->nr = slots[i].nr;
        return;
      }
  s->first = rnd () % (nr_blocks - s->nr + 1);
}

/* Can a request of this kind go to [first, first+nr)? */
static bool
range_free (bool write, uint64_t first, uint64_t nr)
{
  if (!write)
    return !any_in_flight (writes_in_flight, first, nr);
  return !any_in_flight (reads_in_flight, first, nr) &&
    !any_in_flight (refused_in_flight, first, nr);
}

/* Prepare a request in s: a read where no write is in flight, or a write
 * or zeroes where no read and no write left to the worker is.  The
 * image follows at once.
 */
static void
prepare (struct slot *s)
{
  struct leg_cmd *c = &s->aio.cmd;
  unsigned kind = rnd () % 10, tries;
  uint64_t i;

  for (tries = 0; tries < 16; ++tries) {
    choose_range (s, kind >= 3);
    if (range_free (kind >= 3, s->first, s->nr))
      break;
  }
  if (tries == 16)
    kind = 3;                   /* no free range for it: write instead */
  while (kind >= 3 && !range_free (true, s->first, s->nr))
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
  if (fua_every != 0 && rnd () % fua_every == 0)
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

/* Issue a request in a free slot. */
static void
issue (struct slot *s)
{
  prepare (s);
  s->aio.done = aio_done;
  s->busy = true;
  s->refused = false;
  if (engine_aio_start (vol, &s->aio)) {
    started++;
    return;
  }
  refused++;
  s->refused = true;
  count_in_flight (s, refused_in_flight, 1);
  pthread_mutex_lock (&lock);
  push (&work_list, s, &work_cond);
  pthread_mutex_unlock (&lock);
}

/* Wait up to a second for the poller's descriptor, the eventfd or
 * extra_fd (ignored if -1); drive the poller, hand the completions to
 * done; every second, apply the deadlines of the requests in flight.
 * Returns whether extra_fd is readable.
 */
static bool
reap (int poller_fd, int extra_fd, void (*done) (struct slot *, int))
{
  static uint64_t last_expire;
  struct pollfd fds[3] = {
    { .fd = poller_fd, .events = POLLIN }, { .fd = done_fd, .events = POLLIN },
    { .fd = extra_fd, .events = POLLIN },
  };
  struct slot *list, *next;
  uint64_t now, n;
  unsigned i;

  if (poll (fds, 3, 1000) == -1 && errno != EINTR)
    die ("poll: %m");
  if (fds[0].revents & POLLIN)
    poller_drive (vol->poller);
  if ((fds[1].revents & POLLIN) && read (done_fd, &n, sizeof n) != sizeof n)
    die ("eventfd read: %m");
  pthread_mutex_lock (&lock);
  list = done_list;
  done_list = NULL;
  pthread_mutex_unlock (&lock);
  now = now_ns ();
  if (now - last_expire >= 1000000000) {
    for (i = 0; i < DEPTH; ++i)
      if (slots[i].busy && !slots[i].refused)
        engine_aio_expire (&slots[i].aio, now);
    last_expire = now;
  }
  for (; list != NULL; list = next) {
    next = list->next;
    done (list, list->aio.err);
  }
  return (fds[2].revents & (POLLIN | POLLHUP)) != 0;
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

/* Keep DEPTH requests in flight until stopfile exists, then drain;
 * drive the engine's poller meanwhile.
 */
static void
run (const char *progress, const char *stopfile)
{
  int poller_fd = poller_adopt (vol->poller);
  uint64_t reported = 0;
  bool stopping = false;
  unsigned i;

  while (!stopping || busy ()) {
    for (i = 0; i < DEPTH && !stopping; ++i)
      if (!slots[i].busy)
        issue (&slots[i]);
    reap (poller_fd, -1, complete);
    if (completed - reported >= 64) {
      report_progress (progress);
      reported = completed;
    }
    stopping = stopping || access (stopfile, F_OK) == 0;
  }
  if (poller_release (vol->poller) == -1)
    die ("the poller did not restart");
  report_progress (progress);
}

/* Wait until every synchronous leg is uptodate again (resyncs done;
 * an asynchronous leg never is).
 */
static void
wait_healthy (void)
{
  uint16_t all = volume_sync_legs (vol, (uint16_t) ((1u << vol->nr_legs) - 1));
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
  refused_in_flight = calloc (nr_blocks, sizeof *refused_in_flight);
  if (image == NULL || writes_in_flight == NULL || reads_in_flight == NULL ||
      refused_in_flight == NULL)
    die ("calloc: %m");
  done_fd = eventfd (0, EFD_CLOEXEC);
  if (done_fd == -1)
    die ("eventfd: %m");
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
  free (refused_in_flight);
  close (done_fd);
}

/* Script mode: answer a finished request (see the note). */
static void
answer (struct slot *s, int err)
{
  const struct leg_cmd *c = &s->aio.cmd;
  const char *how = s->refused ? "sync" : s->finished ? "finished" : "inline";

  if (err != 0)
    printf ("error %s %s\n", strerrorname_np (err), how);
  else if (c->op == OP_READ) {
    int fd = open (s->want, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd == -1 || write (fd, s->buf, c->count) != (ssize_t) c->count ||
        close (fd) == -1)
      die ("%s: %m", s->want);
    printf ("ok %s\n", how);
  }
  else
    printf ("ok %s\n", how);
  s->busy = false;
}

/* Script mode: start the request of one command line in slot 0.  The
 * file name goes into the slot's want buffer (unused in this mode).
 */
static void
run_command (char *line)
{
  struct slot *s = &slots[0];
  char op[16];
  uint64_t offset;
  uint32_t count;
  bool sync;
  int fd, n;

  if (sscanf (line, "%15s %" SCNu64 " %" SCNu32 " %n", op, &offset, &count,
              &n) != 3 || line[n] == '\0' || count == 0 ||
      count > MAX_BLOCKS * BLOCK ||
      (strcmp (op, "write") != 0 && strcmp (op, "read") != 0 &&
       strcmp (op, "sync-write") != 0))
    die ("bad command: %s", line);
  sync = strcmp (op, "sync-write") == 0;
  snprintf (s->want, MAX_BLOCKS * BLOCK, "%s", line + n);
  s->aio.cmd = (struct leg_cmd) {
    .op = OP_READ, .buf = s->buf, .count = count, .offset = offset,
  };
  if (strcmp (op, "read") != 0) {
    s->aio.cmd.op = OP_WRITE;
    s->aio.cmd.flags = ENGINE_FLAG_FUA;
    fd = open (s->want, O_RDONLY);
    if (fd == -1 || read (fd, s->buf, count) != (ssize_t) count ||
        close (fd) == -1)
      die ("%s: cannot read %" PRIu32 " bytes: %m", s->want, count);
  }
  s->aio.done = aio_done;
  s->busy = true;
  s->refused = sync;
  s->finished = false;
  if (sync) {
    pthread_mutex_lock (&lock);
    push (&work_list, s, &work_cond);
    pthread_mutex_unlock (&lock);
  }
  else if (!engine_aio_start (vol, &s->aio)) {
    s->busy = false;
    printf ("refused\n");
  }
}

/* Script mode: run commands from stdin one at a time until its end. */
static void
run_script (void)
{
  int poller_fd = poller_adopt (vol->poller);
  char buf[4096];
  size_t have = 0;
  bool eof = false, readable = false;
  char *nl;
  ssize_t r;

  setvbuf (stdout, NULL, _IOLBF, 0);
  while (!eof || have > 0 || slots[0].busy) {
    if (!slots[0].busy && (nl = memchr (buf, '\n', have)) != NULL) {
      *nl = '\0';
      run_command (buf);
      have -= nl + 1 - buf;
      memmove (buf, nl + 1, have);
      continue;
    }
    if (!slots[0].busy && eof)
      die ("a command without its newline at the end of the input");
    if (readable && !eof) {
      if (have == sizeof buf)
        die ("a command line longer than %zu bytes", sizeof buf);
      r = read (0, buf + have, sizeof buf - have);
      if (r == -1 && errno != EINTR)
        die ("stdin: %m");
      eof = r == 0;
      have += r > 0 ? (size_t) r : 0;
    }
    readable = reap (poller_fd, eof || slots[0].busy ? -1 : 0, answer);
  }
  if (poller_release (vol->poller) == -1)
    die ("the poller did not restart");
}

/* Start the finisher and the worker threads. */
static void
start_helpers (pthread_t *threads)
{
  int i, r;

  for (i = 0; i < 2; ++i) {
    r = pthread_create (&threads[i], NULL, helper, i ? &threads[i] : NULL);
    if (r != 0)
      die ("pthread_create: %s", strerror (r));
  }
}

/* Stop the finisher and the worker threads. */
static void
stop_helpers (pthread_t *threads)
{
  int i;

  pthread_mutex_lock (&lock);
  threads_stop = true;
  pthread_cond_signal (&tail_cond);
  pthread_cond_signal (&work_cond);
  pthread_mutex_unlock (&lock);
  for (i = 0; i < 2; ++i)
    pthread_join (threads[i], NULL);
}

/* Script mode's main. */
static int
script_main (int argc, char **argv)
{
  pthread_t threads[2];

  start_engine (argc, argv);
  allocate ((uint64_t) MAX_BLOCKS * BLOCK);
  start_helpers (threads);
  run_script ();
  stop_helpers (threads);
  engine_stop (vol);
  engine_free (vol);
  release ();
  return EXIT_SUCCESS;
}

int
main (int argc, char *argv[])
{
  pthread_t threads[2];
  const char *fua_env;
  int64_t size;

  signal (SIGPIPE, SIG_IGN);
  if (argc >= 2 && strcmp (argv[1], "--script") == 0)
    return script_main (argc - 2, argv + 2);
  if (argc < 5)
    die ("usage: aio-driver PROGRESS STOPFILE EXPECTED KEY=VALUE...\n"
         "       aio-driver --script KEY=VALUE...");
  fua_env = getenv ("AIO_DRIVER_FUA_EVERY");
  if (fua_env)
    fua_every = strtoul (fua_env, NULL, 10);
  start_engine (argc - 4, argv + 4);
  size = engine_get_size (vol);
  if (size < (int64_t) (MAX_BLOCKS * BLOCK))
    die ("the volume is too small: %" PRIi64 " bytes", size);
  size -= size % BLOCK;
  allocate ((uint64_t) size);
  start_helpers (threads);

  /* Start from a known image: zero the whole volume. */
  {
    int err = 0;
    if (engine_zero (vol, (uint32_t) size, 0, 0, &err) == -1)
      die ("zeroing the volume: %s", strerror (err));
  }
  run (argv[1], argv[2]);
  stop_helpers (threads);
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
