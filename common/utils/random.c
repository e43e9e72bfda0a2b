/* SPDX-License-Identifier: BSD-3-Clause */
/* Placeholder: being written. */
#include <config.h>
