/* SPDX-License-Identifier: BSD-3-Clause */
/* Parameters of a volume: parsing and validation (pure, unit tested).
 *
 * config_set takes one key=value at a time, exactly as nbdkit hands
 * them over; config_check cross-checks them once all are in.  Every
 * error is a message naming the parameter (or the leg) written to the
 * caller's buffer, so the glue can pass it to nbdkit_error and the
 * unit tests can compare it.
 */

#ifndef REPLICATE_PARAMS_H
#define REPLICATE_PARAMS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* Hard limit on legs (and metadata slots): leg sets are 16-bit masks. */
#define MAX_LEGS 16

enum read_policy { READ_LEAST_BUSY, READ_ROUND_ROBIN, READ_FIRST };
enum init_mode { INIT_NONE, INIT_COPY, INIT_ZERO, INIT_ASSUME_CLEAN };
enum metadata_mode { METADATA_INTERNAL, METADATA_NONE };
enum sched_mode { SCHED_MODE_AUTO, SCHED_MODE_KEEP };
/* What a write does when an asynchronous leg's buffer is full. */
enum async_full { ASYNC_FULL_PULL_AHEAD, ASYNC_FULL_BLOCK };

/* TLS to the NBD legs, named as nbdkit-nbd-plugin's parameters (tls.c
 * applies them to a libnbd handle).  The modes are libnbd's
 * LIBNBD_TLS_DISABLE, _ALLOW and _REQUIRE; TLS_MODE_UNSET becomes on
 * if another tls key is given, else off.
 */
enum tls_mode { TLS_MODE_UNSET = -1, TLS_MODE_OFF, TLS_MODE_ON,
                TLS_MODE_REQUIRE };

struct tls_params {
  enum tls_mode mode;           /* tls= */
  const char *certificates;     /* tls-certificates=DIR or NULL */
  int verify;                   /* tls-verify=: 1, 0, or -1 (libnbd's: on) */
  const char *username;         /* tls-username= or NULL */
  const char *psk;              /* tls-psk=FILE or NULL */
};

struct config {
  const char *uris[MAX_LEGS];   /* NBD legs in command-line order */
  size_t nr_uris;
  bool local_leg0;              /* filter shape: leg 0 is the plugin below */
  uint16_t async_legs;          /* legs given as async=URI (by index) */
  uint64_t async_buffer;        /* bytes waiting per asynchronous leg */
  enum async_full async_full;

  unsigned connections;         /* libnbd handles per NBD leg */
  unsigned quorum;              /* 0 = majority, resolved by config_check */
  bool quorum_majority;
  bool quorum_given;            /* quorum= was on the command line */
  enum read_policy read;
  double timeout;               /* seconds */
  const char *control;          /* control socket path or NULL */

  uint32_t chunk;               /* bitmap granularity (bytes) */
  unsigned max_legs;            /* metadata slots */
  uint32_t al_extent;           /* activity-log extent size (bytes) */
  unsigned al_extents;          /* activity-log capacity (extents) */
  uint64_t resync_rate;         /* bytes/s, 0 = unlimited */
  uint64_t resync_min_rate;     /* bytes/s kept under client load */
  uint64_t verify_rate;         /* bytes/s a verify reads at most */

  enum init_mode init;
  double wait;                  /* seconds to wait for legs at start */
  bool force;
  int prefer;                   /* leg index, -1 = none */
  enum metadata_mode metadata;
  enum sched_mode sched;        /* thread policy by queue depth (sched.c) */

  int ublk_id;                  /* -1 = no ublk frontend */
  unsigned ublk_queues;
  unsigned ublk_depth;
  bool ublk_keep;               /* a clean stop keeps the device */

  struct tls_params tls;        /* for every NBD leg (a URI may override) */

  /* Which keys were given, to reject repeats of single-valued ones. */
  uint32_t seen;
};

/* Fill in the defaults. */
extern void config_init (struct config *c, bool local_leg0);

/* Apply key=value.  Returns 0, or -1 with a message in err, or 1 if
 * the key is not ours (the filter passes those on to the plugin).
 * Strings are kept by pointer: they must outlive the config (nbdkit's
 * do).
 */
extern int config_set (struct config *c, const char *key, const char *value,
                       char *err, size_t errlen);

/* The defaults of the TLS parameters (no TLS). */
extern void config_tls_init (struct tls_params *t);

/* Apply one TLS key (tls, tls-certificates, tls-verify, tls-username,
 * tls-psk) to t, as config_set does (nbdrep's --tls options use it
 * alone).  Returns 0, -1 with a message, or 1 if key is not one of
 * them.
 */
extern int config_set_tls (struct tls_params *t, const char *key,
                           const char *value, char *err, size_t errlen);

