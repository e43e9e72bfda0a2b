/* SPDX-License-Identifier: BSD-3-Clause */
/* Aligned text tables for human output.
 *
 * Cells are collected first, so that each column can be as wide as its
 * widest cell; the last cell of a line is not padded (the last column
 * holds URIs and error messages of any length), and columns are
 * separated by two spaces.
 * Widths count bytes: the cells we print are ASCII.  Out of memory
 * aborts: a table is a few hundred bytes.
 */

#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbdrep.h"

struct table {
  size_t ncols, nrows;
  char **cells;                 /* nrows * ncols (headers first) */
};

/* strdup that aborts when out of memory. */
static char *
xstrdup (const char *s)
{
  char *r = strdup (s ? s : "");

  if (r == NULL)
    abort ();
  return r;
}

/* A new table with a header row (none if headers is NULL). */
struct table *
table_new (size_t ncols, const char *const *headers)
{
  struct table *t = calloc (1, sizeof *t);

  if (t == NULL)
    abort ();
  t->ncols = ncols;
  if (headers)
    table_add_row (t, headers);
  return t;
}

/* Append a row. */
void
table_add_row (struct table *t, const char *const *cells)
{
  size_t i;
  char **p = realloc (t->cells, (t->nrows + 1) * t->ncols * sizeof *p);

  if (p == NULL)
    abort ();
  t->cells = p;
  for (i = 0; i < t->ncols; ++i)
    t->cells[t->nrows * t->ncols + i] = xstrdup (cells[i]);
  t->nrows++;
}

/* Append a key and a formatted value (a two-column table). */
void
table_add_kv (struct table *t, const char *key, const char *fs, ...)
{
  char value[512];
  const char *cells[2] = { key, value };
  va_list ap;

  va_start (ap, fs);
  vsnprintf (value, sizeof value, fs, ap);
  va_end (ap);
  table_add_row (t, cells);
}

/* The width of column col. */
static size_t
column_width (const struct table *t, size_t col)
{
  size_t w = 0, r;

  for (r = 0; r < t->nrows; ++r) {
    size_t len = strlen (t->cells[r * t->ncols + col]);
    if (len > w)
      w = len;
  }
  return w;
}

/* The number of cells of row r up to its last non-empty one. */
static size_t
used_cells (const struct table *t, size_t r)
{
  size_t n = t->ncols;

  while (n > 0 && t->cells[r * t->ncols + n - 1][0] == '\0')
    n--;
  return n;
}

/* Print the table, each line starting with indent (no trailing
 * blanks).
 */
void
table_print (const struct table *t, FILE *fp, const char *indent)
{
  size_t r, c, n;

  for (r = 0; r < t->nrows; ++r) {
    fputs (indent, fp);
    n = used_cells (t, r);
    for (c = 0; c < n; ++c) {
      const char *cell = t->cells[r * t->ncols + c];
      if (c + 1 < n)
        fprintf (fp, "%-*s  ", (int) column_width (t, c), cell);
      else
        fputs (cell, fp);
    }
    fputc ('\n', fp);
  }
}

/* Free a table. */
void
table_free (struct table *t)
{
  size_t i;

  if (t == NULL)
    return;
  for (i = 0; i < t->nrows * t->ncols; ++i)
    free (t->cells[i]);
  free (t->cells);
  free (t);
}
