/* SPDX-License-Identifier: BSD-3-Clause */
/* The XML of S3 and WebDAV replies, read with libxml2 (xml.c): parse
 * a reply into a document, walk its elements by local name, take the
 * text of one.  Only the backup store's sources and its unit test
 * include this header (it brings libxml2's).
 */

#ifndef BACKUPSTORE_XML_H
#define BACKUPSTORE_XML_H

#include <stddef.h>

#include <libxml/tree.h>

/* Parse the len bytes at data as an XML document.  NULL if it is not
 * well-formed (empty, truncated, garbage): then why holds what is
 * wrong ("line 3: Premature end of data in tag Contents"), for the
 * caller's message.  External entities and the network are never
 * used, and libxml2 prints nothing.  Free with xmlFreeDoc.
 */
extern xmlDoc *xml_parse (const char *data, size_t len, char *why,
                          size_t whylen);

/* The next element named name (its local name: any namespace prefix)
 * among the descendants of scope, after prev in document order (the
 * first if prev is NULL), not looking inside prev; NULL if there is
 * none.
 */
extern xmlNode *xml_next (xmlNode *scope, xmlNode *prev, const char *name);

/* The text of the first element name below scope, a new string:
 * character data with entities and character references decoded,
 * CDATA sections included, comments left out.  NULL if there is no
 * such element (or no memory).
 */
extern char *xml_text (xmlNode *scope, const char *name);

/* The title of the HTML page (or XHTML, or anything else: libxml2's
 * HTML parser takes it) at data, a new string; NULL if it has none.
 */
extern char *xml_html_title (const char *data, size_t len);

/* Free *docp (an xmlDoc *) on scope exit. */
extern void xml_cleanup_doc (xmlDoc **docp);
#define CLEANUP_XML_DOC __attribute__ ((cleanup (xml_cleanup_doc)))

#endif /* BACKUPSTORE_XML_H */
