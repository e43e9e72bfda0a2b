/* SPDX-License-Identifier: BSD-3-Clause */
/* Election at start: which legs hold the newest data (pure).
 *
 * The rules, in the order they are applied (DESIGN.md section 6):
 *
 * 1. Legs with a valid superblock must all belong to one volume: a
 *    leg of another volume is refused by name, even with force (it is
 *    never written to).  Two legs with the same leg UUID are the same
 *    storage reached by two URIs: refused, naming both.
 * 2. No valid superblock anywhere: a new volume.  Every leg must be
 *    reachable (an unreachable one may hold metadata: wait for it).  It
 *    is created only if every leg reads as zeroes, or with init=copy
 *    (leg 0 is the source), init=zero or init=assume-clean; otherwise
 *    the legs holding data are named.
 * 3. Otherwise the candidates are the valid legs that are not
 *    inconsistent (an inconsistent leg never wins, not even with force).
 *    The winners hold the highest generation counter.  Winners with
 *    different ids at that counter are a split brain: refused, naming
 *    them, unless prefer=INDEX names a candidate, whose generation then
 *    wins.
 * 4. A member of the winning generation holding the generation just
 *    before it (the newest entry of the winners' history) missed only
 *    the superblock write of the last bump: the activity-log recovery
 *    covers what differs, so it is a winner too.
 * 5. Every other leg resyncs: incrementally if its slot belongs to it
 *    and its generation is the slot's bm_gen in the winners' superblock
 *    (their bitmap covers exactly what it missed; also an inconsistent
 *    leg, whose resync is then resumed); fully if the winners know its
 *    generation (it is in their history), if it is inconsistent (an
 *    interrupted resync that cannot be resumed), if it owns no slot any
 *    more (a removed leg: its data has no claim) or if it has no valid
 *    superblock (a blank leg joins as a new member).  A consistent leg
 *    still owning its slot whose generation the winners do not know
 *    changed on its own: split brain, refused unless prefer= is given
 *    (then it is rebuilt fully).
 * 6. Enough members of the winning generation must be reachable (with
 *    any generation: a reachable member cannot hide a newer one): with
 *    M members and quorum Q (as recorded), at least M - Q + 1 of them
 *    (all of them when Q = 1, one when M < Q); otherwise wait, then
 *    refuse naming what is missing, unless force=true.
 * 7. Asynchronous legs (async=URI, DESIGN.md section 14) take no part
 *    in rules 2 to 6: they are never winners, never waited for, and
 *    never a split brain (they are never members, and may lag any
 *    number of generations).  Once the others are decided, each
 *    reachable one resyncs: incrementally if it owns its slot and
 *    holds its bm_gen (its bitmap and the activity log cover what it
 *    lacks), fully otherwise; a new volume's join fully.  When the
 *    election finds no synchronous leg to start from but asynchronous
 *    legs are reachable, the refusal names them: prefer=INDEX with
 *    force=true promotes one (a failover to it), which then stands in
 *    the election as a synchronous leg (rule 3 still refuses an
 *    inconsistent one: a leg caught in the middle of catching up).
 *    An asynchronous leg that was uptodate at a generation the winners
 *    do not know (its own superblock names it a member: promoted by a
 *    failover, it took writes) is a split brain, refused unless
 *    prefer= is given: a failback must not drop those writes silently.
 */

#include <config.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "election.h"
#include "random.h"

/* Append to the result's message. */
static void
note (struct elect_result *out, const char *fs, ...)
  __attribute__ ((format (printf, 2, 3)));
static void
note (struct elect_result *out, const char *fs, ...)
{
  size_t len = strlen (out->message);
  va_list ap;

  if (len >= sizeof out->message - 1)
    return;
  va_start (ap, fs);
  vsnprintf (out->message + len, sizeof out->message - len, fs, ap);
  va_end (ap);
}

/* Set the outcome, replacing the message. */
static void
decide (struct elect_result *out, enum elect_outcome o, const char *fs, ...)
  __attribute__ ((format (printf, 3, 4)));
