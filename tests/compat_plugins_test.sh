#!/usr/bin/env bash
# Source compatibility (docs/abi-policy.md): the frozen plugin sources under tests/compat, written
# against earlier releases' installed SDK, build unchanged against this tree's installed wt, export
# only their entry symbol, load in `wt plugins`, and sync a verified round through `wt launch`.
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
work=$build/compat_plugins
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
wt=$prefix/bin/wt
for dir in "$src"/tests/compat/sdk-*/; do
  release=$(basename "$dir")
  out=$work/$release
  # Warnings are shown (a deprecated name is expected to warn), never turned into errors.
  cmake -S "$dir" -B "$out/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$out/build" 2>&1 | { grep -E "warning|error" || true; }
  so=$out/build/libwt_file.so
  [[ -f $so ]] || { echo "$release: the plugin did not build"; exit 1; }
  symbols=$(nm -D --defined-only "$so" | awk '{print $3}')
  [[ $symbols == wt_plugin_get ]] || { echo "$release: exports more than wt_plugin_get: $symbols"; exit 1; }
  mkdir -p "$out/plugins" "$out/shared" && chmod 0755 "$out/plugins" && cp "$so" "$out/plugins/"
  WT_PLUGIN_PATH=$out/plugins "$wt" plugins --json > "$out/plugins.json"
  grep -A8 "\"path\": \"$out/plugins/libwt_file.so\"" "$out/plugins.json" | grep -q '"usable": true' ||
    { cat "$out/plugins.json"; echo "$release: wt plugins does not list the plugin as usable"; exit 1; }
  cat > "$out/launch.yaml" <<YAML
backend: file
init_info:
  directory: $out/shared
source:
  generate: {model: tiny, dtype: bfloat16, seed: 5, dir: $out/model}
rounds: 2
verify: true
YAML
  WT_PLUGIN_PATH=$out/plugins "$wt" launch "$out/launch.yaml" > "$out/launch.txt" 2>&1 ||
    { cat "$out/launch.txt"; echo "$release: wt launch through the plugin failed"; exit 1; }
  grep -q "verified" "$out/launch.txt" || { cat "$out/launch.txt"; exit 1; }
  echo "$release: the plugin source built unchanged, loads, and synced 2 verified rounds"
done
