/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep: what the files of the command share.
 *
 * nbdrep.c      main: global options, the table of subcommands
 * messages.c    errors, debug messages, usage errors, --help
 * human.c       human-readable sizes, rates and durations
 * jfield.c      tolerant typed reads of JSON fields
 * client.c      the control socket: one JSON request, one JSON reply
 * table.c       aligned text tables
 * progress.c    progress of resyncs and verifies: bars and plain lines
 * status.c      nbdrep status
 * watch.c       nbdrep watch
 * commands.c    nbdrep add, remove, fail, resync, set
 * verify.c      nbdrep verify
 * metrics.c     nbdrep metrics (Prometheus text format)
 * inspect.c     nbdrep inspect: reading and decoding a leg's metadata
 * inspect-text.c, inspect-json.c   its two renderings
 * backup.c      nbdrep backup (with the controller, to a store)
 * backup-read.c, backup-send.c   its reader threads, its transfers
 * backups.c     nbdrep backups, backup-delete, backup-verify; open_store
 * tls-options.c the --tls options of inspect and backup
 * attach.c      nbdrep attach (the device's supervisor) and detach
 * nbdneg.c      a negotiated NBD connection to give to the kernel
 * nbdnl.c       the kernel's NBD device over generic netlink
 *
 * Conventions: a subcommand returns its exit status (EXIT_*).  A
 * function that fails prints its error with nbdrep_error () first and
 * returns -1 or NULL, so callers only pass the failure up.
 */

#ifndef NBDREP_H
#define NBDREP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* Exit statuses (nbdrep(1) EXIT STATUS). */
#define EXIT_OK 0
#define EXIT_ERROR 1
#define EXIT_USAGE 2
#define EXIT_UNHEALTHY 3     /* status: not healthy; verify: mismatches;
                                backup-verify: bad blocks */

/* ---- nbdrep.c ---------------------------------------------------- */

/* A subcommand: its name, what it does, and its --help text. */
struct subcommand {
  const char *name;
  int (*run) (const struct subcommand *cmd, int argc, char **argv);
  const char *synopsis;         /* arguments, after "nbdrep NAME " */
  const char *summary;          /* one line for nbdrep --help */
  const char *description;      /* more for NAME --help, or NULL */
  const char *options;          /* its own options' lines, or NULL */
};

extern const struct subcommand cmd_status, cmd_watch, cmd_add, cmd_remove,
  cmd_fail, cmd_resync, cmd_set, cmd_verify, cmd_metrics, cmd_inspect,
  cmd_backup, cmd_backups, cmd_backup_delete, cmd_backup_verify,
  cmd_attach, cmd_detach;

/* ---- messages.c -------------------------------------------------- */

extern bool debug_enabled;    /* -v: show debug messages */

/* Print "nbdrep: MESSAGE" on stderr. */
extern void nbdrep_error (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
/* Print a debug message on stderr if -v was given. */
extern void nbdrep_debug (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
/* The two nbdkit functions the engine library calls (meta.c, params.c):
 * errors go to stderr, debug messages only with -v.
 */
extern void nbdkit_error (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
extern void nbdkit_debug (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
/* Print "nbdrep CMD: MESSAGE" and the --help hint; exit EXIT_USAGE.
 * cmd NULL: a usage error of nbdrep itself.
 */
extern void usage_error (const struct subcommand *cmd, const char *fs, ...)
  __attribute__ ((format (printf, 2, 3), noreturn));
/* Print a subcommand's --help on stdout and exit EXIT_OK. */
extern void subcommand_help (const struct subcommand *cmd)
  __attribute__ ((noreturn));
/* Check the number of operands left after the options (usage error if
 * it is not between min and max).
 */
extern void need_operands (const struct subcommand *cmd, int argc,
                           char **argv, int optind_, int min, int max);
/* Parse a whole number in [min, max] in nbdkit's grammar (false if bad). */
extern bool parse_whole (const char *str, uint64_t min, uint64_t max,
                         uint64_t *r);
/* Parse a leg index operand (usage error if it is not one). */
extern unsigned parse_index (const struct subcommand *cmd, const char *what,
                             const char *str);
/* Parse a size operand with config_parse_size (usage error if bad). */
extern uint64_t parse_size_arg (const struct subcommand *cmd,
                                const char *what, const char *str);
/* Parse a positive number of seconds (usage error if bad). */
extern double parse_seconds_arg (const struct subcommand *cmd,
                                 const char *what, const char *str);

/* The long options every subcommand takes, with the terminating entry
 * (so it goes last in a subcommand's table), and their short letters.
 */
#define COMMON_LONG_OPTIONS \
  { "help", no_argument, NULL, 'h' }, \
  { "verbose", no_argument, NULL, 'v' }, \
  { NULL, 0, NULL, 0 }
#define COMMON_SHORT_OPTIONS "hv"
/* Handle an option that is not the subcommand's own: --help (exits
 * 0), --verbose, or a bad one (getopt has said what; exits 2).
 */
extern void other_option (const struct subcommand *cmd, int c);

/* ---- tls-options.c ---------------------------------------------- */

struct tls_params;

/* The --tls options of the subcommands that open a leg (inspect,
 * backup): the plugins' tls parameters, parsed by config_set_tls and
 * applied by tls_setup_handle (common/replication/transport/tls.c).  Put
 * TLS_LONG_OPTIONS in the getopt table, give every option to
 * tls_option, and add TLS_OPTIONS_HELP to the --help text.
 */
enum {
  OPT_TLS = 0x100, OPT_TLS_CERTIFICATES, OPT_TLS_VERIFY, OPT_TLS_USERNAME,
  OPT_TLS_PSK,
};
#define TLS_LONG_OPTIONS \
  { "tls", required_argument, NULL, OPT_TLS }, \
  { "tls-certificates", required_argument, NULL, OPT_TLS_CERTIFICATES }, \
  { "tls-verify", required_argument, NULL, OPT_TLS_VERIFY }, \
  { "tls-username", required_argument, NULL, OPT_TLS_USERNAME }, \
  { "tls-psk", required_argument, NULL, OPT_TLS_PSK }
#define TLS_OPTIONS_HELP \
  "  --tls=off|on|require, --tls-certificates=DIR, --tls-verify=BOOL,\n" \
  "  --tls-username=NAME, --tls-psk=FILE\n" \
  "                    TLS to the leg, as the controller's tls parameters\n" \
  "                    (the URI's own tls-* parameters win).\n"
/* If opt is a --tls option, apply it (its argument arg) to t and
 * return true; a bad value is a usage error.  False for other options.
 */
extern bool tls_option (const struct subcommand *cmd, int opt,
                        const char *arg, struct tls_params *t);

/* ---- human.c ----------------------------------------------------- */

/* Buffers returned by value, so they can be used inside printf
 * arguments: human_size (n).s
 */
struct hstr { char s[24]; };

/* 512 B, 1.5 KiB, 64.0 MiB ... (one decimal from KiB on). */
extern struct hstr human_size (uint64_t bytes);
/* A rate: 310.2 MiB/s. */
extern struct hstr human_rate (double bytes_per_second);
/* A duration: 5s, 2m05s, 1h02m, 3d04h; "?" if negative (unknown). */
extern struct hstr human_duration (double seconds);
/* A percentage of done over total with one decimal (0 when total 0). */
extern double percent (uint64_t done, uint64_t total);

/* ---- jfield.c ---------------------------------------------------- */

/* Integer field (a real is truncated); def if missing or not a number. */
extern int64_t jint (const json_t *obj, const char *key, int64_t def);
/* Non-negative integer field (bytes, counts); 0 if missing or negative. */
extern uint64_t jcount (const json_t *obj, const char *key);
/* Number field (integer or real); def if missing. */
extern double jnum (const json_t *obj, const char *key, double def);
/* String field, or NULL if missing, null or not a string. */
extern const char *jstr (const json_t *obj, const char *key);
/* Boolean field; def if missing or not a boolean. */
extern bool jbool (const json_t *obj, const char *key, bool def);
/* Object field, or NULL if missing or not an object. */
extern json_t *jobj (const json_t *obj, const char *key);
/* Array field, or NULL if missing or not an array. */
extern json_t *jarr (const json_t *obj, const char *key);

/* ---- client.c ---------------------------------------------------- */

/* A connection to a controller's control socket. */
struct ctl;

/* Connect to the control socket at path.  NULL after an error. */
extern struct ctl *ctl_open (const char *path);
extern void ctl_close (struct ctl *c);
/* Send a request (not stolen) and return its reply if it says
 * "ok": true.  NULL after an error (including "ok": false, whose
 * message is printed).
 */
extern json_t *ctl_request (struct ctl *c, const json_t *req);
/* Open, request, close. */
extern json_t *ctl_call (const char *path, const json_t *req);
/* The status reply ({"cmd":"status"}) on an open connection. */
extern json_t *ctl_status (struct ctl *c);
/* Open, ask for the status, close. */
extern json_t *ctl_get_status (const char *path);

/* ---- table.c ----------------------------------------------------- */

/* A text table: columns padded to their widest cell, the last column
 * not padded.
 */
struct table;

/* A new table; headers (ncols of them) is the first row, or NULL. */
extern struct table *table_new (size_t ncols, const char *const *headers);
/* Add a row of ncols cells (copied). */
extern void table_add_row (struct table *t, const char *const *cells);
/* Add a row of two cells: key and a formatted value. */
extern void table_add_kv (struct table *t, const char *key,
                          const char *fs, ...)
  __attribute__ ((format (printf, 3, 4)));
extern void table_print (const struct table *t, FILE *fp, const char *indent);
extern void table_free (struct table *t);

/* ---- progress.c -------------------------------------------------- */

/* One thing that makes progress: a leg's resync or a verify. */
struct progress_item {
  char kind[16];                /* "full", "incremental", "starting";
                                   "check", "repair" */
  char label[64];               /* "leg 1 resync full", "verify check" */
  uint64_t done, total;         /* bytes */
  double rate;                  /* bytes per second */
  double eta;                   /* seconds, negative if unknown */
  bool is_verify;
  uint64_t mismatched, repaired;  /* verify only */
};

#define MAX_PROGRESS_ITEMS 32

/* Fill items (at most MAX_PROGRESS_ITEMS) from a status reply: every
 * syncing leg and a running verify (only the verify if verify_only).
 * Returns how many.
 */
extern size_t progress_items (const json_t *status, bool verify_only,
                              struct progress_item *items);
/* The item of a syncing leg of a status reply. */
extern void progress_leg_item (struct progress_item *it, const json_t *leg);
/* One line a script can parse, with a newline. */
extern void progress_print_line (FILE *fp, const struct progress_item *it);
/* A line with a bar for a terminal (no newline) into buf. */
extern void progress_format_bar (const struct progress_item *it,
                                 char *buf, size_t len);

/* The numbers of an item in a few words (no label): "42% 1.2 GiB/2.9 GiB
 * 310.2 MiB/s ETA 5s".
 */
extern void progress_format_compact (const struct progress_item *it,
                                     char *buf, size_t len);

/* Lines drawn on a terminal, redrawn in place by the next draw. */
struct screen {
  unsigned lines;
};
/* Replace what the screen showed last with these lines. */
extern void screen_draw (struct screen *scr, FILE *fp,
                         char lines[][256], size_t n);

/* Sleep for a number of seconds (interrupted sleeps resume). */
extern void sleep_seconds (double seconds);

/* ---- backups.c --------------------------------------------------- */

struct bs_store;
/* Put the store options (KEY=VALUE) among the operands from first on
 * after the others; returns the number of the others.
 */
extern int partition_operands (int argc, char **argv, int first);
/* Open and check the store TARGET with nopts KEY=VALUE store options.
 * NULL after an error.
 */
extern struct bs_store *open_store (const char *target, int nopts,
                                    char **opts);

#endif /* NBDREP_H */
