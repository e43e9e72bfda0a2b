/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the start-up election (election.c, DESIGN.md section 6).
 *
 * Every row of the table below describes what start-up found on each
 * leg (unreachable, blank reading as zeroes, blank holding data, a
 * damaged superblock, or a superblock) and the parameters (init=,
 * force=, prefer=, whether waiting is over), and the exact result
 * expected: outcome, the role of every leg, the reference leg, how a
 * new volume is made, the forced and split-brain flags, and pieces of
 * the message (and pieces it must not contain).  There is at least one
 * row for every rule of election.c's design note.
 *
 * Superblocks are built from a short description (struct leg_spec) by
 * the helpers sb_new, sb_set_line, sb_set_slot and sb_set_inconsistent:
 *
 *   - generations lie on a "main line": counter k has id MAIN_ID (k);
 *     a leg that diverged after counter b (branch = b) holds, for every
 *     counter above b, the id BRANCH_ID (b, k), so its pairs are in no
 *     main-line history (and the other way round);
 *   - identities are slots: the leg that owns slot s has the leg UUID
 *     LEG_TAG + s, and a superblock's slot table gives slot s to that
 *     UUID (or to a stranger's, for the slots in `foreign`); where the
 *     leg sits on the command line is independent (`slot`), as in the
 *     metadata, which matches by leg UUID and never by position.
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "election.h"
#include "meta.h"
#include "random.h"
#include "unit.h"

#define NELEMS(a) (sizeof (a) / sizeof (a)[0])

#define VOL_A 0x0a0a0a0a0a0a0a0aull     /* the volume */
#define VOL_B 0x0b0b0b0b0b0b0b0bull     /* another volume */
#define LEG_TAG 0x1e90000000000000ull   /* + slot: the leg owning slot s */
#define STRANGER 0x5700000000000000ull  /* + slot: a leg not on the line */
#define TEST_MAX_LEGS 4

/* Generation ids: the main line and the branches off it.  The high 32
 * bits are what messages print (gen_str), so they are fixed.
 */
#define MAIN_ID(k) (0xa0a0000000000000ull | (uint64_t) (k))
#define BRANCH_ID(b, k) \
  (0xb0b0000000000000ull | ((uint64_t) (b) << 16) | (uint64_t) (k))

/* What start-up found on one leg. */
enum kind {
  K_NONE = 0,           /* not on the command line */
  K_SB,                 /* a valid superblock */
  K_ZERO,               /* blank, reads as zeroes */
  K_DATA,               /* blank, holds data */
  K_CORRUPT,            /* a damaged superblock (and so data) */
  K_UNREACHABLE,        /* does not answer */
};

/* A leg's superblock, described. */
struct leg_spec {
  enum kind kind;
  uint64_t vol;         /* volume tag, 0 = VOL_A */
  unsigned slot;        /* the slot (identity) of this leg */
  uint64_t counter;     /* generation counter */
  uint64_t branch;      /* 0: main line; b: diverged after counter b */
  bool inconsistent;
  unsigned quorum;      /* 0 = 1 */
  uint16_t members;     /* slots ASSIGNED | MEMBER in its slot table */
  uint16_t assigned;    /* slots only ASSIGNED */
  uint16_t foreign;     /* of those, slots assigned to a stranger */
  uint64_t bm[TEST_MAX_LEGS];   /* bm_gen counters (main line), 0 = none */
};

/* prefer= of a row. */
struct prefer { bool set; int leg; };
#define PREFER(i) { true, (i) }

/* Roles are written as a string, one letter a leg: U uptodate,
 * I incremental, F full, M missing.  NULL: not checked (refusals and
 * waits leave the roles undefined).
 */
struct row {
  const char *name;
  size_t nr_legs;
  struct leg_spec legs[TEST_MAX_LEGS];
  enum init_mode init;
  bool force;
  struct prefer prefer;
  bool final;
  uint16_t async;               /* asynchronous legs (rule 7) */

  enum elect_outcome outcome;
  const char *roles;
  int reference;                /* checked for ELECT_EXISTING / CREATE */
  enum elect_create create;     /* checked for ELECT_CREATE */
  bool forced;
  bool split_brain;
  const char *has[6];           /* substrings of the message */
  const char *lacks[2];         /* substrings the message must not have */
};

/* Shorthands for the legs of the rows. */
#define SB(slot_, counter_, ...) \
  { .kind = K_SB, .slot = (slot_), .counter = (counter_), __VA_ARGS__ }
#define ZERO { .kind = K_ZERO }
#define DATA { .kind = K_DATA }
#define CORRUPT { .kind = K_CORRUPT }
#define GONE { .kind = K_UNREACHABLE }
#define ALL3 .members = 0x7
/* A split brain at counter 7: legs 0 and 2 went on without leg 1 from
 * generation 6, and leg 1 went on alone (force=true) from the same one.
 */
#define MAIN7 SB (0, 7, .members = 0x5, .assigned = 0x2, .bm = { [1] = 6 })
#define MAIN7_2 SB (2, 7, .members = 0x5, .assigned = 0x2, .bm = { [1] = 6 })
#define BRANCH7 SB (1, 7, .branch = 6, .members = 0x2, .assigned = 0x5, \
                    .bm = { 6, 0, 6 })

