/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-faultinject-filter: scripted faults on a replica, for the tests
 * only (built with them, never installed).
 *
 *   nbdkit -U r0.sock --filter=.../nbdkit-faultinject-filter.so \
 *          file file=r0.img rules=r0.rules log=r0.faults
 *
 * Every request stats the rules file (rules=); when its identity (dev,
 * ino, mtime, size) changed it is read again and every counter starts
 * afresh.  A missing file means no rules; a line that does not parse is
 * reported with nbdkit_error and the whole file is ignored until it
 * changes.  The syntax and the matching are in faultinject-rules.c.  The
 * first rule that matches and still has firings left fires: it refuses
 * the request, applies it and fails it, holds it (a sleep a client's
 * disconnection does not cut short, unlike the delay filter's), shuts
 * down every connected socket of the process, or _exits the process,
 * before or after applying it, or after applying only the first half
 * of a write (torn-exit: rounded down to 4 KiB, as a server SIGKILLed
 * inside its pwrite(2) keeps the pages the kernel copied before it saw
 * the signal; other requests are not applied); delay= makes any of
 * these wait first, in the same sleep (a refusal that comes late: a
 * superblock write that fails only after others have gone on
 * meanwhile).  Each firing appends "fire ID PHASE OP OFFSET COUNT" to
 * the log (log=), and "done ..." once a request that goes on to be
 * applied came back from the plugin (for torn-exit, with the bytes it
 * applied, just before the exit); one write(2) per line on an
 * O_APPEND fd, so lines never interleave.  One mutex covers the rules
 * and their counters; it is never held while sleeping or calling the
 * plugin.  Like every filter it is tied to the exact nbdkit version.
 * It is built without the sanitizer flags and links nothing of ours:
 * the replicas it is loaded into are stock nbdkit, never started with a
 * sanitizer runtime preloaded.
 */

#define UNUSED __attribute__ ((__unused__))

#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "faultinject-rules.h"

static char *rules_path;                /* rules= */
static char *log_path;                  /* log= */
static int log_fd = -1;

/* The identity of the rules file as last read. */
struct file_key {
  bool present;
  dev_t dev;
  ino_t ino;
  struct timespec mtime;
  off_t size;
};

/* The rules and their counters, under lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fi_rule *rules;
static size_t nr_rules;
static struct file_key loaded_key;
static bool loaded;

/* A request, as the phase actions see it. */
struct request {
  unsigned op;                          /* an enum fi_op bit */
  nbdkit_next *next;
  void *buf;                            /* pread */
  const void *wbuf;                     /* pwrite */
  uint32_t count;
  uint64_t offset;
  uint32_t flags;
  struct nbdkit_extents *extents;
};

/* What a firing rule said, copied so that a reload changes nothing. */
struct firing {
  char id[FI_ID_MAX];
  enum fi_phase phase;
  int error;                            /* 0: none (hold only) */
  double secs;
  double delay;
};

/* Free the rules and the paths. */
static void
faultinject_unload (void)
{
  free (rules);
  free (rules_path);
  free (log_path);
  if (log_fd >= 0)
    close (log_fd);
}

/* rules=FILE and log=FILE are ours; the rest is the plugin's. */
static int
faultinject_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                    const char *key, const char *value)
{
  char **dest = NULL;

  if (strcmp (key, "rules") == 0)
    dest = &rules_path;
  else if (strcmp (key, "log") == 0)
    dest = &log_path;
  else
    return next (nxdata, key, value);
  free (*dest);
  *dest = nbdkit_absolute_path (value);
  return *dest ? 0 : -1;
}

/* Require rules= and open the log. */
static int
faultinject_config_complete (nbdkit_next_config_complete *next,
                             nbdkit_backend *nxdata)
{
  if (rules_path == NULL) {
    nbdkit_error ("faultinject: the rules=FILE parameter is required");
    return -1;
  }
  if (log_path) {
    log_fd = open (log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd == -1) {
      nbdkit_error ("faultinject: open %s: %m", log_path);
      return -1;
    }
  }
  return next (nxdata);
}

#define faultinject_config_help \
  "rules=FILE     (required) The fault rules, re-read when FILE changes.\n" \
  "log=FILE                  Append a line when a rule fires."

