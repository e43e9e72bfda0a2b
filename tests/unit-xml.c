/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/backupstore/xml.c, the XML of S3 and WebDAV
 * replies read with libxml2.
 *
 * text_cases: a document, an element name and the text xml_text must
 * find, or the reason xml_parse must refuse the document with.  Most
 * rows are what the hand-written scanner xml.c used to be got wrong:
 * namespace prefixes, CDATA, entities, comments, processing
 * instructions, a '>' in an attribute, declarations; and truncated or
 * garbage replies, which it read as far as it could instead of
 * refusing.  libxml2 must print nothing (stderr goes to a file while
 * it parses).
 * walk_cases: xml_next over several elements and scopes.  title_cases:
 * the title of HTML error pages.  test_external_entities: a file named
 * by an external entity or an external DTD is never read.
 */

#include <config.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "xml.h"
#include "unit.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])

struct text_case {
  const char *what;
  const char *doc;
  const char *name;
  const char *text;             /* expected text; NULL: no such element */
  const char *refused;          /* substring of the reason, or NULL */
};

#define S3NS "http://s3.amazonaws.com/doc/2006-03-01/"

static const struct text_case text_cases[] = {
  { "plain", "<R><Contents><Key>a/b</Key></Contents></R>", "Key", "a/b",
    NULL },
  { "XML declaration and S3's default namespace",
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"" S3NS "\"><Key>k</Key></ListBucketResult>",
    "Key", "k", NULL },
  { "declared prefix",
    "<s3:R xmlns:s3=\"" S3NS "\"><s3:Key>k</s3:Key></s3:R>", "Key", "k",
    NULL },
  { "WebDAV's D: prefix",
    "<D:multistatus xmlns:D=\"DAV:\"><D:response><D:href>/a/b</D:href>"
    "</D:response></D:multistatus>", "href", "/a/b", NULL },
  { "undeclared prefix (a namespace error, not a fatal one)",
    "<R><s3:Key>k</s3:Key></R>", "Key", "k", NULL },
  { "the name is the local name, not the prefix",
    "<Key:R xmlns:Key=\"x\"><Key:Size>1</Key:Size></Key:R>", "Key", NULL,
    NULL },
  { "CDATA is text", "<Key><![CDATA[a<b>&amp;]]></Key>", "Key", "a<b>&amp;",
    NULL },
  { "CDATA and text", "<Key>x<![CDATA[]]>y<![CDATA[<z>]]></Key>", "Key",
    "xy<z>", NULL },
  { "an element in CDATA is not one",
    "<R><![CDATA[<Key>fake</Key>]]><Key>real</Key></R>", "Key", "real",
    NULL },
  { "the five entities and character references",
    "<Key>a&amp;b&lt;&gt;&quot;&apos;&#x41;&#66;&#x20AC;</Key>", "Key",
    "a&b<>\"'AB\xe2\x82\xac", NULL },
  { "&amp;lt; is decoded once", "<Key>&amp;lt;</Key>", "Key", "&lt;",
    NULL },
  { "an element in a comment is not one",
    "<R><!-- <Key>old</Key> --><Key>new</Key></R>", "Key", "new", NULL },
  { "a comment in the text is left out", "<Key>a<!-- x -->b</Key>", "Key",
    "ab", NULL },
  { "a processing instruction is left out", "<Key>a<?pi x?>b</Key>", "Key",
    "ab", NULL },
  { "an internal entity",
    "<?xml version=\"1.0\"?><!DOCTYPE R [<!ENTITY e \"E&#x41;\">]>"
    "<R><Key>&e;</Key></R>", "Key", "EA", NULL },
  { "an element in an entity declaration is not one",
    "<!DOCTYPE R [<!ENTITY e \"<Key>decl</Key>\">]><R><Key>k</Key></R>",
    "Key", "k", NULL },
  { "a '>' in an attribute", "<R><Key note=\"a>b\">k</Key></R>", "Key", "k",
    NULL },
  { "a longer name first", "<R><KeyMarker>m</KeyMarker><Key>k</Key></R>",
    "Key", "k", NULL },
  { "white space in the tags", "<R><Key\n>k</Key\t></R>", "Key", "k", NULL },
  { "an empty element", "<R><Key/></R>", "Key", "", NULL },
  { "an empty element, two tags", "<R><Key></Key></R>", "Key", "", NULL },
  { "no such element", "<R><Size>1</Size></R>", "Key", NULL, NULL },
  { "the root itself", "<Key>root</Key>", "Key", "root", NULL },
  { "a UTF-8 BOM", "\xef\xbb\xbf<R><Key>k</Key></R>", "Key", "k", NULL },
  { "ISO-8859-1 declared",
    "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><Key>\xe9</Key>", "Key",
    "\xc3\xa9", NULL },

  { "empty", "", "Key", NULL, "Document is empty" },
  { "white space only", " \n", "Key", NULL, "line " },
  { "truncated", "<R><Contents><Key>a</Key>", "Key", NULL,
    "Premature end of data" },
  { "truncated in a tag", "<R><Contents><Key>a</Key></Cont", "Key", NULL,
    "line 1: " },
  { "garbage", "this is not XML", "Key", NULL, "Start tag expected" },
  { "HTML", "<html><body><hr><p>Bad Gateway</body></html>", "title", NULL,
    "line 1: " },
  { "two roots", "<Key>a</Key><Key>b</Key>", "Key", NULL, "Extra content" },
  { "mismatched tags", "<R><Key>a</Size></R>", "Key", NULL, "mismatch" },
  { "prefixes that differ", "<a:Key xmlns:a=\"x\" xmlns:b=\"x\">k</b:Key>",
    "Key", NULL, "mismatch" },
  { "an undefined entity", "<Key>a&nbsp;b</Key>", "Key", NULL,
    "Entity 'nbsp' not defined" },
  { "a bare '&'", "<Key>a & b</Key>", "Key", NULL, "line 1: " },
  { "a '<' in text", "<Key>a < b</Key>", "Key", NULL, "line 1: " },
  { "character reference 0", "<Key>&#0;</Key>", "Key", NULL, "line 1: " },
  { "an unquoted attribute", "<R><Key a=b>k</Key></R>", "Key", NULL,
    "line 1: " },
  { "the error's line", "<R>\n<Key>a</Key>\n<Key>b</Size>\n</R>", "Key",
    NULL, "line 3: " },
};