/* The rows.  Unless a row says otherwise: quorum 1, a volume of up to
 * four slots, every leg at its own slot (leg i = slot i).
 */
static const struct row rows[] = {
  /* --- Rule 2: a new volume. */
  { "all blank, all zero: created clean", 3, { ZERO, ZERO, ZERO },
    .outcome = ELECT_CREATE, .roles = "UUU", .reference = -1,
    .create = CREATE_CLEAN },
  { "one blank leg, zero: created clean", 1, { ZERO },
    .outcome = ELECT_CREATE, .roles = "U", .reference = -1,
    .create = CREATE_CLEAN },
  { "blank, leg 1 holds data: refused naming it", 3, { ZERO, DATA, ZERO },
    .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "a new volume, but leg(s) 1 hold data",
             "init=copy", "init=zero", "init=assume-clean" },
    .lacks = { "damaged" } },
  { "blank, legs 0 and 2 hold data: both named", 3, { DATA, ZERO, DATA },
    .outcome = ELECT_REFUSE,
    .has = { "leg(s) 0, 2 hold data" } },
  { "blank with data, force does not create", 2, { DATA, DATA },
    .force = true, .final = true,
    .outcome = ELECT_REFUSE, .has = { "leg(s) 0, 1 hold data" } },
  { "a damaged superblock is named as such", 2, { CORRUPT, ZERO },
    .outcome = ELECT_REFUSE,
    .has = { "leg(s) 0 hold data", "leg(s) 0 hold a damaged superblock" } },
  { "init=copy: leg 0 the source, the others full", 3, { ZERO, DATA, DATA },
    .init = INIT_COPY,
    .outcome = ELECT_CREATE, .roles = "UFF", .reference = -1,
    .create = CREATE_COPY },
  { "init=copy over all-zero legs still copies", 2, { ZERO, ZERO },
    .init = INIT_COPY,
    .outcome = ELECT_CREATE, .roles = "UF", .reference = -1,
    .create = CREATE_COPY },
  { "init=zero", 3, { DATA, DATA, ZERO },
    .init = INIT_ZERO,
    .outcome = ELECT_CREATE, .roles = "UUU", .reference = -1,
    .create = CREATE_ZERO },
  { "init=assume-clean", 3, { DATA, CORRUPT, DATA },
    .init = INIT_ASSUME_CLEAN,
    .outcome = ELECT_CREATE, .roles = "UUU", .reference = -1,
    .create = CREATE_CLEAN },
  { "blank, leg 1 unreachable: wait", 3, { ZERO, GONE, ZERO },
    .outcome = ELECT_WAIT,
    .has = { "leg(s) 1 cannot be reached", "a new volume needs every leg" } },
  { "blank, leg 1 unreachable, final: refused", 3, { ZERO, GONE, ZERO },
    .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "leg(s) 1 cannot be reached" } },
  { "blank, unreachable: not even init=copy with force", 3,
    { ZERO, ZERO, GONE },
    .init = INIT_COPY, .force = true, .final = true,
    .outcome = ELECT_REFUSE, .has = { "leg(s) 2 cannot be reached" } },

  /* --- Rule 1: one volume. */
  { "legs of two volumes: refused naming the stranger", 3,
    { SB (0, 7, ALL3), SB (1, 3, .vol = VOL_B, ALL3), SB (2, 7, ALL3) },
    .outcome = ELECT_REFUSE,
    .has = { "legs belong to different volumes",
             "leg 0 is in volume 0a0a0a0a-", "leg 1 is in volume 0b0b0b0b-",
             "leg 2 is in volume 0a0a0a0a-", "never written to" } },
  { "another volume: not even with force and prefer", 2,
    { SB (0, 9, .vol = VOL_B, ALL3), SB (1, 7, ALL3) },
    .force = true, .prefer = PREFER (1), .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "leg 0 is in volume 0b0b0b0b-", "leg 1 is in volume 0a0a0a0a-" } },
  { "one leg reached by two URIs: refused naming both", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), SB (0, 7, ALL3) },
    .force = true, .prefer = PREFER (0), .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "leg 0 and leg 2 carry the same leg identity (leg uuid "
             "1e900000-0000-0000-1e90-000000000000)" } },
  { "a blank leg next to a valid one joins its volume", 2,
    { ZERO, SB (0, 4, .members = 0x1) },
    .outcome = ELECT_EXISTING, .roles = "FU", .reference = 1 },

  /* --- Rule 3: the winners hold the highest counter. */
  { "all at one generation: all uptodate", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), SB (2, 7, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUU", .reference = 0,
    .lacks = { "split", "force" } },
  { "slots are matched by UUID, not position", 3,
    { SB (2, 7, .members = 0x5, .assigned = 0x2, .bm = { [1] = 5 }),
      SB (1, 5, ALL3),
      SB (0, 7, .members = 0x5, .assigned = 0x2, .bm = { [1] = 5 }) },
    .outcome = ELECT_EXISTING, .roles = "UIU", .reference = 0 },
  { "lower counter in history, bm_gen differs: full", 3,
    { SB (0, 5, ALL3),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { [0] = 4 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { [0] = 4 }) },
    .outcome = ELECT_EXISTING, .roles = "FUU", .reference = 1 },
  { "gen == bm_gen of its own slot: incremental", 3,
    { SB (0, 5, ALL3),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { [0] = 5 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { [0] = 5 }) },
    .outcome = ELECT_EXISTING, .roles = "IUU", .reference = 1 },
  { "prefer= without a split brain is ignored (stale incremental)", 3,
    { SB (0, 5, ALL3),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { [0] = 5 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { [0] = 5 }) },
    .prefer = PREFER (0),
    .outcome = ELECT_EXISTING, .roles = "IUU", .reference = 1,
    .lacks = { "prefer" } },
  { "prefer= without a split brain is ignored (stale full)", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 6 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 6 }),
      SB (2, 3, ALL3) },
    .prefer = PREFER (2),
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0,
    .lacks = { "prefer" } },

  /* --- Rule 3: split brain at the highest counter. */
  { "equal counters, different ids: split brain", 3,
    { MAIN7, BRANCH7, MAIN7_2 },
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "split brain: leg 0 (generation 7:a0a00000) and leg 1 "
             "(generation 7:b0b00000) changed independently",
             "prefer=INDEX" } },
  { "equal counters: force does not resolve it", 2,
    { SB (0, 7, .members = 0x1, .assigned = 0x2, .bm = { 0, 6 }),
      SB (1, 7, .branch = 6, .members = 0x2, .assigned = 0x1,
          .bm = { 6, 0 }) },
    .force = true, .final = true,
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "split brain: leg 0", "and leg 1" } },
  { "equal counters, prefer=1 resolves: leg 1 wins", 3,
    { MAIN7, BRANCH7, MAIN7_2 },
    .prefer = PREFER (1),
    .outcome = ELECT_EXISTING, .roles = "FUF", .reference = 1,
    .has = { "prefer=1 resolved a split brain: leg 1 wins" } },
  { "equal counters, prefer=2 resolves: the main line wins", 3,
    { MAIN7, BRANCH7, MAIN7_2 },
    .prefer = PREFER (2),
    .outcome = ELECT_EXISTING, .roles = "UFU", .reference = 2,
    .has = { "prefer=2 resolved a split brain: leg 2 wins" } },
  { "split brain, prefer names an unreachable leg", 3,
    { SB (0, 7, ALL3), SB (1, 7, .branch = 6, .members = 0x2), GONE },
    .prefer = PREFER (2), .final = true,
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "prefer=2 does not name a reachable, consistent leg",
             "(the split brain: split brain: leg 0" } },
  { "the diverged side has the higher counter: still split brain", 3,
    { MAIN7, SB (1, 9, .branch = 6, .members = 0x2, .assigned = 0x5,
                 .bm = { 6, 0, 6 }), MAIN7_2 },
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "split brain: leg 0 (generation 7:a0a00000) is not an "
             "ancestor of leg 1 (generation 9:b0b00000)" } },
  { "lower counter not in the winners' history: split brain", 3,
    { SB (0, 5, .branch = 3, .members = 0x1, .assigned = 0x6,
          .bm = { 0, 3, 3 }),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { 3 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { 3 }) },
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "split brain: leg 0 (generation 5:b0b00000) is not an "
             "ancestor of leg 1 (generation 7:a0a00000)" } },
  { "lower counter not in history, prefer=1: rebuilt fully", 3,
    { SB (0, 5, .branch = 3, .members = 0x1, .assigned = 0x6,
          .bm = { 0, 3, 3 }),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { 3 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { 3 }) },
    .prefer = PREFER (1),
    .outcome = ELECT_EXISTING, .roles = "FUU", .reference = 1,
    .has = { "prefer=1 resolved" } },
  { "lower counter not in history, prefer=0: its branch wins", 3,
    { SB (0, 5, .branch = 3, .members = 0x1, .assigned = 0x6,
          .bm = { 0, 3, 3 }),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { 3 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { 3 }) },
    .prefer = PREFER (0),
    .outcome = ELECT_EXISTING, .roles = "UFF", .reference = 0 },

  /* --- Rule 4: a member that missed only the last bump. */
  { "member missed the last bump: a winner", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), SB (2, 6, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUU", .reference = 0 },
  { "missed the last bump, not a member: incremental", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 6 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 6 }),
      SB (2, 6, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUI", .reference = 0 },
  { "missed the last bump but inconsistent: full (quorum 2)", 3,
    { SB (0, 7, ALL3, .quorum = 2), SB (1, 7, ALL3, .quorum = 2),
      SB (2, 6, .inconsistent = true) },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },
  { "member two bumps behind: full (quorum 2)", 3,
    { SB (0, 7, ALL3, .quorum = 2), SB (1, 7, ALL3, .quorum = 2),
      SB (2, 5, ALL3, .quorum = 2) },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },

  /* --- Rule 7: asynchronous legs. */
  { "async leg at its bm_gen: incremental", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 5, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }) },
    .async = 0x4,
    .outcome = ELECT_EXISTING, .roles = "UUI", .reference = 0 },
  { "async leg at the winners' generation: never a winner", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }) },
    .async = 0x4,
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },
  { "async leg at the top counter alone: still not a winner", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 9, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }) },
    .async = 0x4,
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0,
    .lacks = { "split" } },
  { "async leg unreachable: not waited for", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4),
      SB (1, 7, .members = 0x3, .assigned = 0x4), GONE },
    .async = 0x4,
    .outcome = ELECT_EXISTING, .roles = "UUM", .reference = 0 },
  { "async leg far behind, unknown to the winners: full", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 2, .branch = 1, .members = 0x3, .assigned = 0x4) },
    .async = 0x4,
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0,
    .lacks = { "split" } },
  { "only async legs hold the volume: wait for the others", 3,
    { GONE, GONE, SB (2, 5, .members = 0x3, .assigned = 0x4,
                      .bm = { [2] = 5 }) },
    .async = 0x4,
    .outcome = ELECT_WAIT, .has = { "waiting for legs: 0, 1" } },
  { "only async legs hold the volume, final: refused naming them", 3,
    { GONE, GONE, SB (2, 5, .members = 0x3, .assigned = 0x4,
                      .bm = { [2] = 5 }) },
    .async = 0x4, .final = true, .force = true,
    .outcome = ELECT_REFUSE,
    .has = { "no synchronous leg holds the volume",
             "only asynchronous leg(s) 2 can be reached",
             "prefer=INDEX force=true" } },
  { "a failover: prefer=2 force=true promotes the async leg", 3,
    { GONE, GONE, SB (2, 5, .members = 0x3, .assigned = 0x4,
                      .bm = { [2] = 5 }) },
    .async = 0x4, .final = true, .force = true, .prefer = PREFER (2),
    .outcome = ELECT_EXISTING, .roles = "MMU", .reference = 2,
    .forced = true },
  { "an inconsistent async leg is never promoted", 3,
    { GONE, GONE, SB (2, 5, .members = 0x3, .assigned = 0x4,
                      .bm = { [2] = 5 }, .inconsistent = true) },
    .async = 0x4, .final = true, .force = true, .prefer = PREFER (2),
    .outcome = ELECT_REFUSE, .has = { "no consistent leg" } },
  { "a once promoted async leg the winners do not know: split brain", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 7, .branch = 5, .members = 0x4, .assigned = 0x3) },
    .async = 0x4,
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "split brain: asynchronous leg 2 (generation 7:b0b00000)",
             "prefer=INDEX" } },
  { "the same, prefer=0: the async leg is rebuilt", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 7, .branch = 5, .members = 0x4, .assigned = 0x3) },
    .async = 0x4, .prefer = PREFER (0),
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },
  { "all blank with an async leg: created, the async leg joins", 3,
    { ZERO, ZERO, ZERO },
    .async = 0x4,
    .outcome = ELECT_CREATE, .roles = "UUF", .reference = -1,
    .create = CREATE_CLEAN },
  { "init=copy from an async leg 0: refused", 2,
    { DATA, ZERO },
    .async = 0x1, .init = INIT_COPY,
    .outcome = ELECT_REFUSE, .has = { "leg 0 is asynchronous" } },

  /* --- Rule 5: full resyncs. */
  { "inconsistent, gen == bm_gen: the resync resumes", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 5 }),
      SB (2, 5, .inconsistent = true) },
    .outcome = ELECT_EXISTING, .roles = "UUI", .reference = 0 },
  { "inconsistent with an unknown gen: full, no split brain", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 4 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 4 }),
      SB (2, 5, .branch = 3, .inconsistent = true) },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0,
    .lacks = { "split" } },
  { "blank leg reading as zeroes joins: full", 3,
    { SB (0, 7, .members = 0x3), SB (1, 7, .members = 0x3), ZERO },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },
  { "blank leg holding data joins: full", 3,
    { SB (0, 7, .members = 0x3), DATA, SB (1, 7, .members = 0x3) },
    .outcome = ELECT_EXISTING, .roles = "UFU", .reference = 0 },
  { "damaged superblock in a volume: full", 3,
    { SB (0, 7, .members = 0x3), SB (1, 7, .members = 0x3), CORRUPT },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },
  { "its slot belongs to another leg now: full", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .foreign = 0x4,
          .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .foreign = 0x4,
          .bm = { [2] = 5 }),
      SB (2, 5, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },
  { "its slot was freed (removed): full", 3,
    { SB (0, 7, .members = 0x3, .bm = { [2] = 5 }),
      SB (1, 7, .members = 0x3, .bm = { [2] = 5 }),
      SB (2, 5, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0 },

  /* --- Rule 3: an inconsistent leg never wins. */
  { "inconsistent with the highest counter does not win", 3,
    { SB (0, 9, ALL3, .inconsistent = true),
      SB (1, 7, .members = 0x6, .assigned = 0x1, .bm = { 5 }),
      SB (2, 7, .members = 0x6, .assigned = 0x1, .bm = { 5 }) },
    .outcome = ELECT_EXISTING, .roles = "FUU", .reference = 1 },
  { "only an inconsistent leg: refused even with force", 2,
    { SB (0, 7, ALL3, .inconsistent = true), GONE },
    .force = true, .final = true,
    .outcome = ELECT_REFUSE, .has = { "no consistent leg" } },
  { "inconsistent and highest, force with the others gone", 3,
    { SB (0, 9, ALL3, .inconsistent = true), SB (1, 7, ALL3), GONE },
    .force = true, .final = true,
    .outcome = ELECT_EXISTING, .roles = "FUM", .reference = 1,
    .forced = true },
  { "split brain, prefer names an inconsistent leg: refused", 3,
    { SB (0, 9, ALL3, .inconsistent = true), SB (1, 7, ALL3),
      SB (2, 7, .branch = 6, ALL3) },
    .force = true, .prefer = PREFER (0), .final = true,
    .outcome = ELECT_REFUSE, .split_brain = true,
    .has = { "prefer=0 does not name a reachable, consistent leg",
             "(the split brain: " } },

  /* --- Rule 6: enough members of the winning generation. */
  { "quorum 1, a member unreachable: wait", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), GONE },
    .outcome = ELECT_WAIT, .has = { "waiting for legs: 2" } },
  { "quorum 1, a member unreachable, force: still waits first", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), GONE },
    .force = true,
    .outcome = ELECT_WAIT, .has = { "waiting for legs: 2" } },
  { "quorum 1, a member unreachable, final: refused naming it", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), GONE },
    .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "only 2 of the 3 members of generation 7 are reachable",
             "(quorum 1 needs 3)",
             "slot 2 (leg uuid 1e900000-0000-0002-",
             "unreachable: leg(s) 2.  Start anyway with force=true" } },
  { "quorum 1, a member's URI answers blank: refused naming it", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), ZERO },
    .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "only 2 of the 3 members of generation 7 are reachable",
             "slot 2 (leg uuid 1e900000-0000-0002-",
             "reached with no valid superblock (blank or damaged: the disk "
             "behind its URI replaced?): leg(s) 2.  Start anyway" },
    .lacks = { "unreachable: leg(s)" } },
  { "quorum 1, a member unreachable, final, force: starts", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), GONE },
    .force = true, .final = true,
    .outcome = ELECT_EXISTING, .roles = "UUM", .reference = 0,
    .forced = true,
    .has = { "force=true: starting with 2 of the 3 members of "
             "generation 7 (3 needed)" } },
  { "quorum 1, a reachable member holds an older generation", 3,
    { SB (0, 7, ALL3), SB (1, 7, ALL3), SB (2, 5, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUF", .reference = 0,
    .lacks = { "force" } },
  { "quorum 1, crash before the resynced leg took the last bump", 3,
    { SB (0, 9, ALL3, .bm = { [2] = 7 }), SB (1, 9, ALL3, .bm = { [2] = 7 }),
      SB (2, 7, .inconsistent = true) },
    .outcome = ELECT_EXISTING, .roles = "UUI", .reference = 0,
    .lacks = { "force" } },
  { "quorum 1, an unreachable non-member does not matter", 3,
    { SB (0, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 6 }),
      SB (1, 7, .members = 0x3, .assigned = 0x4, .bm = { [2] = 6 }),
      GONE },
    .outcome = ELECT_EXISTING, .roles = "UUM", .reference = 0,
    .lacks = { "force" } },
  { "quorum 2 of 3, one missing: starts without waiting", 3,
    { SB (0, 7, ALL3, .quorum = 2), GONE, SB (2, 7, ALL3, .quorum = 2) },
    .outcome = ELECT_EXISTING, .roles = "UMU", .reference = 0,
    .lacks = { "force" } },
  { "quorum 2 of 3, two missing: wait", 3,
    { GONE, SB (1, 7, ALL3, .quorum = 2), GONE },
    .outcome = ELECT_WAIT, .has = { "waiting for legs: 0, 2" } },
  { "quorum 2 of 3, two missing, final: refused", 3,
    { GONE, SB (1, 7, ALL3, .quorum = 2), GONE },
    .final = true,
    .outcome = ELECT_REFUSE,
    .has = { "only 1 of the 3 members of generation 7",
             "(quorum 2 needs 2)", "slot 0 (leg uuid", "slot 2 (leg uuid" } },
  { "quorum 2 of 3, two missing, final, force", 3,
    { GONE, SB (1, 7, ALL3, .quorum = 2), GONE },
    .force = true, .final = true,
    .outcome = ELECT_EXISTING, .roles = "MUM", .reference = 1,
    .forced = true, .has = { "force=true: starting with 1 of the 3" } },
  { "quorum 2 of 2, one missing: starts", 2,
    { SB (0, 7, .members = 0x3, .quorum = 2), GONE },
    .outcome = ELECT_EXISTING, .roles = "UM", .reference = 0 },
  { "quorum 3 of 3, two missing: starts", 3,
    { GONE, GONE, SB (2, 7, ALL3, .quorum = 3) },
    .outcome = ELECT_EXISTING, .roles = "MMU", .reference = 2 },
  { "quorum 3, one member left (M < Q): starts, the others resync", 3,
    { SB (0, 9, .members = 0x1, .assigned = 0x6, .quorum = 3,
          .bm = { 0, 7, 8 }),
      SB (1, 7, ALL3, .quorum = 3),
      SB (2, 8, .members = 0x5, .assigned = 0x2, .quorum = 3,
          .bm = { 0, 7 }) },
    .outcome = ELECT_EXISTING, .roles = "UII", .reference = 0,
    .lacks = { "force" } },
  { "missed-last-bump member counts towards the quorum", 3,
    { SB (0, 7, ALL3), SB (1, 6, ALL3), GONE },
    .final = true,
    .outcome = ELECT_REFUSE, .has = { "only 2 of the 3 members" } },
  { "missed-last-bump members make the count complete", 3,
    { SB (0, 6, ALL3), SB (1, 7, ALL3), SB (2, 6, ALL3) },
    .outcome = ELECT_EXISTING, .roles = "UUU", .reference = 1 },
};