static void
decide (struct elect_result *out, enum elect_outcome o, const char *fs, ...)
{
  va_list ap;

  out->outcome = o;
  va_start (ap, fs);
  vsnprintf (out->message, sizeof out->message, fs, ap);
  va_end (ap);
}

/* Is leg i reachable with a valid superblock (any leg)? */
static bool
valid_any (const struct elect_input *in, size_t i)
{
  return in->legs[i].reachable && in->legs[i].status == META_OK;
}

/* Is leg i asynchronous (rule 7: out of rules 2 to 6)? */
static bool
is_async (const struct elect_input *in, size_t i)
{
  return (in->async & (1u << i)) != 0;
}

/* Is leg i a synchronous leg, reachable with a valid superblock? */
static bool
valid (const struct elect_input *in, size_t i)
{
  return valid_any (in, i) && !is_async (in, i);
}

/* Append a list of leg indexes ("0, 2") from a mask. */
static void
note_legs (struct elect_result *out, uint32_t mask)
{
  bool first = true;
  size_t i;

  for (i = 0; i < MAX_LEGS; ++i)
    if (mask & (1u << i)) {
      note (out, "%s%zu", first ? "" : ", ", i);
      first = false;
    }
}

/* Rule 1: all valid legs belong to the same volume.  Returns the index
 * of the first valid leg, -1 if none, or -2 after refusing (naming the
 * volume of every leg, so that whichever is the stranger is clear).
 */
static int
check_one_volume (const struct elect_input *in, struct elect_result *out)
{
  int first = -1;
  bool mixed = false;
  char u[37];
  size_t i;

  for (i = 0; i < in->nr_legs; ++i) {
    if (!valid_any (in, i))
      continue;
    if (first == -1)
      first = (int) i;
    else if (memcmp (in->legs[i].sb.volume_uuid,
                     in->legs[first].sb.volume_uuid, 16) != 0)
      mixed = true;
  }
  if (!mixed)
    return first;
  decide (out, ELECT_REFUSE, "legs belong to different volumes:");
  for (i = 0; i < in->nr_legs; ++i)
    if (valid_any (in, i)) {
      uuid_format (in->legs[i].sb.volume_uuid, u);
      note (out, " leg %zu is in volume %s;", i, u);
    }
  note (out, " a leg of another volume is never written to: remove it "
        "from the command line or wipe it");
  return -2;
}

/* Rule 1, second half: no leg twice.  Returns -1 after refusing. */
static int
check_distinct_legs (const struct elect_input *in, struct elect_result *out)
{
  char u[37];
  size_t i, j;

  for (i = 0; i < in->nr_legs; ++i)
    for (j = i + 1; j < in->nr_legs; ++j)
      if (valid_any (in, i) && valid_any (in, j) &&
          memcmp (in->legs[i].sb.leg_uuid, in->legs[j].sb.leg_uuid, 16) == 0) {
        uuid_format (in->legs[i].sb.leg_uuid, u);
        decide (out, ELECT_REFUSE, "leg %zu and leg %zu carry the same "
                "leg identity (leg uuid %s): one storage reached by two "
                "URIs, or a copy of a leg's disk; remove one of them (a "
                "copy: wipe it and add it as a new leg)", i, j, u);
        return -1;
      }
  return 0;
}