static FILE *quiet_file;
static int saved_stderr = -1;

/* Send stderr to a temporary file until quiet_end. */
static void
quiet_begin (void)
{
  fflush (stderr);
  quiet_file = tmpfile ();
  saved_stderr = dup (STDERR_FILENO);
  if (quiet_file == NULL || saved_stderr == -1)
    abort ();
  dup2 (fileno (quiet_file), STDERR_FILENO);
}

/* Restore stderr; what went to the file is a failure (libxml2 must
 * print nothing), and is printed.
 */
static void
quiet_end (const char *what)
{
  char line[512];
  long printed;

  fflush (stderr);
  dup2 (saved_stderr, STDERR_FILENO);
  close (saved_stderr);
  printed = ftell (quiet_file);
  CHECKF (printed == 0, "%s: %ld bytes printed:", what, printed);
  rewind (quiet_file);
  while (fgets (line, sizeof line, quiet_file))
    fputs (line, stderr);
  fclose (quiet_file);
}

/* Parse every row of text_cases into docs[] and whys[], quietly. */
static void
parse_quietly (xmlDoc **docs, char (*whys)[256])
{
  size_t row;

  quiet_begin ();
  for (row = 0; row < ARRAY_SIZE (text_cases); row++)
    docs[row] = xml_parse (text_cases[row].doc, strlen (text_cases[row].doc),
                           whys[row], sizeof whys[row]);
  quiet_end ("text_cases");
}

/* Every row of text_cases; libxml2 must print nothing. */
static void
test_texts (void)
{
  xmlDoc *docs[ARRAY_SIZE (text_cases)];
  char whys[ARRAY_SIZE (text_cases)][256];
  size_t row;

  parse_quietly (docs, whys);
  for (row = 0; row < ARRAY_SIZE (text_cases); row++) {
    const struct text_case *t = &text_cases[row];
    CLEANUP_XML_DOC xmlDoc *doc = docs[row];
    CLEANUP_FREE char *text = NULL;

    if (t->refused) {
      CHECKF (doc == NULL && strstr (whys[row], t->refused) != NULL,
              "row %zu (%s): parsed %d, reason '%s'", row, t->what,
              doc != NULL, doc ? "" : whys[row]);
      continue;
    }
    CHECKF (doc != NULL, "row %zu (%s): refused: %s", row, t->what,
            whys[row]);
    if (doc == NULL)
      continue;
    text = xml_text ((xmlNode *) doc, t->name);
    CHECKF (t->text ? text != NULL && strcmp (text, t->text) == 0
            : text == NULL, "row %zu (%s): text '%s', expected '%s'", row,
            t->what, text ? text : "(none)", t->text ? t->text : "(none)");
  }
}

