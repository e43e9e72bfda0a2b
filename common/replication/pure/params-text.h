/* SPDX-License-Identifier: BSD-3-Clause */
/* What the parameter parsers (params.c, uri.c) share: the text helpers
 * of params-text.c and a few limits.
 */

#ifndef REPLICATE_PARAMS_TEXT_H
#define REPLICATE_PARAMS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])
#define DIGITS "0123456789"

/* The longest path a Unix socket address holds. */
#define SUN_PATH_MAX (sizeof ((struct sockaddr_un *) 0)->sun_path - 1)

extern void msg_append (char *err, size_t errlen, const char *fs, ...)
  __attribute__ ((format (printf, 3, 4)));
extern void msg_append_quoted (char *err, size_t errlen, const char *s);
extern void msg_append_list (char *err, size_t errlen,
                             const char *const *names, size_t n);
extern void msg_clear (char *err, size_t errlen);
extern int msg_fail (char *err, size_t errlen, const char *fs, ...)
  __attribute__ ((format (printf, 3, 4)));
extern void msg_begin_value (char *err, size_t errlen, const char *key,
                             const char *value);
extern int msg_bad_value (char *err, size_t errlen, const char *key,
                          const char *value, const char *fs, ...)
  __attribute__ ((format (printf, 5, 6)));

extern bool text_is_digit (char c);
extern bool text_is_hex (char c);
extern int text_parse_digits (const char *s, size_t len, uint64_t *r);

#endif /* REPLICATE_PARAMS_TEXT_H */
