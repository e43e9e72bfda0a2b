/* SPDX-License-Identifier: BSD-3-Clause */
/* Sizes and booleans in nbdkit's grammar (nbdkit_parse_size and
 * nbdkit_parse_bool of nbdkit 1.32), for what runs outside nbdkit:
 * nbdrep, the backup store's options, the unit tests.  Inside nbdkit
 * the plugins use nbdkit's own functions (config_use_parsers);
 * tests/test-parse-grammar.sh checks that both agree.
 */

#ifndef REPLICATE_GRAMMAR_H
#define REPLICATE_GRAMMAR_H

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

#endif /* REPLICATE_GRAMMAR_H */
