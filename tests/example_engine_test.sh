#!/usr/bin/env bash
# The example engine (examples/engine), as its author would build it: install wt into a prefix,
# build the example as installed there against that prefix alone, start it, and sync into it with
# `wt launch` (the installed one), every round verified against the engine's /weight_checksums:
# nccl from one trainer rank, m2n from two trainer ranks holding half of every tensor each.
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
work=$build/example_engine
rm -rf "$work"
mkdir -p "$work"
source "$src/tests/install/build_installed_example.sh" engine
echo "the example engine builds against the installed wt ($(wc -l < "$work/source/engine.cpp") lines)"
wt=$prefix/bin/wt
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

engine=
trap 'kill $engine 2>/dev/null || true; wait $engine 2>/dev/null || true' EXIT
for backend in nccl m2n; do
  "$work/build/engine" --backend $backend > "$work/$backend.engine.log" 2>&1 &
  engine=$!
  url=
  for _ in $(seq 100); do
    url=$(grep -o 'listening on http://[0-9.:]*' "$work/$backend.engine.log" | cut -d' ' -f3) || true
    [[ -n $url ]] && break
    sleep 0.1
  done
  [[ -n $url ]] || { cat "$work/$backend.engine.log"; echo "the engine did not start"; exit 1; }
  ranks=1 shard=
  if [[ $backend == m2n ]]; then ranks=2 shard="  shard: {rank_of: trainer, dim: 0}"; fi
  cat > "$work/$backend.yaml" <<YAML
backend: $backend
init_info:
  master_address: 127.0.0.1
  master_port: $(free_port)
trainer:
  ranks: $ranks
source:
  generate: {model: tiny, dtype: bfloat16, seed: 5}
$shard
receiver:
  embedded: false
  url: $url
rounds: 3
verify: true
YAML
  if ! WT_CACHE_DIR=$work/cache "$wt" launch "$work/$backend.yaml" > "$work/$backend.launch.log" 2>&1; then
    cat "$work/$backend.launch.log" "$work/$backend.engine.log"
    echo "wt launch ($backend) into the example engine failed"
    exit 1
  fi
  # Exit 0 with verify: every round completed and verified; the table says it round by round.
  [[ $(grep -cE ' yes$' "$work/$backend.launch.log") == 3 ]] ||
    { cat "$work/$backend.launch.log"; echo "the $backend rounds were not all verified"; exit 1; }
  echo "$backend: 3 rounds into the example engine, every one verified"
  kill $engine; wait $engine 2>/dev/null || true
done
