#!/usr/bin/env bash
# Builds wt, then runs every test with ctest. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
cd build
# Two more tests than cores: most tests spend their time waiting on the processes and sockets they
# drive, not computing; the few that compile take a lock (tests/CMakeLists.txt) and run one at a
# time beside them.
ctest --output-on-failure -j "$((jobs + 2))" "$@"
