/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's shared structures: volume, leg, connection, request.
 *
 * A volume has up to MAX_LEGS legs.  Each NBD leg owns `connections`
 * libnbd handles (struct conn), each driven by its own poller thread
 * and shared by every client connection.  The filter's leg 0 is local:
 * calls go straight to the plugin underneath, synchronously.
 *
 * Membership is one atomic 64-bit word (MB_* in state.h): which legs are
 * uptodate (serve reads, count for quorum), which receive writes
 * (uptodate + syncing), which metadata slots are absent (their bitmaps
 * collect what they miss), and an epoch that changes with every
 * membership change.  A write reads the word once, after taking its
 * range lock, so the legs it goes to and the bitmaps it marks always
 * agree.  Changes are made under v->lock and published with one store.
 *
 * One funnel: a leg's state changes only through member_set_state
 * (member.c), which checks the move against the transition table
 * (state_move_allowed, state.c), recomputes the word from the legs and
 * publishes it; the absent slots that belong to no leg (the backup's
 * tracker, the slots an election found absent) change only through
 * member_set_absent.  member_init_state sets the state a leg starts
 * in, before anything else can see it.  Nothing else stores l->state
 * or publishes the word, so the word always mirrors the legs.
 *
 * Four error conventions, each where it fits:
 *   - 0 or -1 after nbdkit_error: configuration, start and stop, where
 *     nbdkit prints the error (engine_config, engine_start ...);
 *   - 0 or -1 with the message in a caller's buffer (char *err, size_t
 *     len): what a leg's connection or judgement says, which the caller
 *     keeps as last_error or sends as a control reply (leg_open,
 *     monitor_examine_leg, config_check ...);
 *   - an errno (0 for success) for one request to legs and its judging
 *     (ioreq_sync_io, ioreq_leg_error, judge_write, judge_acknowledge);
 *   - -1 with *err set to the client's errno on the data path
 *     (engine_pread ... and the io_* pieces they are made of), as
 *     nbdkit's own .pread and friends return.
 *
 * Lock order (take left before right, never the reverse):
 *   leg->life_lock -> range lock -> v->change_lock -> v->lock ->
 *   al->lock -> leg->conns_lock
 * No lock is held across I/O except a leg's life_lock (while it is
 * connected and judged), change_lock (held while a generation bump
 * writes superblocks) and range locks.
 */

#ifndef REPLICATE_INTERNAL_H
#define REPLICATE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <libnbd.h>

#include "clock.h"
#include "nbdkit-calls.h"
#include "engine.h"
#include "params.h"
#include "meta.h"
#include "bitmap.h"
#include "rangelock.h"
#include "caps.h"
#include "state.h"

struct al;
struct resync;
struct verify;
struct control;
struct drain_sock;
struct async_leg;

/* ---- legs ------------------------------------------------------------ */

struct poller;

struct wire;

/* One connection to a leg, driven by the volume's poller (poller.c):
 * libnbd's handle (it connected; it carries the commands only when
 * `wire` is NULL) and the engine's own transmission phase (wire.c).
 */
struct conn {
  struct leg *leg;
  _Atomic bool aborted;     /* conn_shutdown was called */
  struct nbd_handle *nbd;
  struct wire *wire;        /* NULL: commands go through libnbd */
  int fd;                   /* our duplicate of the handle's socket */
  bool tcp;                 /* over TCP (drain.c: shut down how) */
  _Atomic bool peer_fin;    /* TLS on TCP: the server's FIN came first */
  _Atomic bool want_abort;  /* aborted wire on TCP: driver to fail it */
  struct poller *poller;    /* NULL until attached */
  uint32_t events;          /* epoll events registered (poller only) */
  _Atomic bool want_write;  /* an issuer left bytes to send */
  _Atomic bool dead;        /* out of epoll: the connection died */
  _Atomic unsigned inflight;
  _Atomic unsigned unretired;  /* failed commands libnbd still holds */
  struct ioreq *_Atomic wake_list;   /* completed, issuer not woken yet */
};

#define MAX_CONNS 64

/* Latency histogram bucket upper bounds, microseconds (the last
 * bucket is everything above).
 */
#define LATENCY_BUCKETS 14
extern const uint32_t latency_bounds_us[LATENCY_BUCKETS];

