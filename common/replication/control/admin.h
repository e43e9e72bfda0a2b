/* SPDX-License-Identifier: BSD-3-Clause */
/* Operator actions on a running volume (see admin.c). */

#ifndef REPLICATE_ADMIN_H
#define REPLICATE_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

struct volume;
struct leg;

extern int admin_add_leg (struct volume *v, const char *uri, bool async,
                          char *err, size_t errlen);
extern int admin_remove_leg (struct volume *v, unsigned index,
                              char *err, size_t errlen);
extern void admin_restart_stale (struct volume *v, struct leg *l,
                                 const char *why);
extern void admin_refusal_pause (const char *what);
extern bool admin_may_hold_newest (struct volume *v, struct leg *l);
extern int admin_set (struct volume *v, const char *key, const char *value,
                       char *err, size_t errlen);

#endif /* REPLICATE_ADMIN_H */
