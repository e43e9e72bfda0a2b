/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdrep's --tls options (inspect, backup): one getopt table entry per
 * TLS parameter of the plugins, the option's name being the
 * parameter's key, parsed by the plugins' own parser (config_set_tls).
 */

#include <config.h>

#include <getopt.h>

#include "params.h"
#include "nbdrep.h"

static const struct option tls_longopts[] = { TLS_LONG_OPTIONS };

/* Apply a --tls option to t (see nbdrep.h). */
bool
tls_option (const struct subcommand *cmd, int opt, const char *arg,
            struct tls_params *t)
{
  char err[256];
  size_t i = opt - OPT_TLS;

  if (opt < OPT_TLS ||
      i >= sizeof tls_longopts / sizeof tls_longopts[0])
    return false;
  if (config_set_tls (t, tls_longopts[i].name, arg, err, sizeof err) != 0)
    usage_error (cmd, "--%s", err);
  return true;
}
