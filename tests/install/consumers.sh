#!/usr/bin/env bash
# Plain consumers of an installed wt (tests/install/consumers/): a project with no C++ standard
# linking wt::wt, a C++17 plugin on wt::plugin_abi alone, a C++20 program on wt::all; then a
# C++17 translation unit that includes a C++ header without CMake is told what it needs.
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
work=$build/install_consumers
rm -rf "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/install/consumers" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work.configure.log" 2>&1 || { cat "$work.configure.log"; exit 1; }
cmake --build "$work/build" >"$work.build.log" 2>&1 || { cat "$work.build.log"; exit 1; }
echo "no_standard (wt::wt, no standard set), cxx17_abi (C++17, wt::plugin_abi), cxx20_all (wt::all) built"

out=$(LD_LIBRARY_PATH=$prefix/lib "$work/build/no_standard")
[[ $out == "$(sed -n 's/^project(wt VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt") ipc" ]] ||
  { echo "no_standard printed '$out'"; exit 1; }
LD_LIBRARY_PATH=$prefix/lib "$work/build/cxx20_all" | grep -q '"backend":"ipc"' ||
  { echo "cxx20_all did not run"; exit 1; }
mkdir -p "$work/drop" && cp "$work/build/libwt_cxx17abi.so" "$work/drop/"
WT_PLUGIN_PATH=$work/drop "$prefix/bin/wt" plugins --json > "$work/plugins.json"
grep -A8 "\"path\": \"$work/drop/libwt_cxx17abi.so\"" "$work/plugins.json" | grep -q '"usable": true' ||
  { cat "$work/plugins.json"; echo "the C++17 plugin is not usable"; exit 1; }
echo "each runs; the C++17 plugin loads"

# Outside CMake (a hand-written -I), a C++17 compile of a C++ header stops with a sentence.
printf '#include <wt/wt.hpp>\nint main() { return 0; }\n' > "$work/cxx17.cpp"
if c++ -std=c++17 -fsyntax-only -I"$prefix/include" "$work/cxx17.cpp" 2> "$work/cxx17.log"; then
  echo "a C++17 compile of <wt/wt.hpp> was accepted"; exit 1
fi
grep -q "wt's C++ headers need C++20" "$work/cxx17.log" ||
  { head -20 "$work/cxx17.log"; echo "the C++17 compile failed without saying why"; exit 1; }
echo "a C++17 compile of <wt/wt.hpp> is refused: $(grep -o "wt's C++ headers need C++20[^\"]*" "$work/cxx17.log" | head -1)"

# What the installed docs tell a user to use is in the prefix: the example configs, the docs, and
# an authoring guide that cites installed paths, not the source tree.
for c in quickstart ipc_in_place ipc_two_ranks nccl_host nccl_cuda sparse_delta vllm_http; do
  [[ -f $prefix/share/wt/configs/$c.yaml ]] || { echo "share/wt/configs/$c.yaml is not installed"; exit 1; }
done
[[ -f $prefix/share/wt/configs/layouts/kimi-k2-1t.json ]] ||
  { echo "share/wt/configs/layouts/kimi-k2-1t.json is not installed"; exit 1; }
for d in README.md CHANGELOG.md plugin-authoring.md abi-policy.md config.md; do
  [[ -f $prefix/share/doc/wt/$d ]] || { echo "share/doc/wt/$d is not installed"; exit 1; }
done
if grep -nE '(^|[ `(])(tests/|cmake/wt_plugin\.map|include/wt/)' "$prefix/share/doc/wt/plugin-authoring.md"; then
  echo "plugin-authoring.md points a user at the source tree"; exit 1
fi
echo "configs and docs are installed; plugin-authoring.md cites installed paths only"
