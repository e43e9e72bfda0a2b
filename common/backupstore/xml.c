/* SPDX-License-Identifier: BSD-3-Clause */
/* The XML of S3 listings and errors and WebDAV multistatus, read with
 * libxml2 (libnbd already links it, for URIs).
 *
 * A reply is parsed whole into a document (xml_parse): a reply that
 * is not well-formed XML, a truncated one among them, is refused with
 * libxml2's reason, which the caller puts in its own message.  Then
 * elements are found by local name among the descendants of a scope,
 * in document order (xml_next), whatever their namespace prefix
 * ("D:href", "s3:Key", "Key"), and xml_text gives an element's
 * character data: entities and character references decoded, CDATA
 * sections included, comments and processing instructions left out.
 * Elements inside a comment, a CDATA section or an entity declaration
 * are not elements, and are not found.  An HTML error page's title is
 * read with libxml2's HTML parser (xml_html_title): such pages are
 * seldom well-formed XML.
 *
 * libxml2 is kept quiet and local: no message of its own is printed
 * (XML_PARSE_NOERROR, NOWARNING, and a structured error handler on
 * the parser context that drops them; the reason is read back from
 * the context), no network (NONET), no external entity or DTD is
 * loaded (no NOENT, DTDLOAD or DTDVALID), and no global handler of
 * the process (which libnbd shares) is changed.  The parser is
 * initialised once (xmlInitParser is not thread-safe before 2.10);
 * after that these functions are thread-safe: each call has its own
 * context and document.
 */

#include <config.h>

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/xmlerror.h>

#include "xml.h"

#define XML_OPTIONS (XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)
#define HTML_OPTIONS \
  (HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING)

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Initialise libxml2 (once, for every thread). */
static void
init_libxml2 (void)
{
  xmlInitParser ();
}

/* libxml2's structured error handler of our contexts: print nothing
 * (the context keeps the last error).
 */
static void
drop_error (void *opaque, xmlError *error)
{
  (void) opaque;
  (void) error;
}

/* Put the reason of a failed parse in why: "line N: libxml2's message". */
static void
describe_error (const xmlError *e, char *why, size_t whylen)
{
  size_t n;

  if (e == NULL || e->message == NULL) {
    snprintf (why, whylen, "not well-formed");
    return;
  }
  n = strlen (e->message);
  while (n > 0 && (e->message[n - 1] == '\n' || e->message[n - 1] == ' '))
    n--;
  snprintf (why, whylen, "line %d: %.*s", e->line, (int) n, e->message);
}

/* Parse a reply as XML. */
xmlDoc *
xml_parse (const char *data, size_t len, char *why, size_t whylen)
{
  xmlParserCtxt *ctxt;
  xmlDoc *doc;

  pthread_once (&init_once, init_libxml2);
  if (len > INT_MAX) {
    snprintf (why, whylen, "%zu bytes, too large", len);
    return NULL;
  }
  ctxt = xmlNewParserCtxt ();
  if (ctxt == NULL) {
    snprintf (why, whylen, "out of memory");
    return NULL;
  }
  ctxt->sax->serror = drop_error;
  doc = xmlCtxtReadMemory (ctxt, data ? data : "", (int) len, NULL, NULL,
                           XML_OPTIONS);
  if (doc == NULL)
    describe_error (xmlCtxtGetLastError (ctxt), why, whylen);
  xmlFreeParserCtxt (ctxt);
  return doc;
}

/* Is n an element whose local name is name?  (An element whose prefix
 * no xmlns declares keeps "prefix:local" as its name.)
 */
static bool
has_local_name (const xmlNode *n, const char *name)
{
  const char *s = (const char *) n->name, *colon;

  if (n->type != XML_ELEMENT_NODE || s == NULL)
    return false;
  colon = strrchr (s, ':');
  return strcmp (colon ? colon + 1 : s, name) == 0;
}

/* The node after n in document order, below scope; n's children first
 * if descend.  Only elements and documents are entered: an entity
 * reference's children belong to its declaration, a DTD's are
 * declarations.
 */
static xmlNode *
next_node (xmlNode *scope, xmlNode *n, bool descend)
{
  if (descend && n->children != NULL &&
      (n->type == XML_ELEMENT_NODE || n->type == XML_DOCUMENT_NODE ||
       n->type == XML_HTML_DOCUMENT_NODE))
    return n->children;
  for (; n != scope && n != NULL; n = n->parent)
    if (n->next != NULL)
      return n->next;
  return NULL;
}

/* Find the next element named name below scope. */
xmlNode *
xml_next (xmlNode *scope, xmlNode *prev, const char *name)
{
  xmlNode *n;

  n = prev ? next_node (scope, prev, false) : next_node (scope, scope, true);
  for (; n != NULL; n = next_node (scope, n, true))
    if (has_local_name (n, name))
      return n;
  return NULL;
}

/* The text of the first element name below scope. */
char *
xml_text (xmlNode *scope, const char *name)
{
  xmlNode *n = xml_next (scope, NULL, name);
  xmlChar *content;
  char *r;

  if (n == NULL)
    return NULL;
  content = xmlNodeGetContent (n);
  if (content == NULL)
    return NULL;
  r = strdup ((const char *) content);
  xmlFree (content);
  return r;
}

/* The title of an HTML page. */
char *
xml_html_title (const char *data, size_t len)
{
  htmlParserCtxt *ctxt;
  htmlDocPtr doc;
  char *title = NULL;

  pthread_once (&init_once, init_libxml2);
  if (data == NULL || len == 0 || len > INT_MAX)
    return NULL;
  ctxt = htmlNewParserCtxt ();
  if (ctxt == NULL)
    return NULL;
  doc = htmlCtxtReadMemory (ctxt, data, (int) len, NULL, NULL, HTML_OPTIONS);
  if (doc != NULL) {
    title = xml_text ((xmlNode *) doc, "title");
    xmlFreeDoc (doc);
  }
  htmlFreeParserCtxt (ctxt);
  return title;
}

/* Free a document on scope exit. */
void
xml_cleanup_doc (xmlDoc **docp)
{
  xmlFreeDoc (*docp);
}
