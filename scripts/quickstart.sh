#!/usr/bin/env bash
# Builds wt, then runs the main job. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/bin/wt --version
build/bin/wt plugins