/* Cross-check after the last key.  Returns 0 or -1 with a message. */
extern int config_check (struct config *c, char *err, size_t errlen);

/* Total number of legs (the local one included). */
extern size_t config_nr_legs (const struct config *c);

/* Number of synchronous legs (async=URI legs not counted). */
extern size_t config_nr_sync_legs (const struct config *c);

/* Check that an NBD URI is well formed enough to be a leg.  Returns 0
 * or -1 with a message saying what is wrong.
 */
extern int config_check_uri (const char *uri, char *err, size_t errlen);

/* Does a URI name its own TLS credentials with libnbd's
 * tls-certificates= or tls-psk-file= query parameters?
 */
extern bool config_uri_names_tls_files (const char *uri);

/* Do two URIs name the same leg (same server and export)? */
extern bool config_same_leg (const char *a, const char *b);

/* The socket path of a Unix-socket URI (nbd+unix, nbds+unix), decoded,
 * into path (len bytes).  Returns 0, or -1 if the URI is not one.
 */
extern int config_unix_socket (const char *uri, char *path, size_t len);

/* Parse a size as nbdkit does (512, 64K, 4M, 1G ... 7E, 8s; see
 * common/utils/grammar.h).  Returns 0 or -1.
 */
extern int config_parse_size (const char *str, uint64_t *r);

/* Parse whole numbers, sizes and booleans with these (nbdkit's own,
 * nbdkit_parse_uint64_t and the others wrapped, in the plugin and
 * filter) instead of common/utils/grammar.c.  number and size return 0
 * or -1, boolean 1, 0 or -1.
 */
extern void config_use_parsers (int (*number) (const char *what,
                                               const char *str, uint64_t *r),
                                int (*size) (const char *str, uint64_t *r),
                                int (*boolean) (const char *str));

/* Parse seconds (non-negative, decimals allowed).  Returns 0 or -1. */
extern int config_parse_seconds (const char *str, double *r);

/* Names for status and messages. */
extern const char *read_policy_name (enum read_policy p);
extern const char *init_mode_name (enum init_mode m);
extern const char *async_full_name (enum async_full f);

#define CONFIG_HELP \
  "replica=URI                NBD URI of a leg (repeatable; bare URIs work).\n" \
  "async=URI                  NBD URI of an asynchronous leg (repeatable).\n" \
  "async-buffer=SIZE          Data waiting per asynchronous leg (default 64M).\n" \
  "async-full=pull-ahead|block  When that buffer is full (default pull-ahead).\n" \
  "connections=N              libnbd connections per NBD leg (default 4).\n" \
  "quorum=N|majority          Up-to-date legs needed to accept writes (default 1).\n" \
  "read=least-busy|round-robin|first  Which leg serves reads.\n" \
  "timeout=SECS               Per-request leg timeout (default 10).\n" \
  "control=PATH               Control socket for nbdrep.\n" \
  "chunk=SIZE                 Out-of-sync bitmap granularity (default 64K).\n" \
  "max-legs=N                 Metadata slots, fixed at creation (default 8).\n" \
  "al-extent=SIZE             Activity-log extent size (default 4M).\n" \
  "al-extents=N               Activity-log capacity (default 1024).\n" \
  "resync-rate=SIZE           Resync bandwidth cap per second (default none).\n" \
  "resync-min-rate=SIZE       Resync floor under client load (default 4M).\n" \
  "verify-rate=SIZE           Verify pace cap per second (default 64M).\n" \
  "init=copy|zero|assume-clean  How to create a volume over legs holding data.\n" \
  "wait=SECS                  How long to wait for legs at start (default 10).\n" \
  "force=BOOL                 Start without enough members of the newest generation.\n" \
  "prefer=INDEX               Resolve split brain in favour of this leg.\n" \
  "metadata=internal|none     On-disk metadata at the end of each leg (default).\n" \
  "ublk=ID                    Also serve /dev/ublkbID from the engine.\n" \
  "ublk-queues=N, ublk-depth=N  ublk queues and depth.\n" \
  "ublk-keep=BOOL             A clean stop keeps /dev/ublkbID for the next controller.\n" \
  "sched=auto|keep            Threads at queue depth run SCHED_BATCH (default auto).\n" \
  "tls=off|on|require         TLS to the legs (default off; on if another tls key is given).\n" \
  "tls-certificates=DIR       X.509 CA and client certificate for the legs.\n" \
  "tls-verify=BOOL            Check the legs' certificates (default true).\n" \
  "tls-username=NAME          User name for TLS (default: the login name).\n" \
  "tls-psk=FILE               Pre-shared keys for TLS to the legs."

#endif /* REPLICATE_PARAMS_H */
