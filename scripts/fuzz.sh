#!/usr/bin/env bash
# Fuzzes every target in fuzz/ with libFuzzer for SECONDS each (default 60), under ASan+UBSan.
# Builds with clang into build-fuzz/ (installs clang and its libFuzzer runtime when missing).
# Each target starts from its seed corpus in fuzz/corpus/<target>/; new coverage is kept in
# build-fuzz/corpus/<target>/. A crash is saved as build-fuzz/findings/<target>/crash-*: copy it
# into fuzz/corpus/<target>/ as regression_<what>, and ctest replays it from then on.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
scripts/install-deps.sh
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang and libFuzzer"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-dev
fi
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWT_FUZZ=ON -DWT_BUILD_TESTS=OFF -DWT_BUILD_BENCHMARKS=OFF -DWT_WITH_CUDA=OFF \
    -DWT_SANITIZE="address,undefined,fuzzer-no-link"
fi
targets=("$@")
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(ls fuzz/corpus)
fi
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
printf '%-26s %12s %10s %8s %s\n' TARGET EXECUTIONS EXEC/S COVERAGE RESULT
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  log="build-fuzz/findings/$t/last.log"
  set +e
  "build-fuzz/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=262144 \
    -artifact_prefix="build-fuzz/findings/$t/" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [[ -z $execs ]] && execs=$(grep -oE '#[0-9]+' "$log" | tail -1 | tr -d '#')
  rate=$(grep -oE 'exec/s: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
  if ((rc == 0)); then result="ok"; else result="FINDING (exit $rc): see $log"; status=1; fi
  printf '%-26s %12s %10s %8s %s\n' "$t" "${execs:-?}" "$rate" "$cov" "$result"
done
exit $status
