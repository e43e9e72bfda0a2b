/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the pure state and errno decisions
 * (common/replication/state.c).
 *
 * - leg_state_name: the exact status words of DESIGN.md section 3 for
 *   every state, and "unknown" for a value out of range.
 * - volume_state_name: a table of rows named after what they show,
 *   then every combination of uptodate 0..MAX_LEGS, total 1..MAX_LEGS
 *   and quorum 1..total against the rule of section 3 (failed: no
 *   uptodate leg; readonly: fewer than quorum; degraded: fewer than
 *   all; healthy: all).
 * - The errno table: for every errno the engine knows, whether it fails
 *   the leg, whether it is a disconnect, and what the client is told.
 * - For every errno from 0 to 200 (known or not): a disconnect always
 *   fails the leg, and the client is only ever told 0, EIO, ENOSPC,
 *   EPERM, EINVAL or ENOMEM, never libnbd's ENOTCONN.
 */

#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "internal.h"
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

/* leg_state_name for every state. */
static void
test_leg_names (void)
{
  size_t i;

  for (i = 0; i < sizeof leg_names / sizeof leg_names[0]; ++i) {
    const char *got = leg_state_name (leg_names[i].state);
    CHECKF (got != NULL && strcmp (got, leg_names[i].name) == 0,
            "leg state %d: got %s, expected %s", (int) leg_names[i].state,
            got ? got : "NULL", leg_names[i].name);
  }
}

/* volume_state_name: the table, then every combination. */
static void
test_volume_states (void)
{
  unsigned up, total, quorum;
  size_t i;

  for (i = 0; i < sizeof volume_cases / sizeof volume_cases[0]; ++i) {
    const struct volume_case *c = &volume_cases[i];
    const char *got = volume_state_name (c->uptodate, c->total, c->quorum);
    CHECKF (got != NULL && strcmp (got, c->state) == 0,
            "%s (uptodate %u, total %u, quorum %u): got %s, expected %s",
            c->why, c->uptodate, c->total, c->quorum, got ? got : "NULL",
            c->state);
  }

  for (total = 1; total <= MAX_LEGS; ++total)
    for (quorum = 1; quorum <= total; ++quorum)
      for (up = 0; up <= total; ++up) {
        const char *got = volume_state_name (up, total, quorum);
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
    bool fails = errno_fails_leg (c->err);
    bool disc = errno_is_disconnect (c->err);
    bool refusal = errno_is_refusal (c->err);
    int client = errno_for_client (c->err);
    CHECKF (fails == c->fails_leg, "errno_fails_leg (%s) = %d, expected %d",
            c->name, fails, c->fails_leg);
    CHECKF (disc == c->disconnect,
            "errno_is_disconnect (%s) = %d, expected %d",
            c->name, disc, c->disconnect);
    CHECKF (refusal == c->refusal,
            "errno_is_refusal (%s) = %d, expected %d",
            c->name, refusal, c->refusal);
    CHECKF (client == c->client, "errno_for_client (%s) = %s, expected %s",
            c->name, strerror (client), strerror (c->client));
  }
}

/* Rules that hold for every errno, known to the table or not. */
static void
test_errno_rules (void)
{
  int e;

  for (e = 0; e <= 200; ++e) {
    int client = errno_for_client (e);
    CHECKF (!errno_is_disconnect (e) || errno_fails_leg (e),
            "errno %d (%s) is a disconnect that does not fail the leg",
            e, strerror (e));
    CHECKF (!errno_is_refusal (e) || !errno_fails_leg (e),
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
  return unit_exit ("unit-state");
}
