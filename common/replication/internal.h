/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's shared structures: volume, leg, connection, request.
 *
 * A volume has up to MAX_LEGS legs.  Each NBD leg owns `connections`
 * libnbd handles (struct conn), each driven by its own poller thread
 * and shared by every client connection.  The filter's leg 0 is local:
 * calls go straight to the plugin underneath, synchronously.
 *
 * Membership is one atomic 64-bit word (see MB_* below): which legs are
 * uptodate (serve reads, count for quorum), which receive writes
 * (uptodate + syncing), which metadata slots are absent (their bitmaps
 * collect what they miss), and an epoch that changes with every
 * membership change.  A write reads the word once, after taking its
 * range lock, so the legs it goes to and the bitmaps it marks always
 * agree.  Changes are made under v->lock and published with one store.
 *
 * One funnel: a leg's state changes only through leg_set_state
 * (member.c), which checks the move against the transition table
 * (leg_move_allowed, state.c), recomputes the word from the legs and
 * publishes it; the absent slots that belong to no leg (the backup's
 * tracker, the slots an election found absent) change only through
 * membership_set_absent.  leg_init_state sets the state a leg starts
 * in, before anything else can see it.  Nothing else stores l->state
 * or publishes the word, so the word always mirrors the legs.
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

#include "engine.h"
#include "params.h"
#include "meta.h"
#include "bitmap.h"
#include "rangelock.h"

