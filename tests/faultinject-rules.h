/* SPDX-License-Identifier: BSD-3-Clause */
/* The rules of the fault-injection test filter (faultinject.c): parsing
 * one line of the rules file and matching a request against the rules,
 * with no nbdkit dependency so that tests/unit-faultinject-rules.c can
 * test them alone.  Sizes are parsed by a function the caller passes
 * (nbdkit_parse_size in the filter).
 */

#ifndef REPLICATE_FAULTINJECT_RULES_H
#define REPLICATE_FAULTINJECT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Operations, as bits of fi_rule.ops. */
enum fi_op {
  FI_WRITE = 1 << 0,
  FI_ZERO = 1 << 1,
  FI_TRIM = 1 << 2,
  FI_FLUSH = 1 << 3,
  FI_READ = 1 << 4,
  FI_EXTENTS = 1 << 5,
  FI_CACHE = 1 << 6,
  FI_ANY = (1 << 7) - 1,
};

/* What a firing rule does to the request. */
enum fi_phase {
  FI_REFUSE,
  FI_APPLY_ERROR,
  FI_HOLD,
  FI_DROP,
  FI_APPLY_DROP,
  FI_EXIT,
  FI_APPLY_EXIT,
  FI_TORN_EXIT,
};

/* fua=: match any request, only FUA ones, or only non-FUA ones. */
enum fi_fua { FI_FUA_ANY, FI_FUA_YES, FI_FUA_NO };

/* One end of range=: VALUE bytes from the start, or from the end of
 * the export if FROM_END; OPEN (an empty END) means the export's end.
 */
struct fi_bound {
  uint64_t value;
  bool from_end;
  bool open;
};

#define FI_ID_MAX 64

/* A parsed rule and its counters. */
struct fi_rule {
  char id[FI_ID_MAX];
  unsigned ops;                 /* enum fi_op bits */
  struct fi_bound start, end;
  enum fi_fua fua;
  enum fi_phase phase;
  int error;                    /* errno; 0 if error= was not given */
  double secs;                  /* hold */
  double delay;                 /* slept before any phase acts */
  uint64_t skip;                /* matches passed untouched first */
  uint64_t count;               /* firings; 0 = unlimited */
  uint64_t skipped, fired;      /* counters, 0 after parsing */
};

/* The function parsing a size ("4M"): returns -1 on error. */
typedef int64_t (*fi_parse_size_fn) (const char *str);

/* Parse LINE (number LINENO, used for the default id) into *RULE.
 * Returns 1 for a rule, 0 for a line with no rule (blank or comment),
 * -1 on error with a message naming the word in ERR (ERRLEN bytes).
 */
int fi_parse_rule (const char *line, unsigned lineno,
                   fi_parse_size_fn parse_size, struct fi_rule *rule,
                   char *err, size_t errlen);

/* Does RULE match the request OP (one enum fi_op bit) of COUNT bytes at
 * OFFSET with or without FUA, on an export of SIZE bytes?
 */
bool fi_rule_matches (const struct fi_rule *rule, unsigned op,
                      uint64_t offset, uint64_t count, bool fua,
                      uint64_t size);

/* Choose the rule that fires for a request (see fi_rule_matches), and
 * count it: returns its index, or -1 if the request passes untouched.
 */
int fi_select (struct fi_rule *rules, size_t n, unsigned op,
               uint64_t offset, uint64_t count, bool fua, uint64_t size);

/* The name of an operation or phase, for the log. */
const char *fi_op_name (unsigned op);
const char *fi_phase_name (enum fi_phase phase);

#endif /* REPLICATE_FAULTINJECT_RULES_H */
