/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the pure state and errno decisions
 * (common/replication/pure/state.c).
 *
 * - state_leg_name: the exact status words of DESIGN.md section 3 for
 *   every state, and "unknown" for a value out of range.
 * - state_volume_name: a table of rows named after what they show,
 *   then every combination of uptodate 0..MAX_LEGS, total 1..MAX_LEGS
 *   and quorum 1..total against the rule of section 3 (failed: no
 *   uptodate leg; readonly: fewer than quorum; degraded: fewer than
 *   all; healthy: all).
 * - The errno table: for every errno the engine knows, whether it fails
 *   the leg, whether it is a disconnect, and what the client is told.
 * - For every errno from 0 to 200 (known or not): a disconnect always
 *   fails the leg, and the client is only ever told 0, EIO, ENOSPC,
 *   EPERM, EINVAL or ENOMEM, never libnbd's ENOTCONN.
 * - state_move_allowed: every (from, to) pair of the five states against
 *   the transition table written out here, a row per pair.
 * - state_membership: a table of leg-state sets and the masks they
 *   make; then every combination of three legs' states (the absent
 *   slots passed through, uptodate within writing).
 * - state_absent_after_move: a table of moves and the absent slots after
 *   them; then every allowed move, for a leg with and without a slot,
 *   with and without metadata, against the rule (the leg's slot only
 *   ever changes, and only as its writing changes or it is removed).
 */

#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "params.h"
#include "state.h"
#include "unit.h"

struct leg_name_case {
  enum leg_state state;
  const char *name;
};

static const struct leg_name_case leg_names[] = {
  { LEG_UPTODATE, "uptodate" },
  { LEG_SYNCING, "syncing" },
  { LEG_FAILED, "failed" },
  { LEG_STALE, "stale" },
  { LEG_REMOVED, "removed" },
  { (enum leg_state) 99, "unknown" },
};

struct volume_case {
  const char *why;
  unsigned uptodate, total, quorum;
  const char *state;
};

static const struct volume_case volume_cases[] = {
  { "all of one leg", 1, 1, 1, "healthy" },
  { "the only leg gone", 0, 1, 1, "failed" },
  { "all three", 3, 3, 1, "healthy" },
  { "all three, quorum 3", 3, 3, 3, "healthy" },
  { "two of three", 2, 3, 1, "degraded" },
  { "two of three, quorum 2", 2, 3, 2, "degraded" },
  { "two of three, quorum 3", 2, 3, 3, "readonly" },
  { "one of three, quorum 2", 1, 3, 2, "readonly" },
  { "one of three, quorum 1", 1, 3, 1, "degraded" },
  { "none of three, quorum 1", 0, 3, 1, "failed" },
  { "none of three, quorum 3", 0, 3, 3, "failed" },
  { "15 of 16, quorum 9", 15, 16, 9, "degraded" },
  { "8 of 16, quorum 9", 8, 16, 9, "readonly" },
  { "16 of 16, quorum 16", 16, 16, 16, "healthy" },
};

struct errno_case {
  const char *name;
  int err;
  bool fails_leg;
  bool disconnect;
  bool refusal;
  int client;
};

#define E(e) #e, e

static const struct errno_case errno_cases[] = {
  { E(0),            false, false, false, 0 },
  /* Media and space errors fail the leg; the client hears the truth. */
  { E(EIO),          true, false, false, EIO },
  { E(ENOSPC),       true, false, false, ENOSPC },
  { E(EDQUOT),       true, false, false, ENOSPC },
  { E(EFBIG),        true, false, false, ENOSPC },
  /* Lost connections and timeouts fail the leg; the client hears EIO. */
  { E(ENOTCONN),     true, true, false, EIO },
  { E(ESHUTDOWN),    true, true, false, EIO },
  { E(ECONNRESET),   true, true, false, EIO },
  { E(ECONNREFUSED), true, true, false, EIO },
  { E(ECONNABORTED), true, true, false, EIO },
  { E(EPIPE),        true, true, false, EIO },
  { E(ETIMEDOUT),    true, true, false, EIO },
  { E(EBADF),        true, true, false, EIO },
  /* Refusals of the request itself fail no leg, and only they may be
   * common to every leg without consequence. */
  { E(EINVAL),       false, false, true , EINVAL },
  { E(ENOTSUP),      false, false, true , EINVAL },
  { E(EOPNOTSUPP),   false, false, true , EINVAL },
  { E(EPERM),        false, false, true , EPERM },
  { E(EROFS),        false, false, true , EPERM },
  { E(ENOMEM),       false, false, false, ENOMEM },
  /* Anything else fails no leg and is EIO to the client. */
  { E(EAGAIN),       false, false, false, EIO },
  { E(EINTR),        false, false, false, EIO },
  { E(EOVERFLOW),    false, false, false, EIO },
  { E(ERANGE),       false, false, false, EIO },
  { E(ENOENT),       false, false, false, EIO },
  { E(EACCES),       false, false, false, EIO },
  { E(EBUSY),        false, false, false, EIO },
};

