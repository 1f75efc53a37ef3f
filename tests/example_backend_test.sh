#!/usr/bin/env bash
# The out-of-tree example backend, as its author would ship it: install wt into a prefix, build
# the example as installed there (share/doc/wt/examples/file_backend) against that prefix alone, deploy the .so by copying it into a plugin
# directory, then, with the installed wt and nothing rebuilt: `wt plugins` lists it,
# `wt conformance` passes, and `wt launch` syncs through it into a separately started
# `wt serve`, every round verified.
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
work=$build/example_backend
rm -rf "$work"
mkdir -p "$work/plugins" "$work/shared" "$work/conformance-shared"
chmod 0755 "$work/plugins"
source "$src/tests/install/build_installed_example.sh" file_backend
cp "$work/build/libwt_file.so" "$work/plugins/"
wt=$prefix/bin/wt
export WT_PLUGIN_PATH=$work/plugins

"$wt" plugins --json > "$work/plugins.json"
grep -A8 "\"path\": \"$work/plugins/libwt_file.so\"" "$work/plugins.json" | grep -q '"usable": true' ||
  { cat "$work/plugins.json"; echo "wt plugins does not list the deployed file backend as usable"; exit 1; }
echo "wt plugins lists the deployed file backend"

# A directory of its own: its peer-killed check kills a trainer mid-write, and what that trainer
# leaves is the kill's, not the sync's checked below.
"$wt" conformance "$work/plugins/libwt_file.so" --init-info "{\"directory\": \"$work/conformance-shared\"}" |
  tee "$work/conformance.txt"
grep -Eq 'checks: [0-9]+ passed, 0 failed, 0 skipped$' "$work/conformance.txt" ||
  { echo "wt conformance does not pass for the example"; exit 1; }

# The example with its end_weight_update call deleted, as an outside author once shipped one: a
# round it fails stays open on the worker, and `wt conformance` says so.
mkdir -p "$work/noend/plugins" && chmod 0755 "$work/noend/plugins"
cp -r "$work/source" "$work/noend/source"
sed -i '/client_.end_weight_update(/,/;/d' "$work/noend/source/file_backend.cpp"
! grep -q "end_weight_update(" "$work/noend/source/file_backend.cpp" || { echo "the call was not deleted"; exit 1; }
cmake -S "$work/noend/source" -B "$work/noend/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/noend/build" >/dev/null
cp "$work/noend/build/libwt_file.so" "$work/noend/plugins/"
mkdir -p "$work/noend/shared"
"$wt" conformance "$work/noend/plugins/libwt_file.so" --init-info "{\"directory\": \"$work/noend/shared\"}" \
  > "$work/noend/conformance.txt" || true
grep -Eq "^  rejected-update +[0-9-]+ +FAIL +.*the worker's update session is still open" "$work/noend/conformance.txt" ||
  { cat "$work/noend/conformance.txt"; echo "wt conformance did not notice the missing end_weight_update"; exit 1; }
echo "without its end_weight_update call, the example fails conformance at rejected-update"

# The receiver sees the shared directory under another path (its own mount point).
ln -s "$work/shared" "$work/receiver-mount"
"$wt" serve --port 0 --weight-transfer-config \
  "{\"backend\": \"file\", \"directory\": \"$work/receiver-mount\"}" > "$work/serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true; wait $serve 2>/dev/null || true' EXIT
url=
for _ in $(seq 100); do
  url=$(grep -o 'listening on http://[0-9.:]*' "$work/serve.log" | head -1 | cut -d' ' -f3) || true
  [[ -n $url ]] && break
  kill -0 $serve 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
[[ -n $url ]] || { cat "$work/serve.log"; echo "wt serve did not start"; exit 1; }

cat > "$work/file.yaml" <<YAML
backend: file
init_info:
  directory: $work/shared
source:
  generate:
    model: tiny
    dtype: bfloat16
    seed: 3
    dir: $work/model
receiver:
  embedded: false
  url: $url
rounds: 3
training_step:
  perturb_fraction: 0.01
verify: true
YAML
"$wt" launch "$work/file.yaml" | tee "$work/launch.txt"
[[ -z $(ls -A "$work/shared") ]] || { ls -la "$work/shared"; echo "round files left behind"; exit 1; }
echo "wt launch synced 3 verified rounds through the deployed file backend into wt serve"
