/* SPDX-License-Identifier: BSD-3-Clause */
/* A store's target and options: parsing them into a struct bs_config.
 *
 * A target is s3://BUCKET[/PREFIX] or http(s)://HOST[/PATH] (WebDAV),
 * with options as KEY=VALUE (BS_OPTIONS_HELP), each checked against the
 * target's kind.  A target never carries a login: credentials= names
 * where they are (store.c reads them when the store is opened).
 */

#include <config.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "grammar.h"
#include "internal.h"

#define DEFAULT_CONNECTIONS 8
#define DEFAULT_RETRIES 5
#define DEFAULT_TIMEOUT 120.0

static const char *const config_keys[] = {
  "endpoint", "region", "addressing", "credentials", "profile", "cafile",
  "insecure", "connections", "retries", "timeout",
};

/* Is [key, key + len) a store option? */
static bool
is_key (const char *key, size_t len)
{
  size_t i;

  for (i = 0; i < sizeof config_keys / sizeof config_keys[0]; ++i)
    if (strlen (config_keys[i]) == len &&
        strncmp (key, config_keys[i], len) == 0)
      return true;
  return false;
}

/* Is key a store option? */
bool
bs_config_is_key (const char *key)
{
  return is_key (key, strlen (key));
}

/* Is arg KEY=VALUE with a store option's KEY? */
bool
bs_is_option (const char *arg)
{
  const char *eq = strchr (arg, '=');

  return eq && is_key (arg, (size_t) (eq - arg));
}

/* Free a configuration. */
void
bs_config_free (struct bs_config *cfg)
{
  if (cfg == NULL)
    return;
  free (cfg->target);
  free (cfg->bucket);
  free (cfg->prefix);
  free (cfg->base_url);
  free (cfg->endpoint);
  free (cfg->region);
  free (cfg->addressing);
  free (cfg->credentials);
  free (cfg->profile);
  free (cfg->cafile);
  free (cfg);
}

/* Split "s3://bucket/prefix/" into bucket and prefix (no slashes at its
 * ends).
 */