/* Write a 16-byte UUID made of tag (twice, big-endian). */
static void
uuid_tag (uint8_t *u, uint64_t tag)
{
  for (unsigned i = 0; i < 16; ++i)
    u[i] = (uint8_t) (tag >> (8 * (7 - i % 8)));
}

/* The generation of a leg at counter k, diverged after branch (0: the
 * main line).
 */
static struct gen
gen_at (uint64_t k, uint64_t branch)
{
  return (struct gen) {
    k, branch && k > branch ? BRANCH_ID (branch, k) : MAIN_ID (k)
  };
}

/* A superblock of volume vol for the leg owning slot, at generation g,
 * with nothing in its history and an empty slot table.
 */
static void
sb_new (struct superblock *sb, uint64_t vol, unsigned slot, struct gen g,
        unsigned quorum)
{
  memset (sb, 0, sizeof *sb);
  sb->seq = 1;
  uuid_tag (sb->volume_uuid, vol);
  uuid_tag (sb->leg_uuid, LEG_TAG + slot);
  sb->slot = slot;
  sb->max_legs = TEST_MAX_LEGS;
  sb->quorum = quorum;
  sb->volume_size = 64 * 1024 * 1024;
  sb->chunk_size = 64 * 1024;
  sb->al_extent_size = 4 * 1024 * 1024;
  sb->al_extents = 1024;
  sb->gen = g;
}

