/* SPDX-License-Identifier: BSD-3-Clause */
/* Choosing the newest legs at start (pure, unit tested; DESIGN.md
 * section 6).  See election.c for the rules.
 */

#ifndef REPLICATE_ELECTION_H
#define REPLICATE_ELECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta.h"
#include "params.h"

/* What start-up found on one leg. */
struct elect_leg {
  bool reachable;
  enum meta_status status;      /* of its superblock */
  bool all_zero;                /* no valid superblock: reads as zeroes */
  struct superblock sb;         /* status == META_OK */
};

struct elect_input {
  size_t nr_legs;
  struct elect_leg legs[MAX_LEGS];
  enum init_mode init;
  bool force;
  int prefer;                   /* -1 = none */
  bool final;                   /* no more waiting: decide now */
  uint16_t async;               /* asynchronous legs (async=URI) */
};

enum elect_outcome {
  ELECT_CREATE,                 /* a new volume */
  ELECT_EXISTING,               /* an existing volume: start it */
  ELECT_WAIT,                   /* wait for more legs, then ask again */
  ELECT_REFUSE,                 /* do not start: see message */
};

enum elect_role {
  ROLE_UPTODATE,                /* holds the newest data */
  ROLE_INCREMENTAL,             /* older: copy what its bitmap says */
  ROLE_FULL,                    /* copy everything */
  ROLE_MISSING,                 /* unreachable: failed, reconnect later */
};

/* How a new volume is made equal. */
enum elect_create {
  CREATE_CLEAN,                 /* all read as zeroes, or assume-clean */
  CREATE_ZERO,                  /* write zeroes over every leg */
  CREATE_COPY,                  /* leg 0 is the source */
};

struct elect_result {
  enum elect_outcome outcome;
  enum elect_role role[MAX_LEGS];
  enum elect_create create;
  int reference;                /* a winner: its superblock is the volume's */
  bool forced;                  /* force=true was needed */
  bool split_brain;             /* refused for a split brain */
  int promoted;                 /* an asynchronous leg prefer= and force=
                                   made synchronous, or -1 */
  char message[1024];           /* why (refuse, wait) or what (notes) */
};

extern void elect (const struct elect_input *in, struct elect_result *out);

#endif /* REPLICATE_ELECTION_H */
