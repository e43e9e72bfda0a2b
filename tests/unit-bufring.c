/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of the byte ring of the asynchronous legs' queue
 * (common/replication/pure/bufring.c).
 *
 * - A table of scripts: each step takes a block of some size (expecting
 *   room or not) or gives back an earlier one; after each step the
 *   ring's used bytes are checked.  The rows cover the wrap with a
 *   filler, a full ring, a block as large as the ring, out-of-order
 *   give-backs holding the tail, and the reset to empty.
 * - A random run against a model: live blocks never overlap, their
 *   data survives every other take and give-back, and a take fails only
 *   when no placement the layout allows would fit.
 */

#include <config.h>

#include <stdint.h>
#include <string.h>

#include "bufring.h"
#include "unit.h"

#define A BUFRING_ALIGN
#define MAX_STEPS 16

/* One step of a script: take `len` bytes (ok: expect room), or give
 * back the block taken at step `back` (len 0).
 */
struct step {
  size_t len;
  bool ok;
  int back;
  size_t used;                  /* the ring's used bytes after the step */
};

struct script {
  const char *name;
  size_t size;
  struct step steps[MAX_STEPS];
};

/* A block of n data bytes costs a header and n aligned. */
#define COST(n) (A + (((n) + A - 1) / A) * A)

static const struct script scripts[] = {
  { "take and give back in order", 8 * A, {
      { A, true, -1, COST (A) },
      { 1, true, -1, COST (A) + COST (1) },
      { 0, false, 0, COST (1) },
      { 0, false, 1, 0 },
      { .len = (size_t) -1 } } },
  { "a zero-length take is refused", 8 * A, {
      { 0, false, -1, 0 },
      { .len = (size_t) -1 } } },
  { "full, then room again", 4 * A, {
      { A, true, -1, 2 * A },
      { A, true, -1, 4 * A },
      { 1, false, -1, 4 * A },
      { 0, false, 0, 2 * A },
      { A, true, -1, 4 * A },
      { .len = (size_t) -1 } } },
  { "a block as large as the ring", 4 * A, {
      { 3 * A, true, -1, 4 * A },
      { 0, false, 0, 0 },
      { 3 * A + 1, false, -1, 0 },
      { .len = (size_t) -1 } } },
  { "wrap with a filler", 8 * A, {
      { 2 * A, true, -1, 3 * A },
      { 2 * A, true, -1, 6 * A },
      { 0, false, 0, 3 * A },           /* tail at 3A, head at 6A */
      { 2 * A, true, -1, 3 * A + 2 * A + 3 * A },  /* filler 2A, then [0,3A) */
      { A, false, -1, 8 * A },
      { 0, false, 1, 3 * A },           /* the filler goes with it */
      { 0, false, 3, 0 },
      { .len = (size_t) -1 } } },
  { "no wrap when the start is too small", 8 * A, {
      { A, true, -1, 2 * A },
      { 3 * A, true, -1, 6 * A },
      { 0, false, 0, 4 * A },           /* tail at 2A, head at 6A */
      { 2 * A, false, -1, 4 * A },      /* 2A at the end, 2A at the start */
      { A, true, -1, 6 * A },           /* fits at the end */
      { .len = (size_t) -1 } } },
  { "out of order: the tail waits for the oldest", 8 * A, {
      { A, true, -1, 2 * A },
      { A, true, -1, 4 * A },
      { A, true, -1, 6 * A },
      { 0, false, 1, 6 * A },
      { 0, false, 2, 6 * A },
      { 2 * A, false, -1, 6 * A },      /* 2A free at the end, 3A needed */
      { 0, false, 0, 0 },               /* all three go at once */
      { 3 * A, true, -1, 4 * A },       /* reset to the start */
      { .len = (size_t) -1 } } },
};

/* Run one script. */
static void
run_script (const struct script *s)
{
  struct bufring r;
  void *blocks[MAX_STEPS] = { NULL };
  size_t i;

  CHECKF (bufring_init (&r, s->size) == 0, "%s: init", s->name);
  for (i = 0; i < MAX_STEPS && s->steps[i].len != (size_t) -1; ++i) {
    const struct step *st = &s->steps[i];
    if (st->back >= 0) {
      bufring_give_back (&r, blocks[st->back]);
    }
    else {
      blocks[i] = bufring_take (&r, st->len);
      CHECKF ((blocks[i] != NULL) == st->ok, "%s: step %zu: take %zu: %s",
              s->name, i, st->len, blocks[i] ? "room" : "no room");
      if (blocks[i])
        CHECKF (((uintptr_t) blocks[i]) % A == 0, "%s: step %zu aligned",
                s->name, i);
    }
    CHECKF (r.used == st->used, "%s: step %zu: used %zu, expected %zu",
            s->name, i, r.used, st->used);
  }
  bufring_destroy (&r);
  CHECKF (bufring_take (&r, A) == NULL && r.used == 0,
          "%s: a destroyed ring has no room", s->name);
  bufring_destroy (&r);                 /* a second destroy is harmless */
}

#define LIVE 64

struct live {
  uint8_t *p;
  size_t len;
  uint8_t fill;
};

/* Does a block of len bytes have room by the layout's rule? */
static bool
model_has_room (const struct bufring *r, size_t len)
{
  size_t need = COST (len);

  if (need > r->size - r->used)
    return false;
  if (r->used == 0)
    return true;
  if (r->head >= r->tail)
    return need <= r->size - r->head || need <= r->tail;
  return need <= r->tail - r->head;
}

/* A fixed pseudo-random sequence (xorshift64), the same every run. */
static uint64_t
next_random (uint64_t *x)
{
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Random takes and give-backs against the model. */
static void
run_random (void)
{
  uint64_t rs = 1234;
  struct bufring r;
  struct live live[LIVE];
  size_t nr = 0, i, j, k, taken = 0;

  CHECK (bufring_init (&r, 64 * 1024) == 0);
  for (i = 0; i < 200000; ++i) {
    bool take = nr == 0 || (nr < LIVE && next_random (&rs) % 3 != 0);
    if (take) {
      size_t len = 1 + next_random (&rs) % (next_random (&rs) % 8 ? 4200 : 40000);
      bool room = model_has_room (&r, len);
      uint8_t *p = bufring_take (&r, len);
      CHECKF ((p != NULL) == room, "random step %zu: take %zu", i, len);
      if (p == NULL)
        continue;
      for (j = 0; j < nr; ++j)
        CHECKF (p + len <= live[j].p || live[j].p + live[j].len <= p,
                "random step %zu: overlap", i);
      live[nr] = (struct live) { p, len, (uint8_t) i };
      memset (p, live[nr].fill, len);
      nr++;
      taken++;
    }
    else {
      /* Mostly the oldest, sometimes another. */
      k = next_random (&rs) % 4 ? 0 : next_random (&rs) % nr;
      for (j = 0; j < live[k].len; ++j)
        if (live[k].p[j] != live[k].fill)
          break;
      CHECKF (j == live[k].len, "random step %zu: data changed", i);
      bufring_give_back (&r, live[k].p);
      memmove (&live[k], &live[k + 1], (nr - k - 1) * sizeof *live);
      nr--;
    }
  }
  while (nr > 0)
    bufring_give_back (&r, live[--nr].p);
  CHECK (r.used == 0 && r.head == 0 && r.tail == 0);
  CHECK (taken > 50000);
  bufring_destroy (&r);
}

int
main (void)
{
  size_t i;

  for (i = 0; i < sizeof scripts / sizeof scripts[0]; ++i)
    run_script (&scripts[i]);
  run_random ();
  return unit_exit ("unit-bufring");
}