/* Rule 2: a new volume. */
static void
elect_new (const struct elect_input *in, struct elect_result *out)
{
  uint32_t unreachable = 0, data = 0, corrupt = 0;
  size_t i;

  for (i = 0; i < in->nr_legs; ++i) {
    if (is_async (in, i))
      continue;
    if (!in->legs[i].reachable)
      unreachable |= 1u << i;
    else if (!in->legs[i].all_zero)
      data |= 1u << i;
    if (in->legs[i].reachable && in->legs[i].status == META_CORRUPT)
      corrupt |= 1u << i;
  }
  if (unreachable) {
    decide (out, in->final ? ELECT_REFUSE : ELECT_WAIT,
            "no leg holds a valid superblock and leg(s) ");
    note_legs (out, unreachable);
    note (out, " cannot be reached: a new volume needs every leg");
    return;
  }
  out->outcome = ELECT_CREATE;
  for (i = 0; i < in->nr_legs; ++i)
    out->role[i] = ROLE_UPTODATE;
  switch (in->init) {
  case INIT_ASSUME_CLEAN:
    out->create = CREATE_CLEAN;
    return;
  case INIT_ZERO:
    out->create = CREATE_ZERO;
    return;
  case INIT_COPY:
    out->create = CREATE_COPY;
    for (i = 1; i < in->nr_legs; ++i)
      out->role[i] = ROLE_FULL;
    if (is_async (in, 0))
      decide (out, ELECT_REFUSE, "init=copy: leg 0 is asynchronous and "
              "cannot be the source");
    return;
  case INIT_NONE:
    break;
  }
  out->create = CREATE_CLEAN;
  if (data == 0)
    return;
  decide (out, ELECT_REFUSE, "a new volume, but leg(s) ");
  note_legs (out, data);
  note (out, " hold data (they do not read as zeroes)");
  if (corrupt) {
    note (out, "; leg(s) ");
    note_legs (out, corrupt);
    note (out, " hold a damaged superblock");
  }
  note (out, ": use init=copy (leg 0 is the source), init=zero or "
        "init=assume-clean");
}

/* Format a generation for messages. */
static const char *
gen_str (struct gen g, char *buf, size_t len)
{
  snprintf (buf, len, "%" PRIu64 ":%08" PRIx64, g.counter, g.id >> 32);
  return buf;
}

/* The consistent legs with a valid superblock, and their highest
 * generation counter.
 */
static uint32_t
candidates (const struct elect_input *in, uint64_t *max)
{
  uint32_t cands = 0;
  size_t i;

  *max = 0;
  for (i = 0; i < in->nr_legs; ++i)
    if (valid (in, i) && !(in->legs[i].sb.flags & SB_INCONSISTENT)) {
      cands |= 1u << i;
      if (in->legs[i].sb.gen.counter > *max)
        *max = in->legs[i].sb.gen.counter;
    }
  return cands;
}

/* The candidates holding exactly the reference's generation. */
static uint32_t
same_generation (const struct elect_input *in, uint32_t cands, int ref)
{
  uint32_t top = 0;
  size_t i;

  for (i = 0; i < in->nr_legs; ++i)
    if ((cands & (1u << i)) &&
        gen_equal (in->legs[i].sb.gen, in->legs[ref].sb.gen))
      top |= 1u << i;
  return top;
}

/* Rule 3: the winners among the consistent legs; with preferred >= 0
 * (prefer= resolving a split brain) that leg's generation wins.
 * Returns the mask of winners (0 after refusing).
 */
static uint32_t
find_winners (const struct elect_input *in, struct elect_result *out,
              int preferred)
{
  uint64_t max;
  uint32_t cands = candidates (in, &max), top;
  int ref = -1;
  char g1[40], g2[40];
  size_t i;

  if (cands == 0) {
    decide (out, ELECT_REFUSE, "no consistent leg: every leg with a "
            "superblock is inconsistent (an interrupted resync); the "
            "newest data is on none of the reachable legs");
    return 0;
  }
  if (preferred >= 0) {
    if (!(cands & (1u << preferred))) {
      decide (out, ELECT_REFUSE, "split brain, and prefer=%d does not "
              "name a reachable, consistent leg with a superblock",
              preferred);
      return 0;
    }
    out->reference = preferred;
    return same_generation (in, cands, preferred);
  }
  for (i = 0; i < in->nr_legs && ref == -1; ++i)
    if ((cands & (1u << i)) && in->legs[i].sb.gen.counter == max)
      ref = (int) i;
  top = same_generation (in, cands, ref);
  for (i = 0; i < in->nr_legs; ++i)
    if ((cands & (1u << i)) && in->legs[i].sb.gen.counter == max &&
        !(top & (1u << i))) {
      out->split_brain = true;
      decide (out, ELECT_REFUSE, "split brain: leg %d (generation %s) "
              "and leg %zu (generation %s) changed independently; choose "
              "the leg to keep with prefer=INDEX (the others are rebuilt "
              "from it)", ref, gen_str (in->legs[ref].sb.gen, g1, sizeof g1),
              i, gen_str (in->legs[i].sb.gen, g2, sizeof g2));
      return 0;
    }
  out->reference = ref;
  return top;
}

