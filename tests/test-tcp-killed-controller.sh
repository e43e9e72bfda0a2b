#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A controller killed with a write in flight on a TCP leg: that write
# must not land after a new controller on the same host has started
# (drain.c, drain_tcp_orphans).  test-safety-killed-controller.sh's
# interleaving, with its legs on loopback TCP (LEGS=tcp): see there.

LEGS=tcp exec "$(dirname "$0")/test-safety-killed-controller.sh"
