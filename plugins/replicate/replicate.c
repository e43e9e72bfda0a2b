/* SPDX-License-Identifier: BSD-3-Clause */
/* Placeholder: being written. */
#include <config.h>
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>
#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
static int64_t g (void *h) { (void) h; return 0; }
static void *o (int r) { (void) r; return NBDKIT_HANDLE_NOT_NEEDED; }
static int p (void *h, void *b, uint32_t c, uint64_t off, uint32_t f) { (void) h; (void) b; (void) c; (void) off; (void) f; return 0; }
static struct nbdkit_plugin plugin = { .name = "replicate", .open = o, .get_size = g, .pread = p };
NBDKIT_REGISTER_PLUGIN (plugin)
