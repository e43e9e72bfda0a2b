#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The engine's layering (common/replication/layers.txt): no file calls
# into a higher layer, no cycle of calls inside a layer except the two
# the map allows, every file in the folder of its layer.  Checked with nm
# over the objects just built, so a call that goes up fails make check
# wherever it is added.

source ./functions.sh
set -euo pipefail

requires nm --version
requires python3 --version

python3 "$abs_top_srcdir/tests/check-layers.py" \
  "$abs_top_srcdir/common/replication/layers.txt" \
  "$abs_top_builddir/common/replication"
