#!/usr/bin/env bash
# Builds wt (installing missing Debian packages first), then runs the main job: a real,
# verified multi-round weight sync on this machine's CPU (configs/quickstart.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/bin/wt plugins
echo
build/bin/wt launch configs/quickstart.yaml