/* Counters shown in status and metrics (all atomic, no lock). */
struct leg_stats {
  _Atomic uint64_t reads, writes, zeroes, flushes;
  _Atomic uint64_t bytes_read, bytes_written;
  _Atomic uint64_t errors;
  _Atomic uint64_t latency_us_sum;      /* of completed NBD requests */
  _Atomic uint64_t latency_count;
  _Atomic uint64_t latency_hist[LATENCY_BUCKETS + 1];
};

struct resync_summary {
  bool valid;
  bool full;
  uint64_t bytes;           /* data read and written */
  uint64_t zeroed;          /* written as zeroes (holes, zero extents) */
  double seconds;
};

struct leg {
  struct volume *v;
  unsigned index;
  const char *uri;          /* NULL for the local leg */
  char *owned_uri;          /* the uri of a leg added at run time */
  bool local;
  /* An asynchronous leg (async=URI, DESIGN.md section 14): never read,
   * never counted, fed by its queue (async.c).  Fixed before the leg is
   * counted in nr_legs (a promotion at start clears it first).
   */
  bool async;
  struct async_leg *aq;     /* its queue, NULL for a synchronous leg */
  struct poller *own_poller; /* drives its connections (an asynchronous
                                leg's: leg_own_poller), or NULL: the
                                volume's */
  /* Its recovery point (unix seconds): every write queued before it
   * was flushed on the leg; written as its superblock's mtime
   * (change_lock).
   */
  uint64_t rpo_time;

  /* Connections (NBD legs).  Workers enter the issue window with
   * leg_enter, which fails once `open` is cleared; the handles are
   * closed only after `users` and every conn's inflight reach 0.
   */
  struct conn *conns[MAX_CONNS];
  unsigned nr_conns;
  _Atomic bool open;
  _Atomic unsigned users;
  _Atomic unsigned epoch;               /* +1 at every leg_open */
  _Atomic unsigned timed_out;           /* epoch + 1 of a timeout, or 0 */
  pthread_mutex_t conns_lock;           /* conns[] against leg_shutdown */
  /* Held while the leg is connected, judged and brought back
   * (monitor), added or removed (control thread): they open and close
   * its connections, so they must not overlap.  Held across I/O; taken
   * before change_lock.
   */
  pthread_mutex_t life_lock;
  _Atomic unsigned inflight;            /* requests in flight (least-busy) */
  struct leg_caps caps;
  /* caps.size as leg_open left it, for status: caps are cleared and
   * filled while the monitor connects the leg, under no lock status
   * takes.
   */
  _Atomic uint64_t shown_size;

  /* Sockets of aborted connections kept until their server has closed
   * them (drain.c), under conns_lock.
   */
  struct drain_sock *drain;
  size_t nr_drain, cap_drain;
  uint64_t drain_since_ns;              /* when the oldest was kept */
  bool drain_untracked;                 /* one could not be kept */
  bool orphans_said;                    /* logged at start (start.c) */

  /* Written only by member_set_state (under v->lock) and member_init_state;
   * also read without the lock.
   */
  _Atomic (enum leg_state) state;
  char last_error[256];
  int slot;                 /* metadata slot, -1 = none yet */
  uint8_t uuid[16];         /* leg UUID, zero = not known */
  bool slot_unknown;        /* removed with no slot known: the one its
                               storage owns was not freed (admin.c) */
  bool sb_read;             /* its superblock was read and judged in
                               this run (change_lock; slots.c) */
  bool refused;             /* not usable (TLS, another volume ...):
                               retried slowly (monitor.c) */
  bool want_full;           /* stale: the resync to start is full */
  bool force_full;          /* the operator asked for a full resync */
  bool held;                /* stale, held out as a backup's source */
  unsigned backoff;         /* reconnect backoff, seconds */
  unsigned source_errors;   /* resyncs ended in a row by a media error
                               of their last uptodate source (v->lock;
                               resync-copy.c): the retry waits longer */
  uint64_t next_attempt_ns; /* monotonic time of the next reconnect */
  struct resync *resync;    /* running resync, or NULL */
  struct resync_summary last_resync;

