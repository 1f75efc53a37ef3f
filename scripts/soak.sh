#!/usr/bin/env bash
# Soak: ROUNDS weight syncs through every CPU backend variant against ONE long-running `wt serve`,
# each round verified by checksum. Prints the server's RSS, open fds, threads and the wt segments
# in /dev/shm after warm-up and at the end, and fails unless they stayed flat.
#
#   scripts/soak.sh [ROUNDS] [--model tiny|qwen2.5-0.5b]     (default 1000 rounds, tiny)
#
# Needs a build (scripts/build.sh); WT_BUILD_DIR overrides build/.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1000}
model=tiny
if [[ ${2:-} == --model ]]; then model=${3:?--model needs a name}; fi
build=${WT_BUILD_DIR:-build}
wt="$build/bin/wt"
[[ -x $wt ]] || { echo "soak: $wt is missing; run scripts/build.sh first" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/wt-soak-XXXXXX")
server_pid=""
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The variants of every backend that runs on CPU. (nccl and sparse_nccl add theirs when their
# engines exist.)
variants=(
  "ipc-packed|backend: ipc
init_info: {packed: true, packed_buffer_size_bytes: 262144, packed_num_buffers: 2}"
  "ipc-unpacked|backend: ipc
init_info: {packed: false}"
  "ipc-in-place|backend: ipc
init_info: {packed: false}
trainer: {weights_in_shared_memory: true}"
)

"$wt" serve --backend ipc --port 0 >"$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  url=$(grep -o 'http://[0-9.:]*' "$work/serve.log" | head -1 || true)
  [[ -n $url ]] && break
  sleep 0.1
done
[[ -n ${url:-} ]] || { echo "soak: wt serve did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }

sample() {  # rss_kib fds threads segments
  local rss fds threads segs
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status")
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$server_pid/status")
  fds=$(find "/proc/$server_pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  segs=$(find /dev/shm -maxdepth 1 -name 'wt-*' 2>/dev/null | wc -l)
  echo "$rss $fds $threads $segs"
}

# run NAME ROUNDS: one `wt launch` of a variant against the server, verified.
run() {
  local name=$1 n=$2 body=""
  for v in "${variants[@]}"; do [[ ${v%%|*} == "$name" ]] && body=${v#*|}; done
  cat >"$work/$name.yaml" <<EOF
$body
source: {generate: {model: $model, dtype: bfloat16}}
receiver: {embedded: false, url: "$url"}
rounds: $n
training_step: {perturb_fraction: 0.01}
verify: true
EOF
  if ! "$wt" launch "$work/$name.yaml" --json >"$work/$name.out" 2>&1; then
    echo "soak: $name failed:" >&2
    tail -20 "$work/$name.out" >&2
    exit 1
  fi
}

# Warm-up: every variant a few rounds, so buffers and caches reach their steady size.
for v in "${variants[@]}"; do run "${v%%|*}" 3; done
read -r rss0 fds0 threads0 segs0 < <(sample)

per=$(((rounds + ${#variants[@]} - 1) / ${#variants[@]}))
start=$(date +%s)
for v in "${variants[@]}"; do run "${v%%|*}" "$per"; done
elapsed=$(($(date +%s) - start))
read -r rss1 fds1 threads1 segs1 < <(sample)

printf 'soak: %d rounds (%d per variant: %s), model %s, %d s\n' "$((per * ${#variants[@]}))" \
  "$per" "$(for v in "${variants[@]}"; do printf '%s ' "${v%%|*}"; done)" "$model" "$elapsed"
printf '%-22s %12s %12s\n' "wt serve" "after warm-up" "at the end"
printf '%-22s %12s %12s\n' "RSS (KiB)" "$rss0" "$rss1"
printf '%-22s %12s %12s\n' "open fds" "$fds0" "$fds1"
printf '%-22s %12s %12s\n' "threads" "$threads0" "$threads1"
printf '%-22s %12s %12s\n' "wt segments in /dev/shm" "$segs0" "$segs1"

# Flat: RSS within 10 % + 8 MiB (allocator noise), fds, threads and segments not growing.
fail=0
((rss1 <= rss0 + rss0 / 10 + 8192)) || { echo "soak: RSS grew from $rss0 to $rss1 KiB" >&2; fail=1; }
((fds1 <= fds0)) || { echo "soak: open fds grew from $fds0 to $fds1" >&2; fail=1; }
((threads1 <= threads0)) || { echo "soak: threads grew from $threads0 to $threads1" >&2; fail=1; }
((segs1 <= segs0)) || { echo "soak: wt segments grew from $segs0 to $segs1" >&2; fail=1; }
((fail == 0)) && echo "soak: flat"
exit "$fail"