#define U LEG_UPTODATE
#define Y LEG_SYNCING
#define F LEG_FAILED
#define S LEG_STALE
#define R LEG_REMOVED

struct move_case {
  enum leg_state from, to;
  bool allowed;
};

/* Every pair: the transition table of DESIGN.md section 3. */
static const struct move_case move_cases[] = {
  { U, U, false }, { U, Y, false }, { U, F, true  }, { U, S, true  },
  { U, R, true  },
  { Y, U, true  }, { Y, Y, false }, { Y, F, true  }, { Y, S, true  },
  { Y, R, true  },
  { F, U, true  }, { F, Y, false }, { F, F, false }, { F, S, true  },
  { F, R, true  },
  { S, U, false }, { S, Y, true  }, { S, F, true  }, { S, S, false },
  { S, R, true  },
  { R, U, false }, { R, Y, false }, { R, F, false }, { R, S, false },
  { R, R, false },
};

#define NR_STATES 5

struct compute_case {
  const char *why;
  size_t n;
  enum leg_state states[MAX_LEGS];
  uint16_t absent;
  uint16_t up, wr;
};

static const struct compute_case compute_cases[] = {
  { "no legs", 0, { U }, 0, 0, 0 },
  { "healthy three", 3, { U, U, U }, 0, 0x7, 0x7 },
  { "one failed", 3, { U, F, U }, 0x2, 0x5, 0x5 },
  { "one syncing", 3, { U, Y, U }, 0, 0x5, 0x7 },
  { "stale and removed", 4, { U, S, R, U }, 0x2, 0x9, 0x9 },
  { "all failed", 2, { F, F }, 0x3, 0, 0 },
  { "tracker slot absent", 2, { U, U }, 0x4, 0x3, 0x3 },
  { "legs beyond n ignored", 1, { U, U, U }, 0, 0x1, 0x1 },
  { "sixteen", 16, { U, U, U, U, U, U, U, U, Y, Y, Y, Y, F, S, R, U },
    0x3000, 0x80ff, 0x8fff },
};

struct absent_case {
  const char *why;
  uint16_t absent;
  enum leg_state from, to;
  int slot;
  bool metadata;
  uint16_t want;
};

static const struct absent_case absent_cases[] = {
  { "uptodate fails: its slot turns absent", 0x1, U, F, 2, true, 0x5 },
  { "syncing fails", 0x0, Y, F, 1, true, 0x2 },
  { "asynchronous leg pulls ahead: absent", 0x0, Y, S, 2, true, 0x4 },
  { "fails without metadata: nothing", 0x0, U, F, 1, false, 0x0 },
  { "fails without a slot", 0x1, U, F, -1, true, 0x1 },
  { "held for a backup", 0x0, U, S, 3, true, 0x8 },
  { "resync starts: present", 0x9, S, Y, 3, true, 0x1 },
  { "resync done: unchanged", 0x1, Y, U, 3, true, 0x1 },
  { "rejoins uptodate: present", 0x6, F, U, 1, true, 0x4 },
  { "failed -> stale: unchanged", 0x6, F, S, 1, true, 0x6 },
  { "stale -> failed: unchanged", 0x6, S, F, 1, true, 0x6 },
  { "a new member's slot stays present", 0x0, S, F, 1, true, 0x0 },
  { "removed: absent until its release is recorded", 0x6, F, R, 2, true,
    0x6 },
  { "removed uptodate: absent", 0x2, U, R, 0, true, 0x3 },
  { "removed without a slot", 0x6, S, R, -1, true, 0x6 },
  { "other slots untouched", 0xf0f0, U, F, 0, true, 0xf0f1 },
};