/* Fill the history with the generations before sb->gen on its line
 * (diverged after branch), newest first.
 */
static void
sb_set_line (struct superblock *sb, uint64_t branch)
{
  uint64_t k;

  sb->history_len = 0;
  for (k = sb->gen.counter - 1; k >= 1 && sb->history_len < META_HISTORY;
       --k)
    sb->history[sb->history_len++] = gen_at (k, branch);
}

/* Set slot s of the slot table: flags, owner (LEG_TAG + s, or a
 * stranger) and the main-line bm_gen counter (0: none).
 */
static void
sb_set_slot (struct superblock *sb, unsigned s, uint32_t flags,
             bool stranger, uint64_t bm_counter)
{
  struct sb_slot *slot = &sb->slots[s];

  memset (slot, 0, sizeof *slot);
  slot->flags = flags;
  if (flags & SLOT_ASSIGNED)
    uuid_tag (slot->uuid, (stranger ? STRANGER : LEG_TAG) + s);
  if (bm_counter)
    slot->bm_gen = gen_at (bm_counter, 0);
}

/* Mark the superblock inconsistent (an interrupted resync). */
static void
sb_set_inconsistent (struct superblock *sb, bool inconsistent)
{
  if (inconsistent)
    sb->flags |= SB_INCONSISTENT;
  else
    sb->flags &= ~SB_INCONSISTENT;
}

