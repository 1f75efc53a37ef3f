#!/usr/bin/env bash
# Builds wt, then runs every test with ctest. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
cd build
ctest --output-on-failure -j "$jobs" "$@"
