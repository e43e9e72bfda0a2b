/* SPDX-License-Identifier: BSD-3-Clause */
/* WebDAV: objects are files under the target URL, directories are
 * collections.
 *
 * PUT, GET, HEAD and DELETE as in HTTP.  A PUT into a collection that
 * does not exist gets 409 Conflict (RFC 4918 9.7.1, Apache; nginx
 * without create_full_put_path says 500): the parents are then made
 * with MKCOL, the nearest first and going up only while the server
 * says 409, and the PUT is tried again.  Listings are PROPFIND with
 * Depth: 1 (servers refuse Depth: infinity), walked collection by
 * collection when a whole tree is wanted; a collection that does not
 * exist lists empty.  An href is split and decoded by libxml2's
 * xmlParseURI, as the legs' URIs are; one it cannot parse is not one
 * of ours, and is skipped.
 * credentials=FILE is a netrc file for servers that want a login.
 *
 * An object that must never be seen half-written (a manifest) is PUT
 * under a temporary name beside its own (KEY.partial-RANDOM, which no
 * listing takes for a backup) and MOVEd into place, since not every
 * server writes a PUT atomically (nginx copies its temporary file into
 * place when it is on another filesystem than the files).
 *
 * Nothing here keeps state between requests: the functions are as
 * thread-safe as the store's synchronous requests.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <libxml/uri.h>

#include "cleanup.h"
#include "random.h"
#include "internal.h"

static const char propfind_body[] =
  "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
  "<propfind xmlns=\"DAV:\"><prop><resourcetype/><getlastmodified/>"
  "<getcontentlength/></prop></propfind>\n";

/* The URL of a key. */
char *
dav_url (struct bs_store *s, const char *key)
{
  CLEANUP_FREE char *path = bs_uri_encode (key, true);
  char *url;

  if (path == NULL || asprintf (&url, "%s%s", s->cfg->base_url, path) == -1)
    return NULL;
  return url;
}

/* Add the headers of a request: Depth and the body's type for
 * PROPFIND.
 */
int
dav_add_headers (struct bs_store *s UNUSED, struct bs_request *r)
{
  if (strcmp (r->verb, "PROPFIND") != 0)
    return 0;
  if (req_add_header (r, "Depth: 1") == -1 ||
      req_add_header (r, "Content-Type: application/xml") == -1)
    return -1;
  return 0;
}

/* Set the login options of an easy handle: a netrc file. */
CURLcode
dav_setup (struct bs_store *s, CURL *easy)
{
  CURLcode c = CURLE_OK;

  if (s->cfg->credentials == NULL)
    return c;
  SETOPT (c, easy, CURLOPT_NETRC_FILE, s->cfg->credentials);
  SETOPT (c, easy, CURLOPT_NETRC, (long) CURL_NETRC_REQUIRED);
  return c;
}

/* One MKCOL (405, it exists, is success; 409, its parent is missing,
 * is BS_NOT_FOUND: see classify).
 */
static enum bs_result
mkcol (struct bs_store *s, const char *dir)
{
  struct bs_request *r = req_new (s, "MKCOL", dir, NULL, 0);
  enum bs_result res;

  if (r == NULL)
    return BS_ERROR;
  res = run_sync (r);
  req_free (r);
  return res;
}

/* Make the collection dir ("a/b/", "" for the base), and its parents
 * if they are missing.
 */
static int
make_collection (struct bs_store *s, const char *dir)
{
  enum bs_result res = mkcol (s, dir);

  if (res == BS_NOT_FOUND && *dir) {
    CLEANUP_FREE char *parent = strdup (dir);
    char *slash;
    if (parent == NULL) {
      nbdkit_error ("out of memory");
      return -1;
    }
    parent[strlen (parent) - 1] = '\0';
    slash = strrchr (parent, '/');
    if (slash)
      slash[1] = '\0';
    else
      parent[0] = '\0';
    if (make_collection (s, parent) == -1)
      return -1;
    res = mkcol (s, dir);
  }
  if (res == BS_NOT_FOUND)
    nbdkit_error ("%s/%s: MKCOL: HTTP 409: the parent collection is "
                  "missing", s->cfg->target, dir);
  return res == BS_OK ? 0 : -1;
}

