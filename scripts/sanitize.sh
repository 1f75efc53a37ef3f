#!/usr/bin/env bash
# Builds wt and runs the whole test suite under ASan+UBSan (build-asan/), then under TSan
# (build-tsan/). Exits non-zero if either finds anything or a test fails.
#
#   scripts/sanitize.sh [asan|tsan]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
jobs=$(nproc 2>/dev/null || echo 2)
status=0
for k in "${kinds[@]}"; do
  case $k in
    asan) flags="address,undefined"
          export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
          export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ;;
    tsan) flags="thread"
          export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp" ;;
    *) echo "sanitize: unknown kind '$k' (asan or tsan)" >&2; exit 2 ;;
  esac
  dir="build-$k"
  if [[ ! -f $dir/build.ninja ]]; then
    # Debug (-O0) compiles about twice as fast as RelWithDebInfo; the sanitizers see the same bugs.
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWT_SANITIZE="$flags" \
      -DWT_BUILD_BENCHMARKS=OFF
  fi
  cmake --build "$dir" -j "$jobs"
  echo "== $k: ctest"
  # The standalone-install test rebuilds a plugin without sanitizers, and a sanitizer's allocator
  # keeps freed memory in quarantine, so the soak's RSS check says nothing here either. The Python
  # tests load the extension into an interpreter built without the sanitizer runtime, and the two-host
  # test times a 1 GB sync against deadlines that a sanitized build cannot keep.
  if ! (cd "$dir" && ctest --output-on-failure -j "$jobs" -LE 'install|soak|python|cluster'); then status=1; fi
done
exit $status