/* A listing with entries in two scopes. */
static const char listing[] =
  "<ListBucketResult xmlns=\"" S3NS "\">"
  "<IsTruncated>true</IsTruncated>"
  "<Contents><Key>a</Key><Size>1</Size></Contents>"
  "<!-- <Contents><Key>commented</Key></Contents> -->"
  "<Contents><Key>b</Key></Contents>"
  "<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes>"
  "<Contents><Size>3</Size><Key>c</Key></Contents>"
  "<NextContinuationToken>t&amp;1</NextContinuationToken>"
  "</ListBucketResult>";

/* xml_next: each Contents in order, Key and Size inside each only. */
static void
test_walk (void)
{
  static const char *const keys[] = { "a", "b", "c" };
  static const char *const sizes[] = { "1", NULL, "3" };
  char why[256];
  CLEANUP_XML_DOC xmlDoc *doc = xml_parse (listing, strlen (listing), why,
                                           sizeof why);
  CLEANUP_FREE char *token = NULL, *truncated = NULL;
  xmlNode *top = (xmlNode *) doc, *c;
  size_t i = 0;

  CHECK (doc != NULL);
  if (doc == NULL)
    return;
  for (c = xml_next (top, NULL, "Contents"); c != NULL;
       c = xml_next (top, c, "Contents"), i++) {
    CLEANUP_FREE char *key = xml_text (c, "Key");
    CLEANUP_FREE char *size = xml_text (c, "Size");

    CHECKF (i < ARRAY_SIZE (keys), "entry %zu: too many", i);
    if (i >= ARRAY_SIZE (keys))
      break;
    CHECKF (key && strcmp (key, keys[i]) == 0, "entry %zu: key %s", i, key);
    CHECKF (sizes[i] ? size && strcmp (size, sizes[i]) == 0 : size == NULL,
            "entry %zu: size %s", i, size);
  }
  CHECKF (i == ARRAY_SIZE (keys), "%zu entries", i);
  c = xml_next (top, NULL, "CommonPrefixes");
  CHECK (c != NULL && xml_next (top, c, "CommonPrefixes") == NULL);
  CHECK (c != NULL && xml_next (c, NULL, "Key") == NULL);
  truncated = xml_text (top, "IsTruncated");
  token = xml_text (top, "NextContinuationToken");
  CHECK (truncated && strcmp (truncated, "true") == 0);
  CHECK (token && strcmp (token, "t&1") == 0);
}

/* A multistatus: the collection flag is read inside each response. */
static void
test_multistatus (void)
{
  static const char ms[] =
    "<?xml version=\"1.0\" encoding=\"utf-8\" ?>\n"
    "<D:multistatus xmlns:D=\"DAV:\">\n"
    "<D:response><D:href>/s/dir/</D:href><D:propstat><D:prop>"
    "<D:resourcetype><D:collection/></D:resourcetype></D:prop>"
    "</D:propstat></D:response>\n"
    "<D:response><D:href>/s/a%20b</D:href><D:propstat><D:prop>"
    "<D:getcontentlength>42</D:getcontentlength><D:resourcetype/>"
    "</D:prop></D:propstat></D:response>\n"
    "</D:multistatus>\n";
  char why[256];
  CLEANUP_XML_DOC xmlDoc *doc = xml_parse (ms, strlen (ms), why, sizeof why);
  xmlNode *top = (xmlNode *) doc, *r1, *r2;
  CLEANUP_FREE char *href = NULL, *len = NULL;

  CHECK (doc != NULL);
  if (doc == NULL)
    return;
  r1 = xml_next (top, NULL, "response");
  r2 = r1 ? xml_next (top, r1, "response") : NULL;
  CHECK (r1 != NULL && r2 != NULL && xml_next (top, r2, "response") == NULL);
  if (r2 == NULL)
    return;
  CHECK (xml_next (r1, NULL, "collection") != NULL);
  CHECK (xml_next (r2, NULL, "collection") == NULL);
  href = xml_text (r2, "href");
  len = xml_text (r2, "getcontentlength");
  CHECK (href && strcmp (href, "/s/a%20b") == 0);
  CHECK (len && strcmp (len, "42") == 0);
}

