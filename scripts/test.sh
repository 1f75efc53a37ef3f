#!/usr/bin/env bash
# Builds wt, then runs every test with ctest. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
cd build
# One more test than cores: most tests spend their time waiting on the processes and sockets they
# drive, not computing (on 2 cores the suite keeps about 1.3 of them busy at -j2).
ctest --output-on-failure -j "$((jobs + 1))" "$@"
