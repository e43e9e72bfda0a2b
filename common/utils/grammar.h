/* SPDX-License-Identifier: BSD-3-Clause */
/* Sizes, booleans and whole numbers in nbdkit's grammar
 * (nbdkit_parse_size, nbdkit_parse_bool and nbdkit_parse_unsigned and
 * its kin of nbdkit 1.32), for what runs outside nbdkit: nbdrep, the
 * backup store's options, the unit tests.  Inside nbdkit the plugins
 * use nbdkit's own functions (config_use_parsers);
 * tests/test-parse-grammar.sh checks that both agree.
 */

#ifndef REPLICATE_GRAMMAR_H
#define REPLICATE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

/* A size: optional white space and '+', decimal digits, at most one
 * suffix: b or B (bytes), s or S (512-byte sectors), k K m M g G t T p P
 * e E (powers of 1024); at most INT64_MAX.  Returns 0 or -1.
 */
extern int grammar_parse_size (const char *str, uint64_t *r);

/* A boolean: 1/0, true/false, t/f, yes/no, y/n, on/off in any case.
 * Returns 1, 0 or -1.
 */
extern int grammar_parse_bool (const char *str);

/* Why grammar_parse_unsigned refused a string. */
enum grammar_refusal {
  GRAMMAR_EMPTY = 1,            /* no digits ("", "+", "x") */
  GRAMMAR_NEGATIVE,             /* a '-' first */
  GRAMMAR_RANGE,                /* larger than the maximum */
  GRAMMAR_TRAILING,             /* anything after the digits */
};

/* A whole number as nbdkit_parse_unsigned (max UINT_MAX),
 * nbdkit_parse_uint64_t (UINT64_MAX) and the like read it: optional
 * white space and '+', then decimal, 0x/0X hexadecimal or 0 octal
 * digits, nothing after them; no '-'; at most max.  Returns 0 or an
 * enum grammar_refusal.
 */
extern int grammar_parse_unsigned (const char *str, uint64_t max,
                                   uint64_t *r);

/* nbdkit's message for refusal of str as the number "what", such as
 * 'retries: could not parse number: "1x": trailing garbage', into buf.
 */
extern void grammar_refusal_message (char *buf, size_t len, const char *what,
                                     const char *str, int refusal);

#endif /* REPLICATE_GRAMMAR_H */