/* Build what start-up found on one leg from its description. */
static void
make_leg (const struct leg_spec *ls, struct elect_leg *el)
{
  unsigned s;

  memset (el, 0, sizeof *el);
  el->reachable = ls->kind != K_UNREACHABLE;
  switch (ls->kind) {
  case K_NONE:
  case K_UNREACHABLE:
    el->status = META_BLANK;
    return;
  case K_ZERO:
    el->status = META_BLANK;
    el->all_zero = true;
    return;
  case K_DATA:
    el->status = META_BLANK;
    return;
  case K_CORRUPT:
    el->status = META_CORRUPT;
    return;
  case K_SB:
    break;
  }
  el->status = META_OK;
  sb_new (&el->sb, ls->vol ? ls->vol : VOL_A, ls->slot,
          gen_at (ls->counter, ls->branch), ls->quorum ? ls->quorum : 1);
  sb_set_line (&el->sb, ls->branch);
  for (s = 0; s < TEST_MAX_LEGS; ++s) {
    uint32_t flags = 0;
    if (ls->members & (1u << s))
      flags = SLOT_ASSIGNED | SLOT_MEMBER;
    else if (ls->assigned & (1u << s))
      flags = SLOT_ASSIGNED;
    sb_set_slot (&el->sb, s, flags, (ls->foreign & (1u << s)) != 0,
                 ls->bm[s]);
  }
  sb_set_inconsistent (&el->sb, ls->inconsistent);
}