/* Rule 4: did leg i miss only the last bump? */
static bool
missed_last_bump (const struct superblock *r, const struct superblock *sb)
{
  return !(sb->flags & SB_INCONSISTENT) && r->history_len > 0 &&
    gen_equal (sb->gen, r->history[0]) && sb_owns_slot (r, sb) &&
    (r->slots[sb->slot].flags & SLOT_MEMBER);
}

/* Rule 5: the role of a leg that is not a winner.  Returns false (and
 * refuses) on a split brain, unless prefer= is resolving one.
 */
static bool
classify (const struct elect_input *in, struct elect_result *out, size_t i,
          bool preferring)
{
  const struct superblock *r = &in->legs[out->reference].sb;
  const struct superblock *sb = &in->legs[i].sb;
  char g1[40], g2[40];

  if (!in->legs[i].reachable) {
    out->role[i] = ROLE_MISSING;
    return true;
  }
  if (in->legs[i].status != META_OK) {
    out->role[i] = ROLE_FULL;
    return true;
  }
  if (sb_owns_slot (r, sb) && gen_equal (sb->gen, r->slots[sb->slot].bm_gen)) {
    out->role[i] = ROLE_INCREMENTAL;
    return true;
  }
  if ((sb->flags & SB_INCONSISTENT) || sb_knows_gen (r, sb->gen) ||
      !sb_owns_slot (r, sb) || preferring) {
    out->role[i] = ROLE_FULL;
    return true;
  }
  out->split_brain = true;
  decide (out, ELECT_REFUSE, "split brain: leg %zu (generation %s) is not "
          "an ancestor of leg %d (generation %s): both changed "
          "independently; choose the leg to keep with prefer=INDEX",
          i, gen_str (sb->gen, g1, sizeof g1), out->reference,
          gen_str (r->gen, g2, sizeof g2));
  return false;
}

/* Is a member slot's leg reachable (with a valid superblock, whatever
 * its generation: it cannot hold a newer one than we can see)?
 */
static bool
member_reachable (const struct elect_input *in, const struct sb_slot *slot)
{
  size_t i;

  for (i = 0; i < in->nr_legs; ++i)
    if (valid (in, i) &&
        memcmp (in->legs[i].sb.leg_uuid, slot->uuid, 16) == 0)
      return true;
  return false;
}

/* Rule 6: are enough members of the winning generation here?  With M
 * members and quorum Q, M - Q + 1 must be reachable (all when Q = 1;
 * one when M < Q: no write can have been accepted since).
 */
static void
check_members (const struct elect_input *in, struct elect_result *out)
{
  const struct superblock *r = &in->legs[out->reference].sb;
  unsigned members = 0, present = 0, need, q = r->quorum ? r->quorum : 1;
  uint32_t unreachable = 0, unreadable = 0;
  char u[37];
  size_t i, s;

  for (s = 0; s < r->max_legs; ++s) {
    if (!(r->slots[s].flags & SLOT_MEMBER))
      continue;
    members++;
    present += member_reachable (in, &r->slots[s]);
  }
  need = members >= q ? members - q + 1 : 1;
  if (present >= need)
    return;
  for (i = 0; i < in->nr_legs; ++i)
    if (!in->legs[i].reachable && !is_async (in, i))
      unreachable |= 1u << i;
    else if (!valid_any (in, i))
      unreadable |= 1u << i;
  if (!in->final && unreachable) {
    decide (out, ELECT_WAIT, "waiting for legs: ");
    note_legs (out, unreachable);
    return;
  }
  if (in->force) {
    out->forced = true;
    note (out, "force=true: starting with %u of the %u members of "
          "generation %" PRIu64 " (%u needed). ", present, members,
          r->gen.counter, need);
    return;
  }
  decide (out, ELECT_REFUSE, "only %u of the %u members of generation %"
          PRIu64 " are reachable (quorum %u needs %u): a missing member "
          "may hold newer data.  Missing members:", present, members,
          r->gen.counter, q, need);
  for (s = 0; s < r->max_legs; ++s)
    if ((r->slots[s].flags & SLOT_MEMBER) &&
        !member_reachable (in, &r->slots[s])) {
      uuid_format (r->slots[s].uuid, u);
      note (out, " slot %zu (leg uuid %s)", s, u);
    }
  if (unreachable) {
    note (out, "; unreachable: leg(s) ");
    note_legs (out, unreachable);
  }
  if (unreadable) {
    note (out, "; reached with no valid superblock (blank or damaged: "
          "the disk behind its URI replaced?): leg(s) ");
    note_legs (out, unreadable);
  }
  note (out, ".  Start anyway with force=true");
}

