/* SPDX-License-Identifier: BSD-3-Clause */
/* The control socket (control.c) and the status it reports (status.c). */

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

/* Answer one request (a decoded JSON object) from owner, the client
 * connection it came from (a backup it begins ends if the connection
 * does).  Returns a new reply object: {"ok": true, ...} or
 * {"ok": false, "error": "..."}.
 */
extern json_t *control_handle (struct volume *v, json_t *req,
                               const void *owner);

/* The status reply of DESIGN.md section 9 (a new object). */
extern json_t *status_json (struct volume *v);

#endif /* REPLICATE_CONTROL_H */
