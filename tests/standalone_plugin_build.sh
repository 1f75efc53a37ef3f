#!/usr/bin/env bash
# Installs wt into a staging prefix, builds one plugin alone against it with find_package(wt),
# and checks the result loads, exports only its entry symbol, and is listed by `wt plugins`.
set -euo pipefail
src=$1 build=$2 plugin=${3:-sparse_nccl}
stage=$build/standalone/prefix
out=$build/standalone/$plugin
rm -rf "$build/standalone"
cmake --install "$build" --prefix "$stage" >/dev/null
cmake -S "$src/plugins/$plugin" -B "$out" -G Ninja -DCMAKE_PREFIX_PATH="$stage" >/dev/null
cmake --build "$out" >/dev/null
so=$out/libwt_$plugin.so
symbols=$(nm -D --defined-only "$so" | awk '{print $3}')
[[ $symbols == wt_plugin_get ]] || { echo "exports more than wt_plugin_get: $symbols"; exit 1; }
mkdir -p "$out/drop" && cp "$so" "$out/drop/"
WT_PLUGIN_PATH=$out/drop "$build/bin/wt" plugins --json > "$out/plugins.json"
grep -q "\"path\": \"$out/drop/libwt_$plugin.so\"" "$out/plugins.json" || { cat "$out/plugins.json"; exit 1; }
grep -A8 "\"path\": \"$out/drop/libwt_$plugin.so\"" "$out/plugins.json" | grep -q '"usable": true' || { cat "$out/plugins.json"; exit 1; }
echo "standalone $plugin plugin built against the installed wt and loads"