/* The nbdkit functions the engine uses (stubbed in unit tests). */
extern void nbdkit_error (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
extern void nbdkit_debug (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
extern char *nbdkit_absolute_path (const char *path);
extern int64_t nbdkit_parse_size (const char *str);
extern int nbdkit_parse_bool (const char *str);
extern int nbdkit_parse_uint64_t (const char *what, const char *str,
                                  uint64_t *r);

struct al;
struct resync;
struct verify;
struct control;
struct ublk;

/* ---- membership word ---------------------------------------------- */

#define MB_UPTODATE(m)  ((uint16_t) ((m) & 0xffff))
#define MB_WRITING(m)   ((uint16_t) (((m) >> 16) & 0xffff))
#define MB_ABSENT(m)    ((uint16_t) (((m) >> 32) & 0xffff))
#define MB_EPOCH(m)     ((uint16_t) ((m) >> 48))
#define MB_MAKE(up, wr, ab, ep) \
  ((uint64_t) (up) | ((uint64_t) (wr) << 16) | \
   ((uint64_t) (ab) << 32) | ((uint64_t) (uint16_t) (ep) << 48))

/* ---- legs ------------------------------------------------------------ */

enum leg_state {
  LEG_UPTODATE,
  LEG_SYNCING,
  LEG_FAILED,
  LEG_STALE,
  LEG_REMOVED,
};

/* What a leg's server can do, read when it connects. */
struct leg_caps {
  uint64_t size;
  bool can_write;
  bool can_flush;
  bool can_fua;             /* native FUA */
  bool can_zero;            /* native write-zeroes */
  bool can_cache;
  bool can_extents;
  bool can_multi_conn;
  uint32_t min_block, pref_block, max_block;   /* 0 = no information */
};

/* The legs' capabilities combined (caps.c). */
struct caps_summary {
  bool trim;                    /* every leg zeroes natively */
  uint32_t min_block, pref_block, max_block;   /* combined, 0 = none */
};

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

  /* Sockets of aborted connections kept until their server has closed
   * them (drain.c), under conns_lock.
   */
  struct drain_sock *drain;
  size_t nr_drain, cap_drain;
  uint64_t drain_since_ns;              /* when the oldest was kept */
  bool drain_untracked;                 /* one could not be kept */

  /* Written only by leg_set_state (under v->lock) and leg_init_state;
   * also read without the lock.
   */
  _Atomic (enum leg_state) state;
  char last_error[256];
  int slot;                 /* metadata slot, -1 = none yet */
  uint8_t uuid[16];         /* leg UUID, zero = not known */
  bool refused;             /* not usable (TLS, another volume ...):
                               retried slowly (monitor.c) */
  bool want_full;           /* stale: the resync to start is full */
  bool force_full;          /* the operator asked for a full resync */
  bool held;                /* stale, held out as a backup's source */
  unsigned backoff;         /* reconnect backoff, seconds */
  uint64_t next_attempt_ns; /* monotonic time of the next reconnect */
  struct resync *resync;    /* running resync, or NULL */
  struct resync_summary last_resync;

  /* Metadata on this leg (change_lock for sb, the AL role for al). */
  struct gen gen;           /* the generation on its disk */
  bool inconsistent;        /* its superblock says inconsistent */
  uint64_t sb_seq, al_seq;
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
  /* Client requests so far (resync yields while this moves). */
  _Atomic uint64_t client_requests;

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
  struct ublk *ublk;            /* the ublk= frontend (ublk.c), or NULL */
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

/* ---- functions shared between engine files ---------------------------- */

/* caps.c: what the client is told (pure). */
extern void caps_combine (const struct leg_caps *const *legs, size_t n,
                          struct caps_summary *out);
extern void caps_block_size (const struct caps_summary *c,
                             uint32_t *minimum, uint32_t *preferred,
                             uint32_t *maximum);

/* state.c: names and pure decisions. */
extern const char *leg_state_name (enum leg_state s);
extern const char *volume_state_name (unsigned uptodate, unsigned total,
                                      unsigned quorum);
extern bool errno_fails_leg (int err);
extern bool errno_is_disconnect (int err);
extern bool errno_is_refusal (int err);
extern int errno_for_client (int err);
extern bool leg_move_allowed (enum leg_state from, enum leg_state to);
extern bool leg_state_writing (enum leg_state s);
extern uint64_t membership_compute (const enum leg_state *states,
                                    size_t nr_legs, uint16_t absent);
extern uint16_t absent_after_move (uint16_t absent, enum leg_state from,
                                   enum leg_state to, int slot,
                                   bool metadata);

/* select.c: which leg serves a read. */
extern int select_read_leg (enum read_policy policy, uint16_t candidates,
                            const unsigned *inflight, size_t nr_legs,
                            unsigned *rr_next);

/* conn.c */
extern struct conn *conn_connect (struct leg *leg, double timeout,
                                  bool *refused, char *err, size_t errlen);
extern void conn_shutdown (struct conn *c);
extern void conn_close (struct conn *c);

/* drain.c: sockets kept until the server has closed them. */
enum drain_how {
  DRAIN_UNIX,           /* a Unix socket: asked of sock_diag */
  DRAIN_READABLE,       /* TCP, open for reading: read to its end */
  DRAIN_PEER_CLOSED,    /* the server's end was seen closed already */
  DRAIN_UNKNOWABLE,     /* a reset, a timeout, TLS aborted first */
};
struct drain_sock {
  int fd;
  bool readable;        /* DRAIN_READABLE */
  bool unknowable;      /* it cannot tell by itself (the operator can) */
};
struct drain_report {
  uint64_t since_ns;    /* since when the oldest is kept */
  size_t blind;         /* Unix sockets the kernel cannot tell about */
  size_t unknowable;
};
extern void drain_check_kernel (void);
extern void drain_adopt (struct leg *l, int fd, enum drain_how how);
extern size_t drain_pending (struct leg *l, struct drain_report *r);
extern size_t drain_forget (struct leg *l);
extern int drain_orphans (const struct leg *l);
extern void drain_say_orphans (char *buf, size_t len, int n);
extern void drain_free (struct leg *l);

/* poller.c */
extern struct poller *poller_new (bool sched_auto);
extern void poller_free (struct poller *p);
extern int poller_start (struct poller *p);
extern void poller_stop (struct poller *p);
extern int poller_adopt (struct poller *p);
extern void poller_drive (struct poller *p);
extern int poller_release (struct poller *p);
extern void poller_use_thread (struct poller *p);
extern bool poller_try_lead (struct poller *p);
extern int poller_lead (struct poller *p, int timeout_ms);
extern void poller_end_lead (struct poller *p);
extern unsigned poller_follow (struct poller *p);
extern void poller_unfollow (struct poller *p);
extern void poller_look (struct poller *p);
extern int replicate_debug_lead;   /* -D replicate.lead=0: never lead */
extern int conn_attach (struct conn *c, struct poller *p);
extern void conn_detach (struct conn *c);
extern void conn_kick_if_needed (struct conn *c);
extern void conn_want_write (struct conn *c);
extern void conn_want_abort (struct conn *c);
extern bool conn_defer_send (const struct conn *c);
extern bool conn_nobody_drives (const struct conn *c);

/* sched.c: thread policy by queue depth (sched=auto). */
enum thread_sched { TS_UNSEEN, TS_NORMAL, TS_BATCH, TS_FOREIGN };
extern enum thread_sched sched_next (enum thread_sched cur, bool lone,
                                     unsigned depth);
extern void sched_adapt (bool lone, unsigned depth);

/* leg.c */
extern int leg_open (struct leg *l, double wait, bool *refused,
                     char *err, size_t errlen);
extern void leg_shutdown (struct leg *l);
extern void leg_close (struct leg *l);
extern int leg_attach (struct leg *l);
extern bool leg_enter (struct leg *l);
extern void leg_leave (struct leg *l);
extern struct conn *leg_pick_conn (struct leg *l);
extern void leg_set_error (struct leg *l, const char *fs, ...)
  __attribute__ ((format (printf, 2, 3)));
extern const char *leg_name (const struct leg *l, char *buf, size_t len);

/* ioreq.c */
extern uint64_t now_ns (void);
extern void ioreq_init (struct ioreq *r, struct volume *v);
extern void ioreq_submit (struct ioreq *r, struct leg *l,
                          const struct leg_cmd *cmd);
extern void ioreq_submit_on (struct ioreq *r, struct leg *l, struct conn *c,
                             const struct leg_cmd *cmd);
extern void ioreq_wait (struct ioreq *r);
extern void conn_wake_deferred (struct conn *c);
extern void ioreq_slot_done (struct ioslot *s, int err);
extern int ioreq_slot_extents (struct ioslot *s, uint64_t offset,
                               const uint32_t *entries, size_t nr_entries);
extern void ioreq_wait_fua (struct ioreq *r);
extern void ioreq_fua_flush (struct ioreq *r);
extern void ioreq_release (struct ioreq *r);
extern void ioreq_expire (struct ioreq *r, uint64_t now);
extern int ioreq_leg_error (const struct ioreq *r, unsigned li);
extern void ioreq_destroy (struct ioreq *r);
extern int leg_sync_io (struct leg *l, const struct leg_cmd *cmd);

/* member.c: membership changes. */
extern uint64_t membership_load (struct volume *v);
extern void volume_lock_init (struct volume *v);
extern bool volume_lock_held (struct volume *v);
extern void leg_init_state (struct leg *l, enum leg_state s);
extern void leg_set_state (struct volume *v, struct leg *l, enum leg_state to,
                           const char *why);
extern void membership_set_absent (struct volume *v, uint16_t absent,
                                   const char *why);
extern uint16_t membership_enter_write (struct volume *v, uint64_t *m);
extern void membership_leave_write (struct volume *v, uint16_t ticket);
extern uint16_t volume_slot_mask_of (struct volume *v, uint16_t legs);
extern void volume_change_begin (struct volume *v);
extern void volume_change_end (struct volume *v);
extern void volume_wait_changes (struct volume *v);
extern void volume_wake_monitor (struct volume *v);
/* An epoch that matches any connection of a leg (operator actions). */
#define EPOCH_ANY UINT_MAX
extern bool volume_mark_failed (struct volume *v, struct leg *l,
                                unsigned epoch, const char *reason,
                                bool *was_uptodate);
extern void volume_fail_leg (struct volume *v, struct leg *l, unsigned epoch,
                             const char *fs, ...)
  __attribute__ ((format (printf, 4, 5)));

/* io.c */
extern int io_flush_legs (struct volume *v, uint16_t legs, int *err);
extern int io_write_locked (struct volume *v, const struct leg_cmd *cmd,
                            uint16_t *counted);
extern uint64_t io_max_piece (struct volume *v);
extern void io_mark_absent (struct volume *v, uint16_t absent,
                            uint64_t offset, uint64_t count);
extern bool io_is_quorum (const struct volume *v, uint16_t legs);
extern int io_judge_write (struct volume *v, struct ioreq *r, uint16_t legs,
                           uint16_t uptodate, const char *what,
                           uint16_t *counted);
extern int io_acknowledge (struct volume *v, int err, uint16_t counted);
extern int io_choose_read_leg (struct volume *v, uint16_t candidates);
extern int io_read_failed (struct volume *v, uint16_t up, unsigned li,
                           unsigned epoch, int e);
extern int io_read_from_legs (struct volume *v, const struct leg_cmd *cmd,
                              uint16_t tried, int last, int *err);

/* start.c, volume.c */
extern int volume_alloc_bitmap (struct volume *v, unsigned slot);
extern int volume_init_rangelock (struct volume *v);

/* monitor.c */
/* What a leg that answers (again) is to the running volume. */
enum verdict { V_UPTODATE, V_INCREMENTAL, V_FULL, V_REFUSE, V_UNREACHABLE };
extern enum verdict monitor_examine_leg (struct volume *v, struct leg *l,
                                         char *err, size_t len);
extern int monitor_apply_verdict (struct volume *v, struct leg *l,
                                  enum verdict verdict);
extern size_t monitor_forget_old_connections (struct volume *v,
                                              struct leg *l);
extern int monitor_start (struct volume *v);
extern void monitor_stop (struct volume *v);
extern void leg_back_off_locked (struct leg *l);

#endif /* REPLICATE_INTERNAL_H */
