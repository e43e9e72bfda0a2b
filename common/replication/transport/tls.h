/* SPDX-License-Identifier: BSD-3-Clause */
/* TLS to a leg (tls.c): what every libnbd handle that opens a leg
 * uses, in the engine (conn.c) and in nbdrep (inspect, backup).
 */

#ifndef REPLICATE_TLS_H
#define REPLICATE_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <libnbd.h>

#include "params.h"

/* Give a handle about to connect to uri the TLS parameters t (and
 * allow the local files of libnbd's URI parameters).  Returns 0, or -1
 * with the reason in err: a setup that cannot work, a refusal.
 */
extern int tls_setup_handle (struct nbd_handle *nbd,
                             const struct tls_params *t, const char *uri,
                             char *err, size_t errlen);

/* Is msg, libnbd's error after a connection failed before it was
 * ready, its report of a TLS setup that cannot work (rather than of a
 * server it cannot reach)?
 */
extern bool tls_refusal (const char *msg);

#endif /* REPLICATE_TLS_H */
