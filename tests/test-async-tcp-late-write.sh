#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A controller killed while the asynchronous leg's server holds a
# write, with the legs on loopback TCP: test-async-late-write.sh's
# interleaving with LEGS=tcp (drain.c, drain_tcp_orphans): see there.

LEGS=tcp exec "$(dirname "$0")/test-async-late-write.sh"
