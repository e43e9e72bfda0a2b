/* SPDX-License-Identifier: BSD-3-Clause */
/* Placeholder: being written. */
#include <config.h>
#include <nbdkit-filter.h>
static struct nbdkit_filter filter = { .name = "replicate" };
NBDKIT_REGISTER_FILTER (filter)