/* state_move_allowed: every pair, each once in the table. */
static void
test_moves (void)
{
  bool seen[NR_STATES][NR_STATES] = { { false } };
  size_t i;
  int f, t;

  for (i = 0; i < sizeof move_cases / sizeof move_cases[0]; ++i) {
    const struct move_case *c = &move_cases[i];
    bool got = state_move_allowed (c->from, c->to);
    CHECKF (got == c->allowed, "%s -> %s: got %d, expected %d",
            state_leg_name (c->from), state_leg_name (c->to), got,
            c->allowed);
    CHECKF (!seen[c->from][c->to], "%s -> %s twice in the table",
            state_leg_name (c->from), state_leg_name (c->to));
    seen[c->from][c->to] = true;
  }
  for (f = 0; f < NR_STATES; ++f)
    for (t = 0; t < NR_STATES; ++t)
      CHECKF (seen[f][t], "%s -> %s missing from the table",
              state_leg_name ((enum leg_state) f),
              state_leg_name ((enum leg_state) t));
  CHECK (!state_move_allowed ((enum leg_state) 99, LEG_FAILED));
}

/* state_membership: the table, then every state of three legs. */
static void
test_compute (void)
{
  enum leg_state st[3];
  size_t i;
  int a, b, c;

  for (i = 0; i < sizeof compute_cases / sizeof compute_cases[0]; ++i) {
    const struct compute_case *k = &compute_cases[i];
    uint64_t m = state_membership (k->states, k->n, k->absent);
    CHECKF (MB_UPTODATE (m) == k->up && MB_WRITING (m) == k->wr &&
            MB_ABSENT (m) == k->absent && MB_EPOCH (m) == 0,
            "%s: got up %#x writing %#x absent %#x epoch %u, expected "
            "up %#x writing %#x absent %#x", k->why,
            (unsigned) MB_UPTODATE (m), (unsigned) MB_WRITING (m),
            (unsigned) MB_ABSENT (m), (unsigned) MB_EPOCH (m),
            (unsigned) k->up, (unsigned) k->wr, (unsigned) k->absent);
  }
  for (a = 0; a < NR_STATES; ++a)
    for (b = 0; b < NR_STATES; ++b)
      for (c = 0; c < NR_STATES; ++c) {
        uint64_t m;
        unsigned j;
        st[0] = (enum leg_state) a;
        st[1] = (enum leg_state) b;
        st[2] = (enum leg_state) c;
        m = state_membership (st, 3, 0xa5a5);
        CHECK (MB_ABSENT (m) == 0xa5a5);
        CHECK ((MB_UPTODATE (m) & ~MB_WRITING (m)) == 0);
        CHECK ((MB_WRITING (m) & ~0x7u) == 0);
        for (j = 0; j < 3; ++j) {
          CHECK (!!(MB_UPTODATE (m) & (1u << j)) == (st[j] == LEG_UPTODATE));
          CHECK (!!(MB_WRITING (m) & (1u << j)) ==
                 (st[j] == LEG_UPTODATE || st[j] == LEG_SYNCING));
        }
      }
}

/* state_absent_after_move: the table, then every allowed move against the
 * rule.
 */
static void
test_absent (void)
{
  static const int slots[] = { -1, 0, 5, 15 };
  size_t i, k;
  int f, t, md;

  for (i = 0; i < sizeof absent_cases / sizeof absent_cases[0]; ++i) {
    const struct absent_case *c = &absent_cases[i];
    uint16_t got = state_absent_after_move (c->absent, c->from, c->to, c->slot,
                                      c->metadata);
    CHECKF (got == c->want, "%s: got %#x, expected %#x", c->why,
            (unsigned) got, (unsigned) c->want);
  }
  for (f = 0; f < NR_STATES; ++f)
    for (t = 0; t < NR_STATES; ++t)
      for (k = 0; k < sizeof slots / sizeof slots[0]; ++k)
        for (md = 0; md <= 1; ++md) {
          enum leg_state from = (enum leg_state) f, to = (enum leg_state) t;
          uint16_t bit = slots[k] < 0 ? 0 : (uint16_t) (1u << slots[k]);
          uint16_t in;
          if (!state_move_allowed (from, to))
            continue;
          for (in = 0; in < 4; ++in) {
            uint16_t before = (uint16_t) ((in & 1 ? 0x2222 : 0x4444) |
                                          (in & 2 ? bit : 0));
            uint16_t got = state_absent_after_move (before, from, to, slots[k],
                                              md);
            uint16_t want = before;
            if (state_writing (to) && !state_writing (from))
              want &= ~bit;
            else if (md && state_writing (from) &&
                     !state_writing (to))
              want |= bit;
            CHECKF ((got & ~bit) == (before & ~bit),
                    "%s -> %s slot %d: another slot changed",
                    state_leg_name (from), state_leg_name (to), slots[k]);
            CHECKF (got == want, "%s -> %s slot %d metadata %d: got %#x, "
                    "expected %#x", state_leg_name (from),
                    state_leg_name (to), slots[k], md, (unsigned) got,
                    (unsigned) want);
            /* A writing leg's slot is never absent before, nor after. */
            CHECKF ((state_writing (from) && (before & bit)) ||
                    !state_writing (to) || !(got & bit),
                    "%s -> %s: a writing leg's slot is absent",
                    state_leg_name (from), state_leg_name (to));
          }
        }
}

