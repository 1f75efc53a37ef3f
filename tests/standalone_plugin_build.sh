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
symbols=$(nm -D --defined-only "$check/libwt_abionly.so" | awk '{print $3}')
[[ $symbols == wt_plugin_get ]] || { echo "abionly exports more than wt_plugin_get: $symbols"; exit 1; }
mkdir -p "$check/drop" && cp "$check/libwt_abionly.so" "$check/drop/"
WT_PLUGIN_PATH=$check/drop "$build/bin/wt" plugins --json > "$check/plugins.json"
grep -A8 "\"path\": \"$check/drop/libwt_abionly.so\"" "$check/plugins.json" | grep -q '"usable": true' ||
  { cat "$check/plugins.json"; exit 1; }
[[ -f $stage/share/doc/wt/abi-policy.md ]] || { echo "docs are not installed under share/doc/wt"; exit 1; }
echo "wt::wt alone and a C plugin on wt::plugin_abi alone build against the installed wt"