/* Requests may run in parallel: the rules have their own lock. */
static int
faultinject_thread_model (void)
{
  return NBDKIT_THREAD_MODEL_PARALLEL;
}

/* The identity of the file open as FD, or of a missing one. */
static struct file_key
key_of (int fd)
{
  struct file_key key = { .present = false };
  struct stat st;

  if (fd >= 0 && fstat (fd, &st) == 0)
    key = (struct file_key) {
      .present = true, .dev = st.st_dev, .ino = st.st_ino,
      .mtime = st.st_mtim, .size = st.st_size,
    };
  return key;
}

/* Is the rules file now the one last read (or still missing)? */
static bool
rules_unchanged (void)
{
  struct stat st;

  if (stat (rules_path, &st) == -1)
    return loaded && !loaded_key.present;
  return loaded && loaded_key.present &&
    loaded_key.dev == st.st_dev && loaded_key.ino == st.st_ino &&
    loaded_key.mtime.tv_sec == st.st_mtim.tv_sec &&
    loaded_key.mtime.tv_nsec == st.st_mtim.tv_nsec &&
    loaded_key.size == st.st_size;
}

/* Append RULE to the rules; fails (saying so) when out of memory. */
static int
add_rule (const struct fi_rule *rule)
{
  struct fi_rule *v = realloc (rules, (nr_rules + 1) * sizeof *v);

  if (v == NULL) {
    nbdkit_error ("faultinject: realloc: %m");
    return -1;
  }
  rules = v;
  rules[nr_rules++] = *rule;
  return 0;
}

/* Parse the rules from FP; on a bad line report it, leaving no rules. */
static void
parse_rules (FILE *fp)
{
  char *line = NULL;
  size_t cap = 0;
  unsigned lineno = 0;
  struct fi_rule rule;
  char err[256];
  int r;

  while (getline (&line, &cap, fp) != -1) {
    r = fi_parse_rule (line, ++lineno, nbdkit_parse_size, &rule,
                       err, sizeof err);
    if (r < 0)
      nbdkit_error ("faultinject: %s line %u: %s (the rules file is "
                    "ignored until it changes)", rules_path, lineno, err);
    if (r < 0 || (r > 0 && add_rule (&rule) == -1)) {
      nr_rules = 0;
      break;
    }
  }
  free (line);
}

/* Read the rules file again, with fresh counters (under lock). */
static void
reload_rules (void)
{
  FILE *fp = fopen (rules_path, "re");

  nr_rules = 0;
  if (fp == NULL && errno != ENOENT)
    nbdkit_error ("faultinject: open %s: %m", rules_path);
  loaded_key = key_of (fp ? fileno (fp) : -1);
  loaded = true;
  if (fp == NULL)
    return;
  parse_rules (fp);
  fclose (fp);
  nbdkit_debug ("faultinject: %zu rules from %s", nr_rules, rules_path);
}

/* Choose and count the rule firing for a request of R's kind on an
 * export of SIZE bytes, reloading the rules if they changed, and copy
 * it into *F; false if the request passes untouched (under lock).
 */
static bool
select_locked (const struct request *r, uint64_t size, struct firing *f)
{
  const struct fi_rule *rule;
  int i;

  if (!rules_unchanged ())
    reload_rules ();
  i = fi_select (rules, nr_rules, r->op, r->offset, r->count,
                 r->flags & NBDKIT_FLAG_FUA, size);
  if (i < 0)
    return false;
  rule = &rules[i];
  memcpy (f->id, rule->id, sizeof f->id);
  f->phase = rule->phase;
  f->error = rule->error;
  if (f->error == 0 && rule->phase != FI_HOLD)
    f->error = EIO;
  f->secs = rule->secs;
  f->delay = rule->delay;
  return true;
}

/* Choose the rule firing for R into *F (see select_locked). */
static bool
select_firing (const struct request *r, struct firing *f)
{
  int64_t size = r->op == FI_FLUSH ? 0 : r->next->get_size (r->next);
  bool fires;

  pthread_mutex_lock (&lock);
  fires = select_locked (r, size > 0 ? size : 0, f);
  pthread_mutex_unlock (&lock);
  return fires;
}

