/* SPDX-License-Identifier: BSD-3-Clause */
/* Typed reads of JSON fields that tolerate what is missing.
 *
 * The status reply is a contract (nbdrep(1), CONTROL PROTOCOL), but a
 * controller of another version may lack a field or add one: nbdrep
 * shows what it gets and uses a default for the rest instead of
 * refusing the whole reply.  Numbers may come as integers or reals.
 */

#include <config.h>

#include <jansson.h>

#include "nbdrep.h"

/* An integer field. */
int64_t
jint (const json_t *obj, const char *key, int64_t def)
{
  json_t *v = json_object_get (obj, key);

  if (json_is_integer (v))
    return json_integer_value (v);
  if (json_is_real (v))
    return (int64_t) json_real_value (v);
  return def;
}

/* A non-negative integer field (bytes, counts). */
uint64_t
jcount (const json_t *obj, const char *key)
{
  int64_t n = jint (obj, key, 0);

  return n > 0 ? (uint64_t) n : 0;
}

/* A number field. */
double
jnum (const json_t *obj, const char *key, double def)
{
  json_t *v = json_object_get (obj, key);

  return json_is_number (v) ? json_number_value (v) : def;
}

/* A string field. */
const char *
jstr (const json_t *obj, const char *key)
{
  return json_string_value (json_object_get (obj, key));
}

/* A boolean field. */
bool
jbool (const json_t *obj, const char *key, bool def)
{
  json_t *v = json_object_get (obj, key);

  return json_is_boolean (v) ? json_is_true (v) : def;
}

/* An object field. */
json_t *
jobj (const json_t *obj, const char *key)
{
  json_t *v = json_object_get (obj, key);

  return json_is_object (v) ? v : NULL;
}

/* An array field. */
json_t *
jarr (const json_t *obj, const char *key)
{
  json_t *v = json_object_get (obj, key);

  return json_is_array (v) ? v : NULL;
}
