/* SPDX-License-Identifier: BSD-3-Clause */
/* Judging the legs' answers to a write-like request.  See judge.c. */

#ifndef REPLICATE_JUDGE_H
#define REPLICATE_JUDGE_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

/* Does a set of legs make the volume's quorum? */
extern bool judge_is_quorum (const struct volume *v, uint16_t legs);

/* Judge the answers of a request (what: "write", "flush" ...) sent to
 * legs, of which uptodate were uptodate when it started; fail the legs
 * that must fail.  *counted: the legs a success counts on.  Returns 0
 * or an errno for the client.
 */
extern int judge_write (struct volume *v, struct ioreq *r, uint16_t legs,
                        uint16_t uptodate, const char *what,
                        uint16_t *counted);

/* Wait until no membership change is being recorded; let a success
 * (err 0) stand only if the legs it counted on still make a quorum.
 * Returns the errno for the client.
 */
extern int judge_acknowledge (struct volume *v, int err, uint16_t counted);

/* Flush a set of legs, judge and acknowledge it as a write.  Returns 0,
 * or -1 with *err.
 */
extern int judge_flush_legs (struct volume *v, uint16_t legs, int *err);

#endif /* REPLICATE_JUDGE_H */
