/* SPDX-License-Identifier: BSD-3-Clause */
/* Reading and writing metadata records on legs (see metaio.c). */

#ifndef REPLICATE_METAIO_H
#define REPLICATE_METAIO_H

#include <stdint.h>

#include "internal.h"

/* Read a leg's superblock (both copies, the newest valid wins) and
 * set *st to META_OK, META_BLANK or META_CORRUPT (reason in err).
 * Returns 0, or -1 if the leg could not be read (reason in err).
 */
extern int metaio_read_sb (struct leg *l, struct superblock *sb,
                         enum meta_status *st, char *err, size_t errlen);

/* Read a leg's activity log into extents (capacity v->layout.al_extents)
 * and its seq, setting *st as metaio_read_sb does.  Returns 0 or -1 (I/O).
 */
extern int metaio_read_al (struct leg *l, uint32_t *extents, uint32_t *nr,
                         uint64_t *seq, enum meta_status *st,
                         char *err, size_t errlen);

/* Make l->al_seq at least the seq of the newest activity log on the leg
 * (a leg joining: it may hold logs from an earlier life).
 */
extern void metaio_learn_al_seq (struct leg *l);

/* OR slot's bitmap as found on legs into v->bitmaps[slot], and learn
 * each page's seq.  Returns 0 or -1 (read error, after nbdkit_error).
 */
extern int metaio_load_bitmap (struct volume *v, unsigned slot, uint16_t legs);

/* Write superblocks (v->sb plus each leg's own fields) to legs.
 * change_lock held.  Returns the legs that failed, their errors in errs
 * (MAX_LEGS entries, or NULL).
 */
extern uint16_t metaio_write_sb (struct volume *v, uint16_t legs, int *errs);
/* Encode leg l's superblock with the next seq into buf (META_BLOCK
 * bytes), for a write made without change_lock.  change_lock held.
 * Returns the seq.
 */
extern uint64_t metaio_encode_sb (struct volume *v, struct leg *l,
                                  uint8_t *buf);

/* Is g a generation written by a bump no leg confirmed, since the
 * volume's generation was last recorded?  A leg holding one stands as
 * if it held the volume's generation.  change_lock held.
 */
extern bool metaio_gen_unrecorded (const struct volume *v, struct gen g);

/* Bump the generation on every uptodate leg (change_lock held); legs
 * that cannot take it are failed and the bump repeated.  Returns 0, or
 * -1 if no uptodate leg is left.
 */
extern int metaio_bump (struct volume *v);

/* Make slot s's bitmap count from generation g (change_lock held, or
 * before the volume runs, and bm_write_lock held: the page writer
 * reads bm_gen under it): its bm_gen, and every page of its bitmap
 * marked for rewriting (a page left on disk under the old bm_gen would
 * read as empty after a restart, whether or not its bits changed).
 */
extern void metaio_set_bm_gen (struct volume *v, unsigned s, struct gen g);

/* Make slot s's bitmap count from generation g as metaio_set_bm_gen
 * does, but leave the old bm_gen in every superblock written until a
 * bitmap write (metaio_persist_bitmaps) has written every page of the
 * slot under g to every leg receiving writes (a full resync's target,
 * whose own superblock already holds g).  change_lock held; takes
 * bm_write_lock.
 */
extern void metaio_defer_bm_gen (struct volume *v, unsigned s, struct gen g);

/* Record that leg l no longer receives writes (change_lock held): the
 * hot extents into its bitmap (a write there may be torn or lost on it,
 * unless it completed every write and was flushed since: `flushed`),
 * its bm_gen if it was a member, and its bitmap pages all to be
 * rewritten for this new absence.  The caller bumps the generation.
 */
extern void metaio_record_absent (struct volume *v, struct leg *l,
                                bool was_uptodate, bool flushed);

/* Record the failure of leg l (see member.c): its hot extents into its
 * bitmap, its bm_gen, a generation bump.  Takes change_lock.  Nothing
 * to do without metadata.
 */
extern void metaio_record_failure (struct volume *v, struct leg *l,
                                 bool was_uptodate);

/* Write the dirty bitmap pages of every slot with a bitmap to every
 * leg receiving writes (legs that fail are failed), every page of a
 * slot whose bm_gen change is deferred; once all are written the change
 * is recorded by the next superblock write.  Returns 0, or -1 if no
 * uptodate leg took them.
 */
extern int metaio_persist_bitmaps (struct volume *v);

/* Write every page of every slot with a bitmap (dirty or not) to legs,
 * with fresh sequence numbers: a leg joining the uptodate set.  Returns
 * the legs that failed.
 */
extern uint16_t metaio_write_all_bitmaps (struct volume *v, uint16_t legs);

/* Allocate the per-leg metadata buffers of a leg. */
extern int metaio_alloc_leg (struct volume *v, struct leg *l);

#endif /* REPLICATE_METAIO_H */