  /* Metadata on this leg (change_lock for sb, the AL role for al). */
  struct gen gen;           /* the generation on its disk */
  bool split_brain;         /* last judged: a generation the volume
                               never had (monitor.c), refused */
  bool inconsistent;        /* its superblock says inconsistent */
  uint64_t sb_seq, al_seq;
  /* The seqs of the newest superblock and activity log written to this
   * leg in this run and acknowledged (FUA): its disk, if it is the same
   * one, holds them or newer; one holding older ones is an older copy
   * of it (monitor.c, rolled_back).  0: nothing written yet.  Atomic:
   * the monitor reads them with no lock the writers hold.
   */
  _Atomic uint64_t sb_acked, al_acked;
  uint8_t *sb_buf, *al_buf;

  struct leg_stats stats;
};

/* ---- the volume ----------------------------------------------------- */

#define WCOUNT_STRIPES 8
#define NR_FILE_PARAMS 3

struct volume {
  enum engine_shape shape;
  struct config cfg;
  /* control=, tls-certificates= and tls-psk= made absolute (owned;
   * cfg points to them).
   */
  char *file_params[NR_FILE_PARAMS];
  const struct local_ops *local_ops;
  void *local_opaque;

  _Atomic size_t nr_legs;       /* grows with add-leg, never shrinks */
  struct leg *adding;           /* the leg nbdrep add examines, not counted
                                   yet (v->lock; slots.c) */
  /* The asynchronous legs (bits by index): a bit is set before its leg
   * is counted in nr_legs and never changes afterwards.
   */
  _Atomic uint16_t async_mask;
  struct leg legs[MAX_LEGS];

  /* Fixed once started. */
  uint64_t size;                /* exported size */
  unsigned quorum;
  bool metadata;                /* metadata=internal */
  struct md_layout layout;
  struct caps_summary caps;     /* the legs' combined capabilities */
  bool started, threads_running;

  /* Changeable at run time (nbdrep set). */
  _Atomic uint64_t resync_rate, resync_min_rate, verify_rate;
  /* Client requests so far (resync yields while this moves), and the
   * bytes of client writes (an asynchronous leg catches up only when
   * it keeps pace with them: async-behind.c).
   */
  _Atomic uint64_t client_requests, client_write_bytes;

  /* Membership (see MB_*).  Stored under v->lock, by member.c only. */
  _Atomic uint64_t membership;
  /* Writes in flight per epoch parity, striped to spread the cache
   * lines; a membership change waits for the old parity to drain.
   */
  struct {
    _Atomic long n;
    char pad[64 - sizeof (long)];
  } wcount[2][WCOUNT_STRIPES];

  pthread_mutex_t lock;         /* leg states, membership */
  pthread_cond_t cond;          /* signalled when changes complete */
  /* Non-zero while a membership change is being recorded: writes that
   * complete meanwhile wait before they are acknowledged.
   */
  _Atomic unsigned pending_changes;

  /* Serialises generation bumps and superblock writes. */
  pthread_mutex_t change_lock;
  struct superblock sb;         /* the common superblock (change_lock) */
  /* Generations a bump wrote that no leg confirmed, since v->sb.gen was
   * last recorded: a leg may hold one (its write was applied, then
   * failed), and then stands as if it held v->sb.gen (metaio.c).  The
   * highest counter ever written: the next bump goes above it.  Both
   * under change_lock.
   */
#define MAX_UNRECORDED 16
  struct gen unrecorded[MAX_UNRECORDED];
  unsigned nr_unrecorded;
  uint64_t max_counter;

  /* Out-of-sync bitmaps by slot (allocated while the slot is absent
   * or syncing).  Under v->lock for allocation; bits are atomic.
   */
  struct bitmap *bitmaps[MAX_LEGS];
  pthread_mutex_t bm_write_lock;   /* one bitmap page write at a time */
  uint64_t *bm_seq[MAX_LEGS];      /* per page record seq (bm_write_lock) */
  /* Slots whose bm_gen in v->sb (the one pages are written under) is
   * not recorded yet (metaio_defer_bm_gen): superblocks record
   * bm_gen_recorded[s] until every page of the slot is written under
   * the new one.  The mask is atomic (bits cleared under bm_write_lock
   * or change_lock); bm_gen_recorded under both locks to write,
   * change_lock to read.
   */
  _Atomic uint16_t bm_gen_pending;
  struct gen bm_gen_recorded[MAX_LEGS];
  /* Slots the bump under way records as free, while in memory they
   * stay assigned and tracked until it is recorded (change_lock;
   * slots.c, slots_release).
   */
  uint16_t slots_releasing;