static const char *const outcome_name[] = {
  "CREATE", "EXISTING", "WAIT", "REFUSE",
};
static const char role_letter[] = "UIFM";

/* Run one row; report every difference. */
static void
run_row (const struct row *r)
{
  struct elect_input in;
  struct elect_result out;
  char roles[TEST_MAX_LEGS + 1];
  size_t i;

  memset (&in, 0, sizeof in);
  in.nr_legs = r->nr_legs;
  for (i = 0; i < r->nr_legs; ++i)
    make_leg (&r->legs[i], &in.legs[i]);
  in.init = r->init;
  in.force = r->force;
  in.prefer = r->prefer.set ? r->prefer.leg : -1;
  in.final = r->final;
  in.async = r->async;

  elect (&in, &out);

  CHECKF (out.outcome == r->outcome, "%s: outcome %s, expected %s "
          "(message: %s)", r->name, outcome_name[out.outcome],
          outcome_name[r->outcome], out.message);
  if (r->roles) {
    for (i = 0; i < r->nr_legs; ++i)
      roles[i] = out.role[i] <= ROLE_MISSING ? role_letter[out.role[i]] : '?';
    roles[i] = '\0';
    CHECKF (strcmp (roles, r->roles) == 0, "%s: roles %s, expected %s",
            r->name, roles, r->roles);
  }
  if (r->outcome == ELECT_EXISTING || r->outcome == ELECT_CREATE)
    CHECKF (out.reference == r->reference, "%s: reference %d, expected %d",
            r->name, out.reference, r->reference);
  if (r->outcome == ELECT_CREATE)
    CHECKF (out.create == r->create, "%s: create %d, expected %d",
            r->name, (int) out.create, (int) r->create);
  CHECKF (out.forced == r->forced, "%s: forced %d, expected %d",
          r->name, out.forced, r->forced);
  CHECKF (out.split_brain == r->split_brain,
          "%s: split_brain %d, expected %d", r->name, out.split_brain,
          r->split_brain);
  for (i = 0; i < NELEMS (r->has) && r->has[i]; ++i)
    CHECKF (strstr (out.message, r->has[i]) != NULL,
            "%s: message lacks \"%s\": %s", r->name, r->has[i], out.message);
  for (i = 0; i < NELEMS (r->lacks) && r->lacks[i]; ++i)
    CHECKF (strstr (out.message, r->lacks[i]) == NULL,
            "%s: message has \"%s\": %s", r->name, r->lacks[i], out.message);
}

