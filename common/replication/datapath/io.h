/* SPDX-License-Identifier: BSD-3-Clause */
/* The client data path's pieces that aio.c and verify share. See io.c. */

#ifndef REPLICATE_IO_H
#define REPLICATE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Steps 3 to 7 of one piece whose range lock the caller holds (verify
 * repairs under the lock it compared with).
 */
extern int io_write_locked (struct volume *v, const struct leg_cmd *cmd,
                            uint16_t *counted);

/* Queue cmd for the asynchronous legs in async (range lock and
 * activity-log extents held).
 */
extern void io_queue_async (struct volume *v, uint16_t async,
                            const struct leg_cmd *cmd);
/* The volume did not keep cmd, queued for the asynchronous legs in
 * async: they fall behind with its range in their bitmaps (range lock
 * and extents held).
 */
extern void io_discard_async (struct volume *v, uint16_t async,
                              const struct leg_cmd *cmd);
/* Largest piece a write-like request is cut into. */
extern uint64_t io_max_piece (struct volume *v);
/* piece, or less: what every leg accepts of a request of op. */
extern uint64_t io_piece_within (struct volume *v, enum leg_op op,
                                 uint64_t piece);

/* Mark [offset, offset+count) in the bitmaps of the absent slots. */
extern void io_mark_absent (struct volume *v, uint16_t absent,
                            uint64_t offset, uint64_t count);

/* Choose the leg for a read among candidates. */
extern int io_choose_read_leg (struct volume *v, uint16_t candidates);

/* Leg li, chosen among the uptodate legs `up`, answered a read-like
 * command with error e (its connections' epoch at issue: epoch).
 */
extern int io_read_failed (struct volume *v, uint16_t up, unsigned li,
                           unsigned epoch, int e);

/* Send a read-like command (read, extents) to one uptodate leg after
 * another, skipping the legs in `tried`, until one answers.
 */
extern int io_read_from_legs (struct volume *v, const struct leg_cmd *cmd,
                              uint16_t tried, int last, int *err);

#endif /* REPLICATE_IO_H */