/* Make the collections a key is in. */
int
dav_make_parents (struct bs_store *s, const char *key)
{
  CLEANUP_FREE char *dir = strdup (key);
  char *slash;

  if (dir == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  slash = strrchr (dir, '/');
  if (slash)
    slash[1] = '\0';
  else
    dir[0] = '\0';
  return make_collection (s, dir);
}

/* The decoded path of a URL or of an absolute path, into *path (a
 * new string, NULL if out of memory); -1 if it is not a URI.  libxml2
 * splits and decodes it, as it does the legs' URIs
 * (common/replication/pure/uri.c).
 */
static int
url_path (const char *url, char **path)
{
  xmlURI *u = xmlParseURI (url);

  *path = NULL;
  if (u == NULL)
    return -1;
  *path = strdup (u->path ? u->path : "/");
  xmlFreeURI (u);
  return 0;
}

/* Add the children of one multistatus reply (the reply of r) to out,
 * their names prefixed by name_prefix; dirs collects the
 * subcollections.  -1 after a message.
 */
static int
parse_multistatus (const struct bs_request *r, const char *coll_path,
                   const char *name_prefix, struct bs_list *out,
                   struct bs_list *dirs)
{
  CLEANUP_XML_DOC xmlDoc *doc = req_parse_xml (r);
  xmlNode *top = (xmlNode *) doc, *c;
  size_t plen = strlen (coll_path);

  if (doc == NULL)
    return -1;
  for (c = xml_next (top, NULL, "response"); c != NULL;
       c = xml_next (top, c, "response")) {
    CLEANUP_FREE char *href = xml_text (c, "href");
    CLEANUP_FREE char *mtime = xml_text (c, "getlastmodified");
    CLEANUP_FREE char *size = xml_text (c, "getcontentlength");
    CLEANUP_FREE char *name = NULL, *decoded = NULL;
    const char *path;
    bool is_dir = xml_next (c, NULL, "collection") != NULL;
    size_t n;

    if (href == NULL || url_path (href, &decoded) == -1)
      continue;                 /* not a URI: not one of ours */
    if (decoded == NULL)
      goto oom;
    if (strncmp (decoded, coll_path, plen) != 0)
      continue;
    path = decoded + plen;
    n = strlen (path);
    while (n > 0 && path[n - 1] == '/')
      n--;
    if (n == 0 || memchr (path, '/', n))
      continue;                 /* the collection itself, or not a child */
    if (asprintf (&name, "%s%.*s%s", name_prefix, (int) n, path,
                  is_dir ? "/" : "") == -1) {
      name = NULL;
      goto oom;
    }
    if (list_add (is_dir ? dirs : out, name,
                  mtime ? curl_getdate (mtime, NULL) : 0,
                  size ? strtoull (size, NULL, 10) : 0) == -1)
      goto oom;
  }
  return 0;
 oom:
  nbdkit_error ("out of memory");
  return -1;
}

/* PROPFIND one collection. */
static int
list_one (struct bs_store *s, const char *prefix, const char *name_prefix,
          struct bs_list *out, struct bs_list *dirs)
{
  struct bs_request *r = req_new (s, "PROPFIND", prefix, propfind_body,
                                  sizeof propfind_body - 1);
  CLEANUP_FREE char *coll = NULL;
  enum bs_result res;
  int ret = 0;

  if (r == NULL)
    return -1;
  if (url_path (r->url, &coll) == -1)
    nbdkit_error ("%s: not a URL libxml2 can parse", r->url);
  else if (coll == NULL)
    nbdkit_error ("out of memory");
  res = coll ? run_sync (r) : BS_ERROR;
  if (res == BS_OK)
    ret = parse_multistatus (r, coll, name_prefix, out, dirs);
  else if (res == BS_ERROR)
    ret = -1;
  req_free (r);
  return ret;
}

/* List a collection, or the tree under it. */
int
dav_list (struct bs_store *s, const char *prefix, bool recursive,
          struct bs_list *out)
{
  struct bs_list dirs = { 0 };
  size_t i;
  int r;

  if (!recursive)
    return list_one (s, prefix, "", out, out);
  r = list_one (s, prefix, "", out, &dirs);
  /* dirs grows while it is walked: each subcollection's own
   * subcollections are appended to it.
   */
  for (i = 0; r == 0 && i < dirs.n; ++i) {
    CLEANUP_FREE char *sub = NULL;
    if (asprintf (&sub, "%s%s", prefix, dirs.e[i].name) == -1) {
      sub = NULL;
      nbdkit_error ("out of memory");
      r = -1;
      break;
    }
    r = list_one (s, sub, dirs.e[i].name, out, &dirs);
  }
  bs_list_free (&dirs);
  return r;
}

/* MOVE the object from to the key to (replacing what is there).  A
 * MOVE retried after a lost reply finds its source gone: then the
 * destination tells whether the first attempt went through.
 */
static enum bs_result
dav_move (struct bs_store *s, const char *from, const char *to)
{
  struct bs_request *r = req_new (s, "MOVE", from, NULL, 0);
  CLEANUP_FREE char *dest = dav_url (s, to), *line = NULL;
  enum bs_result res = BS_ERROR;

  if (r == NULL)
    return BS_ERROR;
  if (dest == NULL || asprintf (&line, "Destination: %s", dest) == -1) {
    line = NULL;
    nbdkit_error ("out of memory");
  }
  else if (req_add_header (r, line) == 0 &&
           req_add_header (r, "Overwrite: T") == 0)
    res = run_sync (r);
  if (res == BS_NOT_FOUND && r->attempt > 1 && bs_head (s, to) == BS_OK)
    res = BS_OK;
  else if (res == BS_NOT_FOUND) {
    nbdkit_error ("%s/%s: MOVE to %s: HTTP 404: the object is gone",
                  s->cfg->target, from, to);
    res = BS_ERROR;
  }
  req_free (r);
  return res;
}

/* PUT under a temporary name, then MOVE into place. */
enum bs_result
dav_put_atomic (struct bs_store *s, const char *key, const void *data,
                size_t len)
{
  CLEANUP_FREE char *tmp = NULL;
  enum bs_result res;

  if (asprintf (&tmp, "%s.partial-%016" PRIx64, key, random_u64 ()) == -1) {
    tmp = NULL;
    nbdkit_error ("out of memory");
    return BS_ERROR;
  }
  res = bs_put (s, tmp, data, len);
  if (res == BS_OK) {
    res = dav_move (s, tmp, key);
    if (res != BS_OK)
      bs_delete (s, tmp);
  }
  return res;
}
