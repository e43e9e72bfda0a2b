/* SPDX-License-Identifier: BSD-3-Clause */
/* Start-up's first part: reach the legs, elect.  See start-reach.c. */

#ifndef REPLICATE_START_REACH_H
#define REPLICATE_START_REACH_H

#include "internal.h"
#include "election.h"

/* Open legs and elect, waiting up to wait= while the election asks for
 * more legs (metadata=internal).  Returns 0 with the result in res, or
 * -1 after nbdkit_error.
 */
extern int start_open_and_elect (struct volume *v, struct elect_input *in,
                                 struct elect_result *res);

/* Open every leg, waiting up to wait= for all of them (metadata=none).
 * Returns 0, or -1 after nbdkit_error naming those that did not open.
 */
extern int start_open_all (struct volume *v);

#endif /* REPLICATE_START_REACH_H */
