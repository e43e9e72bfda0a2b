/* SPDX-License-Identifier: BSD-3-Clause */
/* The control socket (control.c), its commands (ctlcmd.c) and the
 * status it reports (status.c).
 */

#ifndef REPLICATE_CONTROL_H
#define REPLICATE_CONTROL_H

#include <jansson.h>

struct volume;

/* Check that control=PATH is absent or a stale socket (at
 * .config_complete, before the fork).  Returns 0, or -1 after an error
 * naming the parameter and the path.
 */
extern int control_check_path (const char *path);

/* Listen on control=PATH and serve requests in a thread. */
extern int control_start (struct volume *v);
extern void control_stop (struct volume *v);

/* Answer one decoded request (ctlreq.h) from owner, the client
 * connection it came from (a backup it begins ends if the connection
 * does), in the control thread (ctlcmd.c).  Returns a new reply object:
 * {"ok": true, ...} or {"ok": false, "error": "..."}; NULL if out of
 * memory.
 */
struct ctlreq;
extern json_t *ctlcmd_answer (struct volume *v, const struct ctlreq *r,
                              const void *owner);

/* The status reply of DESIGN.md section 9 (a new object). */
extern json_t *status_json (struct volume *v);

#endif /* REPLICATE_CONTROL_H */