/* The helpers build what the rows say (a check of the test itself). */
static void
test_helpers (void)
{
  struct elect_leg el;
  const struct leg_spec ls = SB (2, 5, .branch = 3, .members = 0x5,
                                 .assigned = 0x2, .foreign = 0x2,
                                 .bm = { [1] = 4 });
  char u[37];

  make_leg (&ls, &el);
  CHECK (el.reachable && el.status == META_OK);
  CHECK (el.sb.slot == 2 && el.sb.gen.counter == 5);
  CHECK (el.sb.gen.id == BRANCH_ID (3, 5));
  CHECK (el.sb.history_len == 4);
  CHECK (el.sb.history[0].id == BRANCH_ID (3, 4));
  CHECK (el.sb.history[1].id == MAIN_ID (3));
  CHECK (el.sb.history[3].id == MAIN_ID (1));
  CHECK (sb_knows_gen (&el.sb, gen_at (2, 0)));
  CHECK (!sb_knows_gen (&el.sb, gen_at (4, 0)));
  CHECK (el.sb.slots[0].flags == (SLOT_ASSIGNED | SLOT_MEMBER));
  CHECK (el.sb.slots[1].flags == SLOT_ASSIGNED);
  CHECK (el.sb.slots[2].flags == (SLOT_ASSIGNED | SLOT_MEMBER));
  CHECK (el.sb.slots[3].flags == 0);
  CHECK (memcmp (el.sb.slots[2].uuid, el.sb.leg_uuid, 16) == 0);
  CHECK (memcmp (el.sb.slots[1].uuid, el.sb.leg_uuid, 16) != 0);
  CHECK (gen_equal (el.sb.slots[1].bm_gen, gen_at (4, 0)));
  uuid_format (el.sb.leg_uuid, u);
  CHECK (strncmp (u, "1e900000-0000-0002-", 19) == 0);
}

int
main (void)
{
  size_t i;

  test_helpers ();
  for (i = 0; i < NELEMS (rows); ++i)
    run_row (&rows[i]);
  printf ("%zu election rows\n", NELEMS (rows));
  return unit_exit ("unit-election");
}
