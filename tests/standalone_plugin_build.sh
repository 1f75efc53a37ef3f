#!/usr/bin/env bash
# Installs wt into a staging prefix, builds one plugin alone against it with find_package(wt),
# and checks the result loads, exports only its entry symbol, and is listed by `wt plugins`.
set -euo pipefail
src=$1 build=$2 plugin=${3:-sparse_nccl}
stage=$build/standalone/prefix
out=$build/standalone/$plugin
rm -rf "$build/standalone"
cmake --install "$build" --prefix "$stage" >/dev/null
# A unity build (fewer translation units): the test checks that the plugin builds and loads, and
# it shares the machine with the rest of the suite.
cmake -S "$src/plugins/$plugin" -B "$out" -G Ninja -DCMAKE_PREFIX_PATH="$stage" -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$out" >/dev/null
so=$out/libwt_$plugin.so
symbols=$(nm -D --defined-only "$so" | awk '{print $3}')
[[ $symbols == wt_plugin_get ]] || { echo "exports more than wt_plugin_get: $symbols"; exit 1; }
mkdir -p "$out/drop" && cp "$so" "$out/drop/"
WT_PLUGIN_PATH=$out/drop "$build/bin/wt" plugins --json > "$out/plugins.json"
grep -q "\"path\": \"$out/drop/libwt_$plugin.so\"" "$out/plugins.json" || { cat "$out/plugins.json"; exit 1; }
grep -A8 "\"path\": \"$out/drop/libwt_$plugin.so\"" "$out/plugins.json" | grep -q '"usable": true' || { cat "$out/plugins.json"; exit 1; }
echo "standalone $plugin plugin built against the installed wt and loads"

# The package from a bare install: wt::wt alone, and a C plugin on wt::plugin_abi alone.
check=$build/standalone/install_check
cmake -S "$src/tests/install" -B "$check" -G Ninja -DCMAKE_PREFIX_PATH="$stage" >/dev/null
cmake --build "$check" >/dev/null
[[ $(cat "$check/plugin_install_dir.txt") == "$stage/lib/wt/plugins" ]] ||
  { echo "WT_PLUGIN_INSTALL_DIR is $(cat "$check/plugin_install_dir.txt"), not $stage/lib/wt/plugins"; exit 1; }
LD_LIBRARY_PATH=$stage/lib "$check/engines_only" | tail -1 | grep -qx "$stage/lib/wt/plugins" ||
  { echo "an engines-only program does not search the installed plugin directory"; exit 1; }
# The plugin in C of docs/plugin-authoring.md, with fmt, spdlog, nlohmann_json and DLPack's own
# package all hidden from CMake: the C ABI needs none of them (DLPack from wt's prefix).
cplugin=$build/standalone/c_plugin
hide="-DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON"
hide+=" -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -DCMAKE_DISABLE_FIND_PACKAGE_dlpack=ON"
# shellcheck disable=SC2086
# The example as installed (share/doc/wt/examples/c_plugin), as a user without the source tree has it.
cmake -S "$stage/share/doc/wt/examples/c_plugin" -B "$cplugin" -G Ninja -DCMAKE_PREFIX_PATH="$stage" $hide >/dev/null
cmake --build "$cplugin" >/dev/null
symbols=$(nm -D --defined-only "$cplugin/libwt_mine.so" | awk '{print $3}')
[[ $symbols == wt_plugin_get ]] || { echo "the C plugin exports more than wt_plugin_get: $symbols"; exit 1; }
mkdir -p "$cplugin/drop" && cp "$cplugin/libwt_mine.so" "$cplugin/drop/"
WT_PLUGIN_PATH=$cplugin/drop "$build/bin/wt" plugins --json > "$cplugin/plugins.json"
grep -A8 "\"path\": \"$cplugin/drop/libwt_mine.so\"" "$cplugin/plugins.json" | grep -q '"usable": true' ||
  { cat "$cplugin/plugins.json"; exit 1; }
grep -A8 "\"path\": \"$cplugin/drop/libwt_mine.so\"" "$cplugin/plugins.json" | grep -q '"plugin_version": "1.0.0"' ||
  { cat "$cplugin/plugins.json"; exit 1; }
# A C++ target asked for without fmt: refused, saying what a C plugin asks for instead.
mkdir -p "$build/standalone/needs_cxx"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(x LANGUAGES CXX)\nfind_package(wt CONFIG REQUIRED COMPONENTS wt)\n' \
  > "$build/standalone/needs_cxx/CMakeLists.txt"
# shellcheck disable=SC2086
if out=$(cmake -S "$build/standalone/needs_cxx" -B "$build/standalone/needs_cxx/build" \
           -DCMAKE_PREFIX_PATH="$stage" $hide 2>&1); then
  echo "find_package(wt COMPONENTS wt) succeeded without fmt"; exit 1
fi
# (CMake reflows a message's lines.)
tr -s ' \n' '  ' <<<"$out" | grep -q "A plugin in C needs none of them" || { echo "$out"; exit 1; }
[[ -f $stage/share/doc/wt/abi-policy.md ]] || { echo "docs are not installed under share/doc/wt"; exit 1; }
echo "wt::wt alone, and a C plugin on wt::plugin_abi alone (no fmt, spdlog, JSON or DLPack package), build against the installed wt"