/* The volume state as DESIGN.md section 3 defines it. */
static const char *
volume_rule (unsigned uptodate, unsigned total, unsigned quorum)
{
  if (uptodate == 0)
    return "failed";
  if (uptodate < quorum)
    return "readonly";
  if (uptodate < total)
    return "degraded";
  return "healthy";
}

/* state_leg_name for every state. */
static void
test_leg_names (void)
{
  size_t i;

  for (i = 0; i < sizeof leg_names / sizeof leg_names[0]; ++i) {
    const char *got = state_leg_name (leg_names[i].state);
    CHECKF (got != NULL && strcmp (got, leg_names[i].name) == 0,
            "leg state %d: got %s, expected %s", (int) leg_names[i].state,
            got ? got : "NULL", leg_names[i].name);
  }
}

/* state_volume_name: the table, then every combination. */
static void
test_volume_states (void)
{
  unsigned up, total, quorum;
  size_t i;

  for (i = 0; i < sizeof volume_cases / sizeof volume_cases[0]; ++i) {
    const struct volume_case *c = &volume_cases[i];
    const char *got = state_volume_name (c->uptodate, c->total, c->quorum);
    CHECKF (got != NULL && strcmp (got, c->state) == 0,
            "%s (uptodate %u, total %u, quorum %u): got %s, expected %s",
            c->why, c->uptodate, c->total, c->quorum, got ? got : "NULL",
            c->state);
  }

  for (total = 1; total <= MAX_LEGS; ++total)
    for (quorum = 1; quorum <= total; ++quorum)
      for (up = 0; up <= total; ++up) {
        const char *got = state_volume_name (up, total, quorum);
        const char *want = volume_rule (up, total, quorum);
        CHECKF (got != NULL && strcmp (got, want) == 0,
                "uptodate %u, total %u, quorum %u: got %s, expected %s",
                up, total, quorum, got ? got : "NULL", want);
      }
}

/* The errno table. */
static void
test_errno_table (void)
{
  size_t i;

  for (i = 0; i < sizeof errno_cases / sizeof errno_cases[0]; ++i) {
    const struct errno_case *c = &errno_cases[i];
    bool fails = state_errno_fails_leg (c->err);
    bool disc = state_errno_is_disconnect (c->err);
    bool refusal = state_errno_is_refusal (c->err);
    int client = state_errno_for_client (c->err);
    CHECKF (fails == c->fails_leg, "state_errno_fails_leg (%s) = %d, expected %d",
            c->name, fails, c->fails_leg);
    CHECKF (disc == c->disconnect,
            "state_errno_is_disconnect (%s) = %d, expected %d",
            c->name, disc, c->disconnect);
    CHECKF (refusal == c->refusal,
            "state_errno_is_refusal (%s) = %d, expected %d",
            c->name, refusal, c->refusal);
    CHECKF (client == c->client, "state_errno_for_client (%s) = %s, expected %s",
            c->name, strerror (client), strerror (c->client));
  }
}

/* Rules that hold for every errno, known to the table or not. */
static void
test_errno_rules (void)
{
  int e;

  for (e = 0; e <= 200; ++e) {
    int client = state_errno_for_client (e);
    CHECKF (!state_errno_is_disconnect (e) || state_errno_fails_leg (e),
            "errno %d (%s) is a disconnect that does not fail the leg",
            e, strerror (e));
    CHECKF (!state_errno_is_refusal (e) || !state_errno_fails_leg (e),
            "errno %d (%s) is a refusal that fails the leg", e, strerror (e));
    CHECKF (client == 0 || client == EIO || client == ENOSPC ||
            client == EPERM || client == EINVAL || client == ENOMEM,
            "errno %d (%s) reaches the client as %d (%s)",
            e, strerror (e), client, strerror (client));
    CHECKF ((client == 0) == (e == 0),
            "errno %d (%s) reaches the client as %d", e, strerror (e),
            client);
  }
}

int
main (void)
{
  test_leg_names ();
  test_volume_states ();
  test_errno_table ();
  test_errno_rules ();
  test_moves ();
  test_compute ();
  test_absent ();
  return unit_exit ("unit-state");
}
