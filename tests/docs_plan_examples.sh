#!/usr/bin/env bash
# Every `wt plan` command in docs/m2n.md runs as written (with this build's wt for build/bin/wt,
# from the source tree, as the docs assume) and prints its figures; the FP8 one says what it sent.
#   tests/docs_plan_examples.sh WT_CLI SOURCE_DIR
set -euo pipefail
wt=$1
cd "$2"
mapfile -t commands < <(grep -E '^build/bin/wt plan ' docs/m2n.md)
((${#commands[@]} >= 2)) || { echo "FAIL: docs/m2n.md has ${#commands[@]} wt plan command(s)"; exit 1; }
for c in "${commands[@]}"; do
  echo "\$ $c"
  out=$(eval "${c/build\/bin\/wt/\"$wt\"}") || { echo "$out"; echo "FAIL: $c"; exit 1; }
  echo "$out"
  grep -q "m2n makespan:" <<<"$out" || { echo "FAIL: no makespan from: $c"; exit 1; }
  if [[ $c == *-engine.json* ]]; then
    grep -q "engine layout: 853 parameters per TP rank, 242 of them composed" <<<"$out" ||
      { echo "FAIL: no engine layout line from: $c"; exit 1; }
  fi
  if [[ $c == *float8_e4m3fn* ]]; then
    grep -q "on the wire: block FP8" <<<"$out" || { echo "FAIL: no FP8 line from: $c"; exit 1; }
  fi
done
echo "OK: ${#commands[@]} wt plan command(s) of docs/m2n.md ran as written"
