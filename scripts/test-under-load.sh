#!/usr/bin/env bash
# Runs scripts/test.sh with CPU-bound processes beside it (two by default, WT_LOAD_PROCS=N for
# another count): the suite's deadlines must tell a slow peer from a dead one on a loaded machine,
# not only on an idle one. Prints the suite's time and the load it ran under; exits as the suite.
#
#   scripts/test-under-load.sh [ctest arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
procs=${WT_LOAD_PROCS:-2}
load=()
stop_load() { for p in "${load[@]}"; do kill "$p" 2>/dev/null; done; wait "${load[@]}" 2>/dev/null; }
trap stop_load EXIT
for _ in $(seq "$procs"); do
  bash -c 'while :; do :; done' &
  load+=($!)
done
echo "test-under-load: $procs CPU-bound process(es) beside the suite on $(nproc) core(s)"
start=$(date +%s)
scripts/test.sh "$@"
rc=$?
echo "test-under-load: the suite exited $rc after $(($(date +%s) - start)) s beside $procs CPU-bound process(es)"
exit $rc
