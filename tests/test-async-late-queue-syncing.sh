#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# A writer that read the membership while the asynchronous leg was
# syncing queues only once the leg has failed, come back and started
# its catch-up, which is copying the writer's range:
# test-async-late-queue.sh's interleaving with WHEN=syncing: see there.

WHEN=syncing exec "$(dirname "$0")/test-async-late-queue.sh"