/* Rules 3 to 6 for an existing volume. */
static void
elect_existing (const struct elect_input *in, struct elect_result *out,
                int preferred)
{
  uint32_t winners = find_winners (in, out, preferred);
  size_t i;

  if (winners == 0)
    return;
  for (i = 0; i < in->nr_legs; ++i)
    if (valid (in, i) &&
        missed_last_bump (&in->legs[out->reference].sb, &in->legs[i].sb))
      winners |= 1u << i;
  out->outcome = ELECT_EXISTING;
  for (i = 0; i < in->nr_legs; ++i) {
    if (is_async (in, i))
      continue;
    if (winners & (1u << i))
      out->role[i] = ROLE_UPTODATE;
    else if (!classify (in, out, i, preferred >= 0))
      return;
  }
  check_members (in, out);
}

static void elect_sync (const struct elect_input *in,
                        struct elect_result *out);

/* Was leg i uptodate at the generation it holds (its own superblock
 * names its slot a member): a synchronous leg once, or an asynchronous
 * one promoted by a failover, whose writes no other leg may hold.
 */
static bool
member_of_own_gen (const struct elect_input *in, size_t i)
{
  const struct superblock *sb = &in->legs[i].sb;

  return sb->slot < sb->max_legs &&
    (sb->slots[sb->slot].flags & SLOT_MEMBER) &&
    memcmp (sb->slots[sb->slot].uuid, sb->leg_uuid, 16) == 0;
}

/* Rule 7: the role of each asynchronous leg once the others are
 * decided.  Returns false (and refuses) if one was a member of a
 * generation the winners do not know: a leg promoted by a failover
 * that took writes since (a failback must not drop them silently:
 * prefer= chooses).
 */
static bool
classify_async (const struct elect_input *in, struct elect_result *out)
{
  const struct superblock *r =
    out->reference >= 0 ? &in->legs[out->reference].sb : NULL;
  char g1[40], g2[40];
  size_t i;

  for (i = 0; i < in->nr_legs; ++i) {
    const struct superblock *sb = &in->legs[i].sb;
    if (!is_async (in, i))
      continue;
    if (!in->legs[i].reachable)
      out->role[i] = ROLE_MISSING;
    else if (r && valid_any (in, i) && sb_owns_slot (r, sb) &&
             gen_equal (sb->gen, r->slots[sb->slot].bm_gen))
      out->role[i] = ROLE_INCREMENTAL;
    else if (r && valid_any (in, i) && member_of_own_gen (in, i) &&
             !(sb->flags & SB_INCONSISTENT) && !gen_equal (sb->gen, r->gen) &&
             !sb_knows_gen (r, sb->gen) && in->prefer < 0) {
      out->split_brain = true;
      decide (out, ELECT_REFUSE, "split brain: asynchronous leg %zu "
              "(generation %s) was uptodate at a generation leg %d "
              "(generation %s) does not know: it took writes on its own "
              "(a failover to it?); choose the leg to keep with "
              "prefer=INDEX (force=true to keep an asynchronous one)",
              i, gen_str (sb->gen, g1, sizeof g1), out->reference,
              gen_str (r->gen, g2, sizeof g2));
      return false;
    }
    else
      out->role[i] = ROLE_FULL;
  }
  return true;
}

