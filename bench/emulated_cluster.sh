#!/usr/bin/env bash
# An emulated cluster that checks `wt plan`'s model: four hosts as network namespaces, each joined
# to a switch namespace by a veth pair whose two ends are shaped with tc (tbf) to one rate, so
# every host has a link of that rate each way. Trainer ranks 0-1 run on host 1, ranks 2-3 on
# host 2 (started as srun starts them, each holding a quarter of the rows of every tensor); host 3
# and host 4 each run one `wt serve --tensor-parallel-size 2` (2 replicas of TP 2). Then:
#   1. m2n: every trainer rank sends its pieces straight to the worker ranks; the median round;
#   2. `wt plan`'s makespan for the same layout on the same links (two ranks share each host's
#      link: each has half its rate in the plan's per-rank model);
#   3. nccl: trainer rank 0 broadcasts the whole model to the 4 worker ranks over the same links;
#   4. plain TCP moving the same bytes between the same hosts (bench/tcp_matrix.py): what the
#      links carry at best, so that the plan's model and m2n's execution are judged apart.
# Every round is verified on every worker rank. The last line states the measured round against
# the prediction and the goal (measured <= 1.25x predicted).
#
#   bench/emulated_cluster.sh [--wt build/bin/wt] [--rate-mbit 1000] [--rounds 3]
#                             [--model qwen2.5-0.5b] [--no-shaping]
#
# Needs root (namespaces, tc). --no-shaping runs the same cluster on unshaped links (the ctest's
# short form: the topology, the launch and verification, not the rates); without the rights to make
# namespaces it then runs on loopback addresses 127.0.0.11-14 and says so.
set -euo pipefail
wt=build/bin/wt rate_mbit=1000 rounds=3 model=qwen2.5-0.5b shaping=1
while (($#)); do
  case $1 in
    --wt) wt=$2; shift 2 ;;
    --rate-mbit) rate_mbit=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --no-shaping) shaping=0; shift ;;
    *) echo "usage: $0 [--wt PATH] [--rate-mbit N] [--rounds N] [--model NAME] [--no-shaping]" >&2; exit 2 ;;
  esac