/* Append "WORD ID PHASE OP OFFSET COUNT" to the log in one write. */
static void
log_event (const char *word, const struct firing *f,
           const struct request *r)
{
  char buf[256];
  int len;

  len = snprintf (buf, sizeof buf, "%s %s %s %s %" PRIu64 " %" PRIu32 "\n",
                  word, f->id, fi_phase_name (f->phase), fi_op_name (r->op),
                  r->offset, r->count);
  nbdkit_debug ("faultinject: %.*s", len - 1, buf);
  if (log_fd >= 0 && write (log_fd, buf, len) != len)
    nbdkit_error ("faultinject: write %s: %m", log_path);
}

/* Is FD a connected stream socket (not a listening one)? */
static bool
is_connected_stream (int fd)
{
  struct sockaddr_storage peer;
  socklen_t peerlen = sizeof peer;
  int type, accepting;
  socklen_t len = sizeof type;

  if (getsockopt (fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
      type != SOCK_STREAM)
    return false;
  len = sizeof accepting;
  if (getsockopt (fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == -1 ||
      accepting)
    return false;
  return getpeername (fd, (struct sockaddr *) &peer, &peerlen) == 0;
}

/* Shut down every connected socket of this process (its clients). */
static void
drop_connections (void)
{
  DIR *dir = opendir ("/proc/self/fd");
  struct dirent *d;
  unsigned n = 0;
  char *end;
  long fd;

  if (dir == NULL) {
    nbdkit_error ("faultinject: opendir /proc/self/fd: %m");
    return;
  }
  while ((d = readdir (dir)) != NULL) {
    fd = strtol (d->d_name, &end, 10);
    if (d->d_name[0] == '.' || *end != '\0' || fd == dirfd (dir))
      continue;
    if (is_connected_stream (fd) && shutdown (fd, SHUT_RDWR) == 0)
      n++;
  }
  closedir (dir);
  nbdkit_debug ("faultinject: shut down %u connected sockets", n);
}

/* Sleep SECS seconds whatever happens to the connection: the sleep is
 * restarted after a signal, up to the deadline.
 */
static void
hold (double secs)
{
  struct timespec deadline;

  clock_gettime (CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += (time_t) secs;
  deadline.tv_nsec += (long) ((secs - (time_t) secs) * 1e9);
  if (deadline.tv_nsec >= 1000000000) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000;
  }
  while (clock_nanosleep (CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline,
                          NULL) == EINTR)
    ;
}

/* Call the plugin underneath for R. */
static int
apply (const struct request *r, int *err)
{
  nbdkit_next *n = r->next;

  switch (r->op) {
  case FI_WRITE:
    return n->pwrite (n, r->wbuf, r->count, r->offset, r->flags, err);
  case FI_ZERO:
    return n->zero (n, r->count, r->offset, r->flags, err);
  case FI_TRIM:
    return n->trim (n, r->count, r->offset, r->flags, err);
  case FI_FLUSH:
    return n->flush (n, r->flags, err);
  case FI_READ:
    return n->pread (n, r->buf, r->count, r->offset, r->flags, err);
  case FI_EXTENTS:
    return n->extents (n, r->count, r->offset, r->flags, r->extents, err);
  case FI_CACHE:
    return n->cache (n, r->count, r->offset, r->flags, err);
  }
  *err = EINVAL;
  return -1;
}

/* Apply the first half of a write R (rounded down to 4 KiB; nothing
 * of any other request), log "done" with the bytes applied, and end
 * the process (the firing F).
 */
static void __attribute__ ((__noreturn__))
torn_exit (const struct request *r, const struct firing *f)
{
  struct request head = *r;
  int err;

  head.count = r->op == FI_WRITE ? r->count / 2 / 4096 * 4096 : 0;
  if (head.count > 0)
    apply (&head, &err);
  log_event ("done", f, &head);
  _exit (0);
}

/* Fail with ERROR. */
static int
fail (int *err, int error)
{
  *err = error;
  return -1;
}

/* Do to R what the firing F says, logging it. */
static int
act (const struct request *r, const struct firing *f, int *err)
{
  int ret;

  log_event ("fire", f, r);
  if (f->delay > 0)
    hold (f->delay);
  switch (f->phase) {
  case FI_REFUSE:
    return fail (err, f->error);
  case FI_DROP:
    drop_connections ();
    return fail (err, EIO);
  case FI_EXIT:
    _exit (0);
  case FI_TORN_EXIT:
    torn_exit (r, f);
  case FI_HOLD:
    hold (f->secs);
    break;
  default:
    break;
  }
  ret = apply (r, err);
  log_event ("done", f, r);
  switch (f->phase) {
  case FI_APPLY_EXIT:
    _exit (0);
  case FI_APPLY_DROP:
    drop_connections ();
    return fail (err, EIO);
  case FI_APPLY_ERROR:
    return ret == -1 ? -1 : fail (err, f->error);
  default:                              /* hold */
    return ret == -1 || f->error == 0 ? ret : fail (err, f->error);
  }
}

/* Pass R to the plugin, or to the rule that fires for it. */
static int
handle_request (const struct request *r, int *err)
{
  struct firing f;

  if (!select_firing (r, &f))
    return apply (r, err);
  return act (r, &f, err);
}

/* Write. */
static int
faultinject_pwrite (nbdkit_next *next, void *handle UNUSED, const void *buf,
                    uint32_t count, uint64_t offset, uint32_t flags,
                    int *err)
{
  struct request r = { .op = FI_WRITE, .next = next, .wbuf = buf,
                       .count = count, .offset = offset, .flags = flags };
  return handle_request (&r, err);
}

/* Write zeroes. */
static int
faultinject_zero (nbdkit_next *next, void *handle UNUSED, uint32_t count,
                  uint64_t offset, uint32_t flags, int *err)
{
  struct request r = { .op = FI_ZERO, .next = next,
                       .count = count, .offset = offset, .flags = flags };
  return handle_request (&r, err);
}

/* Trim. */
static int
faultinject_trim (nbdkit_next *next, void *handle UNUSED, uint32_t count,
                  uint64_t offset, uint32_t flags, int *err)
{
  struct request r = { .op = FI_TRIM, .next = next,
                       .count = count, .offset = offset, .flags = flags };
  return handle_request (&r, err);
}

/* Flush. */
static int
faultinject_flush (nbdkit_next *next, void *handle UNUSED, uint32_t flags,
                   int *err)
{
  struct request r = { .op = FI_FLUSH, .next = next, .flags = flags };
  return handle_request (&r, err);
}

/* Read. */
static int
faultinject_pread (nbdkit_next *next, void *handle UNUSED, void *buf,
                   uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  struct request r = { .op = FI_READ, .next = next, .buf = buf,
                       .count = count, .offset = offset, .flags = flags };
  return handle_request (&r, err);
}

/* Block status. */
static int
faultinject_extents (nbdkit_next *next, void *handle UNUSED, uint32_t count,
                     uint64_t offset, uint32_t flags,
                     struct nbdkit_extents *extents, int *err)
{
  struct request r = { .op = FI_EXTENTS, .next = next, .count = count,
                       .offset = offset, .flags = flags,
                       .extents = extents };
  return handle_request (&r, err);
}

/* Cache. */
static int
faultinject_cache (nbdkit_next *next, void *handle UNUSED, uint32_t count,
                   uint64_t offset, uint32_t flags, int *err)
{
  struct request r = { .op = FI_CACHE, .next = next,
                       .count = count, .offset = offset, .flags = flags };
  return handle_request (&r, err);
}

static struct nbdkit_filter filter = {
  .name              = "faultinject",
  .longname          = "nbdkit fault injection filter (tests only)",
  .unload            = faultinject_unload,
  .config            = faultinject_config,
  .config_complete   = faultinject_config_complete,
  .config_help       = faultinject_config_help,
  .thread_model      = faultinject_thread_model,
  .pwrite            = faultinject_pwrite,
  .zero              = faultinject_zero,
  .trim              = faultinject_trim,
  .flush             = faultinject_flush,
  .pread             = faultinject_pread,
  .extents           = faultinject_extents,
  .cache             = faultinject_cache,
};

NBDKIT_REGISTER_FILTER (filter)