  struct rangelock *rl;
  struct al *al;                /* NULL when metadata=none */
  struct poller *poller;        /* drives every connection */

  _Atomic unsigned rr_next;     /* round-robin reads */
  _Atomic bool stopping;

  /* The monitor thread: reconnects failed legs, starts resyncs. */
  pthread_t monitor;
  pthread_cond_t monitor_cond;  /* with v->lock */
  bool monitor_running;

  struct control *control;
  struct verify *verify;
  const struct engine_frontend *frontend;   /* engine_set_frontend */
  void *frontend_state;         /* what its start returned (v->lock) */
  /* NBD clients that are a kernel device's connections (nbdrep attach
   * names the device in its export name, KERNEL_EXPORT_PREFIX): counted
   * per device for the status.  kernel_lock is a leaf.
   */
  pthread_mutex_t kernel_lock;
  struct kernel_client {
    char device[32];
    unsigned connections;       /* 0: a free slot */
  } kernel[16];
  struct backup *backup;        /* the running backup (control thread) */
  char backup_lapsed[33];       /* token of the last backup that lapsed */
};

/* ---- requests to legs ------------------------------------------------ */

enum leg_op { OP_READ, OP_WRITE, OP_ZERO, OP_FLUSH, OP_CACHE, OP_EXTENTS };

/* One operation sent to one or more legs. */
struct leg_cmd {
  enum leg_op op;
  void *buf;                /* read into / write from */
  uint32_t count;
  uint64_t offset;
  uint32_t flags;           /* ENGINE_FLAG_* */
  extent_fn fn;             /* OP_EXTENTS */
  void *fn_opaque;
};

struct ioreq;

/* Per-leg completion context handed to libnbd as user_data. */
struct ioslot {
  struct ioreq *req;
  struct conn *conn;
  unsigned leg;
};

/* A request fanned out to several legs: the issuer sleeps once (a
 * futex on `wake`) and is woken by the last completion (a countdown),
 * whatever the number of legs.
 */
struct ioreq {
  struct volume *v;
  _Atomic uint32_t wake;    /* the issuer's futex word (ioreq.c) */
  _Atomic unsigned pending;
  _Atomic uint32_t done;    /* legs that have answered */
  _Atomic uint32_t failed;  /* legs whose err[] is set */
  uint32_t issued;          /* legs a command was issued to */
  _Atomic uint32_t timed_out;   /* legs failed by the timeout */
  uint32_t fua_emulate;     /* legs that need a flush for FUA */
  uint64_t start_ns;        /* when it was prepared (latency, timeout) */
  struct poller *p;         /* the poller its issuer waits on */
  int err[MAX_LEGS];        /* per leg in `failed`: its errno */
  unsigned epoch[MAX_LEGS]; /* per leg: its connections' epoch at issue */
  struct ioslot slots[MAX_LEGS];
  extent_fn ext_fn;         /* OP_EXTENTS: where extents go */
  void *ext_opaque;
  struct ioreq *next_wake;  /* on a connection's wake list */
  /* An asynchronous request (aio.c): called instead of waking an
   * issuer, by whoever completes the last leg.  NULL: an issuer waits.
   */
  void (*on_done) (struct ioreq *r);
};

/* The current membership word (inline: every layer reads it). */
static inline uint64_t
membership_load (struct volume *v)
{
  return atomic_load (&v->membership);
}

/* The out-of-sync bitmap of a slot, or NULL (allocated once, published
 * whole by member_alloc_bitmap; read without a lock).
 */
static inline struct bitmap *
volume_bitmap (struct volume *v, unsigned slot)
{
  return __atomic_load_n (&v->bitmaps[slot], __ATOMIC_ACQUIRE);
}

/* The synchronous legs among a set (asynchronous legs take writes
 * through their queues, never in a request's fan-out).
 */
static inline uint16_t
volume_sync_legs (struct volume *v, uint16_t legs)
{
  return legs & (uint16_t) ~atomic_load_explicit (&v->async_mask,
                                                  memory_order_relaxed);
}

#endif /* REPLICATE_INTERNAL_H */
