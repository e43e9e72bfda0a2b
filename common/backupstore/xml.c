/* SPDX-License-Identifier: BSD-3-Clause */
/* Just enough XML for S3 listings and errors and WebDAV multistatus.
 *
 * The documents are small, machine-written and flat where we read
 * them: an element we look for never contains another of the same
 * name.  So an element is found by scanning for its start tag, with
 * any namespace prefix ("D:href", "href"), and its end tag; comments,
 * CDATA and DTDs are not handled (no server sends them here).  Text is
 * returned with the five predefined entities and numeric character
 * references decoded.  Pure functions, thread-safe.  The text must
 * have a NUL at or after end (response bodies do: struct bs_buf):
 * numeric references are parsed with strtoul, which stops there.
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "backupstore.h"

/* Does the tag name at [p, end) (after '<' or '</') have local name
 * name, followed by '>', '/', or white space?  Sets *after to the
 * character after the name.
 */
static bool
tag_matches (const char *p, const char *end, const char *name,
             const char **after)
{
  const char *q = p, *local = p;
  size_t n = strlen (name);

  while (q < end && *q != '>' && *q != '/' && *q != ' ' && *q != '\t' &&
         *q != '\r' && *q != '\n') {
    if (*q == ':')
      local = q + 1;
    q++;
  }
  *after = q;
  return (size_t) (q - local) == n && memcmp (local, name, n) == 0 &&
    q < end;
}

/* Find the end tag of name from p; returns where it starts, or NULL. */
static const char *
find_end_tag (const char *p, const char *end, const char *name,
              const char **after_end)
{
  const char *after;

  while ((p = memchr (p, '<', (size_t) (end - p))) != NULL) {
    if (p + 1 < end && p[1] == '/' &&
        tag_matches (p + 2, end, name, &after)) {
      const char *gt = memchr (after, '>', (size_t) (end - after));
      if (gt == NULL)
        return NULL;
      *after_end = gt + 1;
      return p;
    }
    p++;
  }
  return NULL;
}

/* Find the next element. */
bool
xml_next (const char **p, const char *end, const char *name,
          const char **content, size_t *len)
{
  const char *q = *p, *after, *gt, *close, *after_end;

  while (q < end && (q = memchr (q, '<', (size_t) (end - q))) != NULL) {
    if (q + 1 < end && q[1] != '/' && tag_matches (q + 1, end, name,
                                                   &after)) {
      gt = memchr (after, '>', (size_t) (end - after));
      if (gt == NULL)
        return false;
      if (gt > q && gt[-1] == '/') {      /* <name/> */
        *content = gt + 1;
        *len = 0;
        *p = gt + 1;
        return true;
      }
      close = find_end_tag (gt + 1, end, name, &after_end);
      if (close == NULL)
        return false;
      *content = gt + 1;
      *len = (size_t) (close - (gt + 1));
      *p = after_end;
      return true;
    }
    q++;
  }
  return false;
}

/* Append the UTF-8 encoding of code point c at *q. */
static void
put_utf8 (char **q, unsigned long c)
{
  char *o = *q;

  if (c < 0x80)
    *o++ = (char) c;
  else if (c < 0x800) {
    *o++ = (char) (0xc0 | c >> 6);
    *o++ = (char) (0x80 | (c & 0x3f));
  }
  else if (c < 0x10000) {
    *o++ = (char) (0xe0 | c >> 12);
    *o++ = (char) (0x80 | (c >> 6 & 0x3f));
    *o++ = (char) (0x80 | (c & 0x3f));
  }
  else {
    *o++ = (char) (0xf0 | (c >> 18 & 0x07));
    *o++ = (char) (0x80 | (c >> 12 & 0x3f));
    *o++ = (char) (0x80 | (c >> 6 & 0x3f));
    *o++ = (char) (0x80 | (c & 0x3f));
  }
  *q = o;
}

/* Decode the entity at *p (just after '&') into *q; false if it is not
 * one we know (then the '&' is kept).
 */
static bool
decode_entity (const char **p, const char *end, char **q)
{
  static const struct { const char *name; char c; } named[] = {
    { "amp;", '&' }, { "lt;", '<' }, { "gt;", '>' }, { "quot;", '"' },
    { "apos;", '\'' },
  };
  const char *s = *p;
  size_t i;

  for (i = 0; i < sizeof named / sizeof named[0]; ++i) {
    size_t n = strlen (named[i].name);
    if ((size_t) (end - s) >= n && memcmp (s, named[i].name, n) == 0) {
      *(*q)++ = named[i].c;
      *p = s + n;
      return true;
    }
  }
  if (s < end && *s == '#') {
    const char *semi = memchr (s, ';', (size_t) (end - s));
    char *stop;
    unsigned long c;
    if (semi == NULL)
      return false;
    c = s[1] == 'x' ? strtoul (s + 2, &stop, 16) : strtoul (s + 1, &stop, 10);
    if (stop != semi || c == 0 || c > 0x10ffff)
      return false;
    put_utf8 (q, c);
    *p = semi + 1;
    return true;
  }
  return false;
}

/* The decoded text of the first element name. */
char *
xml_text (const char *p, const char *end, const char *name)
{
  const char *content, *s, *cend;
  size_t len;
  char *out, *q;

  if (!xml_next (&p, end, name, &content, &len))
    return NULL;
  out = q = malloc (len + 1);
  if (out == NULL)
    return NULL;
  cend = content + len;
  for (s = content; s < cend; ) {
    if (*s == '&') {
      s++;
      if (!decode_entity (&s, cend, &q))
        *q++ = '&';
    }
    else
      *q++ = *s++;
  }
  *q = '\0';
  return out;
}
