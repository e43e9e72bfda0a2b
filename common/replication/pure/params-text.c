/* SPDX-License-Identifier: BSD-3-Clause */
/* Text helpers of the parameter parsers (params.c, uri.c): messages and
 * decimal digits (pure).
 *
 * Messages.  Every message names the parameter as KEY=VALUE, the value
 * quoted with control characters escaped as \xNN so that no value can
 * forge a log line.  They are built with msg_append, which truncates
 * safely into any buffer, even one of length 0 (err may then be NULL).
 *
 * Numbers are digits only: no sign, no space, no base prefix.
 */

#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params-text.h"

/* Append formatted text to the message in err, truncating to errlen. */
static void __attribute__ ((format (printf, 3, 0)))
msg_vappend (char *err, size_t errlen, const char *fs, va_list ap)
{
  size_t used;

  if (errlen == 0)
    return;
  used = strnlen (err, errlen);
  if (used + 1 >= errlen)
    return;
  vsnprintf (err + used, errlen - used, fs, ap);
}

/* Append formatted text to the message in err. */
void
msg_append (char *err, size_t errlen, const char *fs, ...)
{
  va_list ap;

  va_start (ap, fs);
  msg_vappend (err, errlen, fs, ap);
  va_end (ap);
}

/* Append s, with control characters escaped as \xNN. */
void
msg_append_quoted (char *err, size_t errlen, const char *s)
{
  for (; *s; s++) {
    unsigned char ch = *s;

    if (ch < 0x20 || ch == 0x7f)
      msg_append (err, errlen, "\\x%02x", ch);
    else
      msg_append (err, errlen, "%c", ch);
  }
}

/* Append "a, b or c" from names[0..n). */
void
msg_append_list (char *err, size_t errlen, const char *const *names, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    msg_append (err, errlen, "%s%s",
                i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
}

/* Start a new message. */
void
msg_clear (char *err, size_t errlen)
{
  if (errlen > 0)
    err[0] = '\0';
}

/* Write a message that is not about one KEY=VALUE.  Returns -1. */
int
msg_fail (char *err, size_t errlen, const char *fs, ...)
{
  va_list ap;

  msg_clear (err, errlen);
  va_start (ap, fs);
  msg_vappend (err, errlen, fs, ap);
  va_end (ap);
  return -1;
}

/* Start a message about KEY=VALUE with "KEY=VALUE: ". */
void
msg_begin_value (char *err, size_t errlen, const char *key, const char *value)
{
  msg_clear (err, errlen);
  msg_append (err, errlen, "%s=", key);
  msg_append_quoted (err, errlen, value);
  msg_append (err, errlen, ": ");
}

/* Write "KEY=VALUE: " and the formatted text.  Returns -1. */
int
msg_bad_value (char *err, size_t errlen, const char *key, const char *value,
               const char *fs, ...)
{
  va_list ap;

  msg_begin_value (err, errlen, key, value);
  va_start (ap, fs);
  msg_vappend (err, errlen, fs, ap);
  va_end (ap);
  return -1;
}

/* Is c an ASCII digit? */
bool
text_is_digit (char c)
{
  return c >= '0' && c <= '9';
}

/* Is c a hexadecimal digit? */
bool
text_is_hex (char c)
{
  return text_is_digit (c) || (c >= 'a' && c <= 'f') ||
    (c >= 'A' && c <= 'F');
}

/* Parse the len bytes at s as a decimal number: digits only, within
 * uint64_t.  Returns 0 or -1.
 */
int
text_parse_digits (const char *s, size_t len, uint64_t *r)
{
  unsigned long long n;
  char *end;
  size_t i;

  if (len == 0)
    return -1;
  for (i = 0; i < len; i++)
    if (!text_is_digit (s[i]))
      return -1;
  errno = 0;
  n = strtoull (s, &end, 10);
  if (errno != 0 || end != s + len)
    return -1;
  *r = n;
  return 0;
}