done
wt=$(realpath "$wt")
tag="wtc$$"
work=$(mktemp -d)
pids=()
netns=0
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if ((netns)); then
    for ns in h1 h2 h3 h4 sw; do ip netns del "$tag$ns" 2>/dev/null || true; done
    for ns in h1 h2 h3 h4; do rm -rf "/etc/netns/$tag$ns"; done
  fi
  [[ -n ${WT_KEEP:-} ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

# The hosts: a /24 of 10.201.0.0/16 picked from the pid, so parallel runs do not meet.
net="10.201.$(($$ % 250 + 1))"
make_namespaces() {
  ip netns add "${tag}sw" 2>/dev/null || return 1
  ip -n "${tag}sw" link add br0 type bridge || return 1
  ip -n "${tag}sw" link set br0 up
  ip -n "${tag}sw" link set lo up
  for k in 1 2 3 4; do
    ip netns add "${tag}h$k" || return 1
    ip link add "${tag}e$k" type veth peer name "${tag}s$k" || return 1
    ip link set "${tag}e$k" netns "${tag}h$k"
    ip link set "${tag}s$k" netns "${tag}sw"
    ip -n "${tag}h$k" link set lo up
    ip -n "${tag}h$k" addr add "$net.$k/24" dev "${tag}e$k"
    ip -n "${tag}h$k" link set "${tag}e$k" up
    ip -n "${tag}sw" link set "${tag}s$k" master br0
    ip -n "${tag}sw" link set "${tag}s$k" up
    if ((shaping)); then
      # Both directions of host k's link: what it sends (its end) and what it receives (the
      # switch's end toward it). A short queue (10 ms): with 200 ms, plain TCP moving the
      # same matrix took 1.42x the links' time (bufferbloat), with 10 ms 1.06x.
      ip netns exec "${tag}h$k" tc qdisc add dev "${tag}e$k" root tbf rate "${rate_mbit}mbit" \
        burst 256kb latency 10ms || return 1
      ip netns exec "${tag}sw" tc qdisc add dev "${tag}s$k" root tbf rate "${rate_mbit}mbit" \
        burst 256kb latency 10ms || return 1
    fi
    mkdir -p "/etc/netns/${tag}h$k"
    {
      echo "127.0.0.1 localhost"
      for j in 1 2 3 4; do echo "$net.$j ${tag}-node0$j"; done
    } > "/etc/netns/${tag}h$k/hosts"
  done
}
if [[ -z ${WT_CLUSTER_LOOPBACK:-} ]] && make_namespaces; then
  netns=1
  for k in 1 2 3 4; do addr[$k]=$net.$k; on[$k]="ip netns exec ${tag}h$k"; done
  where="4 hosts as network namespaces on a bridge"
  ((shaping)) && where+=", each link shaped to $rate_mbit Mbit/s each way (tc tbf)" ||
    where+=", links unshaped"
else
  ((shaping)) && { echo "the shaped cluster needs root (network namespaces and tc)" >&2; exit 1; }
  for ns in h1 h2 h3 h4 sw; do ip netns del "$tag$ns" 2>/dev/null || true; done
  for k in 1 2 3 4; do addr[$k]=127.0.0.$((10 + k)); on[$k]=""; done
  where="4 loopback addresses, links unshaped"
  [[ -n ${WT_CLUSTER_LOOPBACK:-} ]] && where+=" (WT_CLUSTER_LOOPBACK)" || where+=" (namespaces refused here)"
fi
echo "emulated cluster: $where"

port_base=$((20000 + $$ % 20000))
# The receivers: one `wt serve` of TP 2 on hosts 3 and 4, for m2n, and the same for nccl.
serve() {  # host port backend
  ${on[$1]} "$wt" serve --host "${addr[$1]}" --port "$2" --tensor-parallel-size 2 \
    --weight-transfer-config "{\"backend\": \"$3\", \"transfer_timeout_s\": 600, \"stall_timeout_s\": 60}" \
    > "$work/serve-$1-$3.log" 2>&1 &
  pids+=($!)
}
serve 3 $((port_base + 1)) m2n
serve 4 $((port_base + 2)) m2n
serve 3 $((port_base + 3)) nccl
serve 4 $((port_base + 4)) nccl
# By name: a background job may not have opened its log yet when a glob would look for it.
for f in "$work"/serve-{3,4}-{m2n,nccl}.log; do
  for _ in $(seq 200); do grep -qs "listening on" "$f" && break; sleep 0.1; done
  grep -q "listening on" "$f" || { cat "$f"; echo "FAIL: a receiver did not start"; exit 1; }
done

export WT_TRAINER_SECRET
WT_TRAINER_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
tp_rules='
  tensor_parallel: 2
  tp_rules:
    - {match: "*.o_proj.weight", dim: 1}
    - {match: "*.down_proj.weight", dim: 1}
    - {match: "*_proj.weight", dim: 0}
    - {match: "*_proj.bias", dim: 0}
    - {match: "*embed_tokens.weight", dim: 0}
    - {match: "lm_head.weight", dim: 0}'
cat > "$work/m2n.yaml" <<EOF
backend: m2n
init_info:
  master_address: ${addr[1]}
  master_port: $((port_base + 11))
  transfer_timeout_s: 600
  stall_timeout_s: 60$tp_rules
trainer:
  group_port: $((port_base + 10))
source:
  generate: {model: $model}
  shard: {rank_of: trainer, dim: 0}
receiver:
  urls: ["http://${addr[3]}:$((port_base + 1))", "http://${addr[4]}:$((port_base + 2))"]
  timeout_s: 600
rounds: $rounds
verify: true
EOF
cat > "$work/nccl.yaml" <<EOF
backend: nccl
init_info:
  master_address: ${addr[1]}
  master_port: $((port_base + 12))
  packed: true
  transfer_timeout_s: 600
  stall_timeout_s: 60
source:
  generate: {model: $model}
receiver:
  embedded: false
  url: ["http://${addr[3]}:$((port_base + 3))", "http://${addr[4]}:$((port_base + 4))"]
  timeout_s: 600
rounds: $rounds
verify: true
EOF

# 1. m2n: 4 trainer ranks as srun starts them, 2 per host (on loopback all on one address).
nodes="${tag}-node0[1-2]"
((netns)) || nodes=${addr[1]}
rank_pids=()
for r in 0 1 2 3; do
  node=$((r / 2)) local=$((r % 2))
  host=$((node + 1))
  ((netns)) || { host=1 node=0 local=$r; }
  ${on[$host]} env SLURM_PROCID=$r SLURM_NTASKS=4 SLURM_LOCALID=$local SLURM_NODEID=$node \
    SLURM_JOB_NODELIST="$nodes" SLURM_STEP_NODELIST="$nodes" \
    "$wt" launch "$work/m2n.yaml" --rank-from-env > "$work/m2n.rank$r.log" 2>&1 &
  rank_pids+=($!)
done
for r in 0 1 2 3; do
  wait "${rank_pids[$r]}" || { cat "$work"/m2n.rank*.log; echo "FAIL: m2n trainer rank $r failed"; exit 1; }
done
grep -q "OK: every round verified" "$work/m2n.rank0.log" || { cat "$work/m2n.rank0.log"; exit 1; }

# 3. nccl from one trainer rank on host 1.
${on[1]} "$wt" launch "$work/nccl.yaml" > "$work/nccl.log" 2>&1 ||
  { cat "$work/nccl.log"; echo "FAIL: the nccl broadcast failed"; exit 1; }
grep -q "OK: every round verified" "$work/nccl.log" || { cat "$work/nccl.log"; exit 1; }

# The round times each printed ("round k/N: S s, ..."): the median after the first.
median_round() {
  grep -o "round [0-9]*/[0-9]*: [0-9.]* s" "$1" | awk '{print $3}' | tail -n +2 | sort -n |
    awk '{a[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'
}
m2n_s=$(median_round "$work/m2n.rank0.log")
nccl_s=$(median_round "$work/nccl.log")

# 2. The plan for the same layout: the model's tensors (from its checkpoint's header), 4 trainer
# ranks by rows, 2 replicas of TP 2 under the same rules.
"$wt" gen-checkpoint --model "$model" "$work/ckpt" > /dev/null
python3 - "$work" <<'EOF'
import glob, json, struct, sys
work = sys.argv[1]
params = []
for f in sorted(glob.glob(f"{work}/ckpt/*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    for name, t in header.items():
        if name != "__metadata__":
            params.append({"name": name, "dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[t["dtype"]], "shape": t["shape"]})
rules = [{"match": "*.o_proj.weight", "dim": 1}, {"match": "*.down_proj.weight", "dim": 1},
         {"match": "*_proj.weight", "dim": 0}, {"match": "*_proj.bias", "dim": 0},
         {"match": "*embed_tokens.weight", "dim": 0}, {"match": "lm_head.weight", "dim": 0},
         {"match": "*", "dim": -1}]
layout = {"parameters": params,
          "trainer": {"ranks": 4, "holdings": [{"match": "*", "shard_dim": 0}]},
          "inference": {"replicas": 2, "tensor_parallel": 2, "rules": rules}}
json.dump(layout, open(f"{work}/layout.json", "w"))
EOF
# The plan's model is per rank: two ranks share each host's link, so each has half its rate.
rank_gbs=$(awk -v r="$rate_mbit" 'BEGIN { printf "%.6f", r * 1e6 / 8 / 1e9 / 2 }')
"$wt" plan "$work/layout.json" --trainer-gbs "$rank_gbs" --worker-gbs "$rank_gbs" --json > "$work/plan.json"
read -r predicted_m2n predicted_bcast model_gb worker_bytes < <(python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
print("%.3f %.3f %.2f %d" % (p["makespan_s"], p["rank0_broadcast_s"], p["model_bytes"] / 1e9,
                             p["worker_bytes_max"]))' "$work/plan.json")

# 4. Plain TCP on the same links moving the same matrix: each trainer rank a quarter of each
# worker rank's bytes, all at once (bench/tcp_matrix.py): what the links carry at best.
matrix=$(dirname "$0")/tcp_matrix.py
recv_pids=()
for w in 0 1 2 3; do
  host=$((3 + w / 2))
  ${on[$host]} python3 "$matrix" recv "${addr[$host]}" $((port_base + 20 + w)) 4 > "$work/tcp.recv$w.log" &
  recv_pids+=($!)
done
for w in 0 1 2 3; do
  for _ in $(seq 200); do grep -qs listening "$work/tcp.recv$w.log" && break; sleep 0.05; done
done
send_pids=()
for r in 0 1 2 3; do
  host=$((1 + r / 2))
  ${on[$host]} python3 "$matrix" send $((worker_bytes / 4)) "${addr[3]}:$((port_base + 20))" \
    "${addr[3]}:$((port_base + 21))" "${addr[4]}:$((port_base + 22))" "${addr[4]}:$((port_base + 23))" &
  send_pids+=($!)
done
for p in "${send_pids[@]}" "${recv_pids[@]}"; do wait "$p"; done
tcp_s=$(tail -qn1 "$work"/tcp.recv*.log | sort -n | tail -1)
ratio=$(awk -v m="$m2n_s" -v p="$predicted_m2n" 'BEGIN { printf "%.2f", m / p }')
echo "model: $model, $model_gb GB; 4 trainer ranks on 2 hosts -> 2 replicas of TP 2 on 2 hosts; $rounds rounds each, every one verified"
echo "m2n round (median after the first): $m2n_s s; the plan's makespan on these links: $predicted_m2n s"
echo "plain TCP moving the same bytes on the same links: $tcp_s s; m2n / TCP: $(awk -v a="$m2n_s" -v b="$tcp_s" 'BEGIN { printf "%.2f", a / b }')x; TCP / the plan: $(awk -v a="$tcp_s" -v b="$predicted_m2n" 'BEGIN { printf "%.2f", a / b }')x"
echo "rank-0 broadcast (nccl) on the same links: $nccl_s s (predicted $predicted_bcast s); m2n is $(awk -v a="$nccl_s" -v b="$m2n_s" 'BEGIN { printf "%.2f", a / b }')x faster"
if ((shaping)); then
  echo "emulated cluster: measured $m2n_s s, predicted $predicted_m2n s = ${ratio}x, goal <= 1.25x"
else
  echo "emulated cluster (unshaped: the rates are the machine's, not the links'): measured $m2n_s s, predicted at $rate_mbit Mbit/s $predicted_m2n s"
fi
