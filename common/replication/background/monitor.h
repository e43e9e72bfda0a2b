/* SPDX-License-Identifier: BSD-3-Clause */
/* The monitor thread: reconnects failed legs, starts resyncs. See
 * monitor.c.
 */

#ifndef REPLICATE_MONITOR_H
#define REPLICATE_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* What a leg that answers (again) is to the running volume. */
enum verdict { V_UPTODATE, V_INCREMENTAL, V_FULL, V_REFUSE, V_UNREACHABLE };

/* Connect a leg and judge it. */
extern enum verdict monitor_examine_leg (struct volume *v, struct leg *l,
                                         char *err, size_t len);

/* Act on a good verdict: rejoin as uptodate, or become stale (the
 * resync kind remembered).
 */
extern int monitor_apply_verdict (struct volume *v, struct leg *l,
                                  enum verdict verdict);

/* The operator says the server of l has been restarted or is gone:
 * forget the connections it was waited for on (drain_forget), as l and
 * as removed legs of the same URI.
 */
extern size_t monitor_forget_old_connections (struct volume *v,
                                              struct leg *l);

/* Start the monitor. */
extern int monitor_start (struct volume *v);

/* Stop the monitor and every resync (they finish their current run). */
extern void monitor_stop (struct volume *v);

#endif /* REPLICATE_MONITOR_H */