static int
parse_s3_target (struct bs_config *cfg, const char *rest)
{
  const char *slash = strchr (rest, '/');
  size_t blen = slash ? (size_t) (slash - rest) : strlen (rest);
  const char *p = slash ? slash : "";
  size_t plen;

  while (*p == '/')
    p++;
  plen = strlen (p);
  while (plen > 0 && p[plen - 1] == '/')
    plen--;
  if (blen < 3 || blen > 63 ||
      strspn (rest, "abcdefghijklmnopqrstuvwxyz0123456789.-") < blen) {
    nbdkit_error ("s3://%.*s: not a bucket name (3 to 63 lower-case "
                  "letters, digits, dots and dashes)", (int) blen, rest);
    return -1;
  }
  cfg->bucket = strndup (rest, blen);
  cfg->prefix = strndup (p, plen);
  if (cfg->bucket == NULL || cfg->prefix == NULL ||
      asprintf (&cfg->target, "s3://%s%s%s", cfg->bucket,
                plen ? "/" : "", cfg->prefix) == -1) {
    cfg->target = NULL;
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Keep an http(s) URL as the base collection (with a trailing '/'). */
static int
parse_dav_target (struct bs_config *cfg, const char *target)
{
  size_t len = strlen (target);
  const char *host = strstr (target, "://") + 3;

  if (strchr (target, '?') || strchr (target, '#') ||
      strcspn (host, "/@") == 0 || strchr (host, '@')) {
    nbdkit_error ("a WebDAV target is http(s)://HOST[:PORT][/PATH], "
                  "without user, query or fragment (credentials= names "
                  "a netrc file)");
    return -1;
  }
  while (len > 0 && target[len - 1] == '/')
    len--;
  if (asprintf (&cfg->base_url, "%.*s/", (int) len, target) == -1) {
    cfg->base_url = NULL;
    nbdkit_error ("out of memory");
    return -1;
  }
  if ((cfg->target = strndup (target, len)) == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

/* Parse a target into a new configuration with the default options. */
struct bs_config *
bs_config_new (const char *target)
{
  struct bs_config *cfg = calloc (1, sizeof *cfg);
  int r;

  if (cfg == NULL) {
    nbdkit_error ("out of memory");
    return NULL;
  }
  cfg->connections = DEFAULT_CONNECTIONS;
  cfg->retries = DEFAULT_RETRIES;
  cfg->timeout = DEFAULT_TIMEOUT;
  if (strncmp (target, "s3://", 5) == 0) {
    cfg->kind = BS_S3;
    r = parse_s3_target (cfg, target + 5);
  }
  else if (strncmp (target, "http://", 7) == 0 ||
           strncmp (target, "https://", 8) == 0) {
    cfg->kind = BS_DAV;
    r = parse_dav_target (cfg, target);
  }
  else {
    nbdkit_error ("%s: a target is s3://BUCKET[/PREFIX] or "
                  "http(s)://HOST[/PATH] (WebDAV)",
                  strchr (target, '@') ? "the target" : target);
    r = -1;
  }
  if (r == -1) {
    bs_config_free (cfg);
    return NULL;
  }
  return cfg;
}

/* Parse an unsigned option value within [min, max], as
 * nbdkit_parse_unsigned reads numbers (0x10 and 010 too; this library
 * also runs in nbdrep, hence common/utils/grammar.c).
 */
static int
parse_unsigned (const char *key, const char *value, unsigned min,
                unsigned max, unsigned *out)
{
  uint64_t v;

  if (grammar_parse_unsigned (value, max, &v) != 0 || v < min) {
    nbdkit_error ("%s=%s: not a number from %u to %u", key, value, min, max);
    return -1;
  }
  *out = (unsigned) v;
  return 0;
}

/* Parse a number of seconds in (0, 1 day]. */
static int
parse_seconds (const char *key, const char *value, double *out)
{
  char *end;
  double t = strtod (value, &end);

  if (end == value || *end || !(t > 0 && t <= 86400)) {
    nbdkit_error ("%s=%s: not a number of seconds", key, value);
    return -1;
  }
  *out = t;
  return 0;
}

/* Parse a boolean as nbdkit does (1/0, true/false, yes/no, on/off ...). */
static int
parse_bool (const char *key, const char *value, bool *out)
{
  int b = grammar_parse_bool (value);

  if (b == -1) {
    nbdkit_error ("%s=%s: not a boolean", key, value);
    return -1;
  }
  *out = b;
  return 0;
}

/* The string field of option key, or NULL if it is not a string
 * option.
 */
static char **
string_field (struct bs_config *cfg, const char *key)
{
  static const struct { const char *key; size_t offset; } fields[] = {
    { "endpoint", offsetof (struct bs_config, endpoint) },
    { "region", offsetof (struct bs_config, region) },
    { "addressing", offsetof (struct bs_config, addressing) },
    { "credentials", offsetof (struct bs_config, credentials) },
    { "profile", offsetof (struct bs_config, profile) },
    { "cafile", offsetof (struct bs_config, cafile) },
  };
  size_t i;

  for (i = 0; i < sizeof fields / sizeof fields[0]; ++i)
    if (strcmp (key, fields[i].key) == 0)
      return (char **) ((char *) cfg + fields[i].offset);
  return NULL;
}

/* Set a string option (checking that it suits the target). */
static int
set_string (struct bs_config *cfg, const char *key, const char *value)
{
  char **field = string_field (cfg, key);
  bool s3_only = strcmp (key, "endpoint") == 0 ||
    strcmp (key, "region") == 0 || strcmp (key, "addressing") == 0 ||
    strcmp (key, "profile") == 0;
  char *v;

  if (field == NULL) {
    nbdkit_error ("unknown store option %s=", key);
    return -1;
  }
  if (s3_only && cfg->kind == BS_DAV) {
    nbdkit_error ("%s= is for s3:// targets, not for %s", key, cfg->target);
    return -1;
  }
  if (strcmp (key, "addressing") == 0 && strcmp (value, "path") != 0 &&
      strcmp (value, "virtual") != 0) {
    nbdkit_error ("addressing=%s: must be path or virtual", value);
    return -1;
  }
  if ((v = strdup (value)) == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  free (*field);
  *field = v;
  return 0;
}

/* Set an option from "KEY=VALUE". */
int
bs_config_set (struct bs_config *cfg, const char *option)
{
  const char *eq = strchr (option, '=');
  CLEANUP_FREE char *key = NULL;
  const char *value;

  if (eq == NULL) {
    nbdkit_error ("%s: a store option is KEY=VALUE", option);
    return -1;
  }
  if ((key = strndup (option, (size_t) (eq - option))) == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  value = eq + 1;
  if (strcmp (key, "connections") == 0)
    return parse_unsigned (key, value, 1, 64, &cfg->connections);
  if (strcmp (key, "retries") == 0)
    return parse_unsigned (key, value, 0, 20, &cfg->retries);
  if (strcmp (key, "timeout") == 0)
    return parse_seconds (key, value, &cfg->timeout);
  if (strcmp (key, "insecure") == 0)
    return parse_bool (key, value, &cfg->insecure);
  return set_string (cfg, key, value);
}