/* Rule 7: no synchronous leg to start from, but asynchronous legs with
 * our metadata are reachable: say how to fail over to one.
 */
static void
note_failover (const struct elect_input *in, struct elect_result *out)
{
  uint32_t reachable = 0, sync_valid = 0;
  size_t i;

  for (i = 0; i < in->nr_legs; ++i) {
    if (is_async (in, i) && valid_any (in, i))
      reachable |= 1u << i;
    if (valid (in, i) && !(in->legs[i].sb.flags & SB_INCONSISTENT))
      sync_valid |= 1u << i;
  }
  if (reachable == 0 || sync_valid != 0)
    return;
  note (out, "; only asynchronous leg(s) ");
  note_legs (out, reachable);
  note (out, " can be reached: to fail over to one (its data is as of its "
        "lag), start with prefer=INDEX force=true");
}

/* Elect (see the rules above).  prefer= is used only to resolve a split
 * brain: left on the command line, it must never roll a volume back to
 * an older leg.
 */
void
elect (const struct elect_input *in_given, struct elect_result *out)
{
  struct elect_input promoted = *in_given;
  const struct elect_input *in = &promoted;

  memset (out, 0, sizeof *out);
  out->reference = -1;
  out->promoted = -1;
  /* Rule 7: prefer= with force=true naming an asynchronous leg promotes
   * it; it is then a synchronous leg like any other.
   */
  if (in->prefer >= 0 && is_async (in, (size_t) in->prefer) && in->force) {
    promoted.async &= (uint16_t) ~(1u << in->prefer);
    out->promoted = in->prefer;
  }
  elect_sync (in, out);
  if (out->outcome == ELECT_REFUSE || out->outcome == ELECT_WAIT)
    note_failover (in, out);
  else if (!classify_async (in, out))
    note_failover (in, out);
}

/* Only asynchronous legs hold the volume's metadata: wait for the
 * synchronous legs, then refuse (the caller says how to fail over).
 * Returns true if it decided.
 */
static bool
no_sync_metadata (const struct elect_input *in, struct elect_result *out)
{
  uint32_t unreachable = 0;
  size_t i;

  for (i = 0; i < in->nr_legs; ++i) {
    if (valid (in, i))
      return false;
    if (!is_async (in, i) && !in->legs[i].reachable)
      unreachable |= 1u << i;
  }
  if (!in->final && unreachable) {
    decide (out, ELECT_WAIT, "waiting for legs: ");
    note_legs (out, unreachable);
    return true;
  }
  decide (out, ELECT_REFUSE, "no synchronous leg holds the volume");
  if (unreachable) {
    note (out, " (unreachable: leg(s) ");
    note_legs (out, unreachable);
    note (out, ")");
  }
  return true;
}

/* Rules 1 to 6. */
static void
elect_sync (const struct elect_input *in, struct elect_result *out)
{
  int first;

  first = check_one_volume (in, out);
  if (first == -2 || check_distinct_legs (in, out) == -1)
    return;
  if (first == -1) {
    elect_new (in, out);
    return;
  }
  if (no_sync_metadata (in, out))
    return;
  elect_existing (in, out, -1);
  if (out->split_brain && in->prefer >= 0) {
    char why[sizeof out->message];
    int promoted = out->promoted;
    memcpy (why, out->message, sizeof why);
    memset (out, 0, sizeof *out);
    out->reference = -1;
    out->promoted = promoted;
    elect_existing (in, out, in->prefer);
    out->split_brain = out->outcome != ELECT_EXISTING;
    if (out->outcome == ELECT_EXISTING)
      note (out, "prefer=%d resolved a split brain: leg %d wins. ",
            in->prefer, in->prefer);
    else
      note (out, " (the split brain: %s)", why);
  }
}