struct title_case {
  const char *page;
  const char *title;            /* NULL: none */
};

/* HTML error pages, seldom well-formed XML. */
static const struct title_case title_cases[] = {
  { "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n"
    "<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>"
    "\r\n</body>\r\n</html>\r\n", "404 Not Found" },
  { "<HTML><HEAD><TITLE>Upper Case</TITLE></HEAD></HTML>", "Upper Case" },
  { "<html><head><title>a &amp; b", "a & b" },
  { "<!-- <title>x</title> --><title>y</title>", "y" },
  { "<!DOCTYPE html><html><head><meta charset=utf-8><title>caf\xc3\xa9"
    "</title>", "caf\xc3\xa9" },
  { "Bad Gateway", NULL },
  { "{\"error\": \"x\"}", NULL },
  { "", NULL },
};

/* xml_html_title on each page. */
static void
test_titles (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (title_cases); row++) {
    const struct title_case *t = &title_cases[row];
    CLEANUP_FREE char *title = NULL;

    quiet_begin ();
    title = xml_html_title (t->page, strlen (t->page));
    quiet_end ("title_cases");
    CHECKF (t->title ? title && strcmp (title, t->title) == 0
            : title == NULL, "title row %zu: '%s'", row,
            title ? title : "(none)");
  }
}

/* Write text to a new temporary file; its name in path. */
static bool
write_temp (char *path, const char *text)
{
  int fd = mkstemp (path);
  bool ok;

  if (fd == -1)
    return false;
  ok = write (fd, text, strlen (text)) == (ssize_t) strlen (text);
  close (fd);
  return ok;
}

/* A document (printf-style) naming a file whose content ("LEAK") must
 * not appear.
 */
static void check_not_read (const char *fs, ...)
  __attribute__ ((format (printf, 1, 2)));
static void
check_not_read (const char *fs, ...)
{
  char doc[512], why[256] = "";
  CLEANUP_XML_DOC xmlDoc *d = NULL;
  CLEANUP_FREE char *text = NULL;
  va_list ap;

  va_start (ap, fs);
  vsnprintf (doc, sizeof doc, fs, ap);
  va_end (ap);
  quiet_begin ();
  d = xml_parse (doc, strlen (doc), why, sizeof why);
  if (d)
    text = xml_text ((xmlNode *) d, "Key");
  quiet_end (doc);
  CHECKF (text == NULL || strstr (text, "LEAK") == NULL,
          "%s: read the file: '%s'", doc, text);
}

/* External entities and DTDs are never loaded. */
static void
test_external_entities (void)
{
  char secret[] = "/tmp/unit-xml-secret.XXXXXX";
  char dtd[] = "/tmp/unit-xml-dtd.XXXXXX";

  CHECK (write_temp (secret, "LEAK"));
  CHECK (write_temp (dtd, "<!ENTITY e \"LEAK\">"));
  check_not_read ("<!DOCTYPE R [<!ENTITY x SYSTEM \"file://%s\">]>"
                  "<R><Key>&x;</Key></R>", secret);
  check_not_read ("<!DOCTYPE R [<!ENTITY x SYSTEM \"%s\">]>"
                  "<R><Key>&x;</Key></R>", secret);
  check_not_read ("<!DOCTYPE R SYSTEM \"%s\"><R><Key>&e;</Key></R>", dtd);
  check_not_read ("<!DOCTYPE R [<!ENTITY %% p SYSTEM \"%s\"> %%p;]>"
                  "<R><Key>&e;</Key></R>", dtd);
  check_not_read ("<!DOCTYPE R [<!ENTITY x SYSTEM "
                  "\"http://127.0.0.1:1/%s\">]><R><Key>&x;</Key></R>",
                  secret);
  unlink (secret);
  unlink (dtd);
}

int
main (void)
{
  test_texts ();
  test_walk ();
  test_multistatus ();
  test_titles ();
  test_external_entities ();
  return unit_exit ("unit-xml");
}
