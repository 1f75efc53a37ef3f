#!/usr/bin/env bash
# Two hosts on one box: the trainer in one network namespace, `wt serve` receivers in another,
# joined by a veth pair with an address on each side (made and removed here, with the trainer
# host's name in its own /etc/netns hosts file). Across them:
#   1. nccl over Gloo from `wt launch` (one trainer rank), verified;
#   2. nccl from two trainer ranks started as torchrun starts them (`--rank-from-env`), verified;
#   3. m2n from two trainer ranks started as srun starts them, each sending its half, verified;
#   4. the same m2n job with the link cut mid-round: both trainer ranks fail within the deadline;
#   5. the nccl run with the link cut mid-round: the trainer fails within its deadline.
# The receivers stay up throughout. Where namespaces cannot be made (no root), the same topology
# runs on two loopback addresses, 127.0.0.2 and 127.0.0.3, and a cut is receivers that stop
# (SIGSTOP) instead; the script says which it used (WT_TWO_HOSTS_LOOPBACK=1 forces that form).
#
#   tests/cluster/two_hosts.sh WT_CLI CACHE_DIR
set -euo pipefail
wt=$1
cache=$2
# The stall deadline on both sides: no byte moving for this long fails a round. 10 s: a trainer
# rank whose first round faults in its memory slowly (a loaded machine spends seconds in the
# kernel per GB) keeps its peers' pairs idle meanwhile, and 5 s failed there.
deadline_s=10
round_s=120   # a round's own bound: a slow round on a loaded machine still completes
control_s=15  # the control plane's (receiver.timeout_s): a cut between two broadcasts meets it
# The syncs before any cut (1-3) give the control plane 120 s instead: a streaming round's update
# call spans its transfer, and a receiver's first round faults in 1 GB of staging memory, which a
# loaded machine has been seen to take over 15 s for (a healthy one: 0.2 s).
sync_control_s=120
# Their trainer ranks' stall deadline too: in a first round a trainer rank waits on a receiver
# that lands 1 GB in fresh memory (nothing on the wire tells that from a dead peer), which a
# loaded machine has been seen to take over 10 s for.
sync_stall_s=60
tag="wt$$"
work=$(mktemp -d)
pids=()
netns=0

cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if ((netns)); then
    ip netns del "${tag}a" 2>/dev/null || true
    ip netns del "${tag}b" 2>/dev/null || true
    rm -rf "/etc/netns/${tag}a" "/etc/netns/${tag}b"
  fi
  [[ -n ${WT_KEEP:-} ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT

# Addresses: a /24 of 10.200.0.0/16 picked from the pid, so parallel runs do not meet.
net="10.200.$(($$ % 250 + 1))"
if [[ -z ${WT_TWO_HOSTS_LOOPBACK:-} ]] && ip netns add "${tag}a" 2>/dev/null && ip netns add "${tag}b" 2>/dev/null &&
  ip link add "${tag}x" type veth peer name "${tag}y" 2>/dev/null; then
  netns=1
  ip link set "${tag}x" netns "${tag}a"
  ip link set "${tag}y" netns "${tag}b"
  ip -n "${tag}a" addr add "$net.1/24" dev "${tag}x"
  ip -n "${tag}b" addr add "$net.2/24" dev "${tag}y"
  for side in a b; do ip -n "$tag$side" link set lo up; done
  ip -n "${tag}a" link set "${tag}x" up
  ip -n "${tag}b" link set "${tag}y" up
  trainer_addr="$net.1" receiver_addr="$net.2"
  # The hosts' names, as SLURM's node list gives them, resolve on both (ip netns exec mounts
  # /etc/netns/NAME/hosts over /etc/hosts).
  for side in a b; do
    mkdir -p "/etc/netns/$tag$side"
    printf '127.0.0.1 localhost\n%s %s-node01\n%s %s-node02\n' "$trainer_addr" "$tag" \
      "$receiver_addr" "$tag" > "/etc/netns/$tag$side/hosts"
  done
  slurm_nodes="${tag}-node[01-02]" slurm_host="${tag}-node01"
  # Trainer rank 1 of the launcher-started jobs runs on the other host: the trainer group
  # crosses the link too.
  rank1_addr=$receiver_addr
  on_trainer=(ip netns exec "${tag}a")
  on_receivers=(ip netns exec "${tag}b")
  echo "two hosts: network namespaces ${tag}a ($trainer_addr) and ${tag}b ($receiver_addr), joined by a veth pair"
else
  ip netns del "${tag}a" 2>/dev/null || true
  ip netns del "${tag}b" 2>/dev/null || true
  trainer_addr=127.0.0.2 receiver_addr=127.0.0.3
  slurm_nodes=127.0.0.2 slurm_host=127.0.0.2 rank1_addr=127.0.0.2
  on_trainer=() on_receivers=()
  echo "two hosts: namespaces refused here; loopback addresses $trainer_addr and $receiver_addr"
fi

port_base=$((20000 + $$ % 20000))
# Receivers 0 and 1 take nccl, 2 and 3 m2n. The m2n workers fault in their staging before they
# listen, as `wt launch` starts its own (--expect-model-bytes, the 1 GB model): their stall
# deadline is the cut phases' 10 s, and a first round that faults in 1 GB on a loaded machine
# keeps pairs idle for longer. Faulting in takes a healthy machine under a second; a loaded one,
# up to a minute.
for k in 0 1 2 3; do
  backend=nccl expect=()
  ((k < 2)) || backend=m2n expect=(--expect-model-bytes 1000000000)
  "${on_receivers[@]}" "$wt" serve --host "$receiver_addr" --port $((port_base + k)) "${expect[@]}" \
    --weight-transfer-config "{\"backend\": \"$backend\", \"transfer_timeout_s\": $round_s, \"stall_timeout_s\": $deadline_s, \"rendezvous_timeout_s\": 10}" \
    > "$work/receiver$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1 2 3; do
  for _ in $(seq 1200); do grep -q "listening on" "$work/receiver$k.log" && break; sleep 0.1; done
  grep -q "listening on" "$work/receiver$k.log" || { cat "$work/receiver$k.log"; exit 1; }
done
# The secret the trainer ranks of a job share, as a batch script would export it.
export WT_TRAINER_SECRET
WT_TRAINER_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')

config() {  # name rounds master_port verify
  cat > "$work/$1.yaml" <<EOF
backend: nccl
init_info:
  master_address: $trainer_addr
  master_port: $3
  packed: true
  packed_buffer_size_bytes: 335544320  # chunks of 320 MiB
  transfer_timeout_s: $round_s
  stall_timeout_s: $deadline_s
source:
  generate: {model: qwen2.5-0.5b}
receiver:
  embedded: false
  url: ["http://$receiver_addr:$port_base", "http://$receiver_addr:$((port_base + 1))"]
  timeout_s: ${control:-$control_s}
rounds: $2
verify: $4
EOF
}

# 1. A verified sync of a 1 GB model across the two hosts.
control=$sync_control_s config sync 2 $((port_base + 10)) true
WT_CACHE_DIR=$cache "${on_trainer[@]}" "$wt" launch "$work/sync.yaml" > "$work/sync.log" 2>&1 ||
  { cat "$work/sync.log"; echo "FAIL: the sync across the two hosts failed"; exit 1; }
grep -q "OK: every round verified" "$work/sync.log" ||
  { cat "$work/sync.log"; echo "FAIL: not every round verified"; exit 1; }
echo "synced and verified: $(grep -c "verified [0-9]*/[0-9]* tensors" "$work/sync.log") rounds across the two hosts"

# Two trainer ranks as a cluster launcher starts them, in the background: rank_job NAME CONFIG
# LAUNCHER; each rank's pid in job_pids, its log in $work/NAME.rankK.log.
# With namespaces, rank 1 runs on the other host, one rank per host, as the launcher sets it;
# on loopback addresses both run on one.
rank_job() {
  job_pids=()
  for r in 0 1; do
    on_host=("${on_trainer[@]}") node=0 local=$r per_node=2
    if ((netns && r == 1)); then on_host=("${on_receivers[@]}") node=1 local=0 per_node=1; fi
    if [[ $3 == torchrun ]]; then
      vars=(RANK=$r WORLD_SIZE=2 LOCAL_RANK=$local LOCAL_WORLD_SIZE=$per_node GROUP_RANK=$node
            MASTER_ADDR="$trainer_addr" MASTER_PORT=$((port_base + 30)))
    else
      vars=(SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$local SLURM_NODEID=$node
            SLURM_JOB_NODELIST="$slurm_nodes" SLURM_STEP_NODELIST="$slurm_nodes")
    fi
    WT_CACHE_DIR=$cache "${on_host[@]}" env "${vars[@]}" "$wt" launch "$2" --rank-from-env \
      > "$work/$1.rank$r.log" 2>&1 &
    job_pids+=($!)
  done
}

job_config() {  # name backend receiver-ports rounds verify group-port [extra source line]
  cat > "$work/$1.yaml" <<EOF
backend: $2
init_info:
  master_address: $trainer_addr
  master_port: $(($6 + 1))
  transfer_timeout_s: $round_s
  stall_timeout_s: ${stall:-$deadline_s}
trainer:
  group_port: $6
  group_timeout_s: $deadline_s  # a rank waiting for a cut-off peer between rounds stops here
source:
  generate: {model: qwen2.5-0.5b}
  ${7:-}
receiver:
  urls: [$(for p in $3; do printf '"http://%s:%s", ' "$receiver_addr" $((port_base + p)); done)]
  timeout_s: ${control:-$control_s}
rounds: $4
verify: $5
EOF
}

# 2. nccl from two trainer ranks under torchrun's variables (rank 0 sends).
control=$sync_control_s stall=$sync_stall_s job_config torchrun nccl "0 1" 2 true $((port_base + 12))
rank_job torchrun "$work/torchrun.yaml" torchrun
for r in 0 1; do
  wait "${job_pids[$r]}" || { cat "$work"/torchrun.rank*.log; echo "FAIL: torchrun rank $r failed"; exit 1; }
done
grep -q "OK: every round verified" "$work/torchrun.rank0.log" || { cat "$work/torchrun.rank0.log"; exit 1; }
grep -q "launcher: torchrun (from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)" \
  "$work/torchrun.rank1.log" || { cat "$work/torchrun.rank1.log"; echo "FAIL: rank 1 did not read torchrun"; exit 1; }
grep -q "this rank's pairs: on $rank1_addr " "$work/torchrun.rank1.log" ||
  { cat "$work/torchrun.rank1.log"; echo "FAIL: rank 1 advertises another address"; exit 1; }
echo "torchrun form: 2 trainer ranks (rank 1 on $rank1_addr), nccl to 2 receivers across the hosts, every round verified"

# 3. m2n from two trainer ranks under SLURM's variables: each sends its half of every tensor.
shard='shard: {rank_of: trainer, dim: 0}'
control=$sync_control_s stall=$sync_stall_s job_config slurm m2n "2 3" 2 true $((port_base + 14)) "$shard"
rank_job slurm "$work/slurm.yaml" slurm
for r in 0 1; do
  wait "${job_pids[$r]}" || { cat "$work"/slurm.rank*.log; echo "FAIL: SLURM rank $r failed"; exit 1; }
done
grep -q "OK: every round verified" "$work/slurm.rank0.log" || { cat "$work/slurm.rank0.log"; exit 1; }
grep -q "rendezvous at $slurm_host:$((port_base + 14)) (SLURM_STEP_NODELIST" "$work/slurm.rank1.log" ||
  { cat "$work/slurm.rank1.log"; echo "FAIL: rank 1 did not meet at SLURM's first host"; exit 1; }
echo "SLURM form: 2 trainer ranks (node list $slurm_nodes, rank 1 on $rank1_addr), m2n shards to 2 receivers, every round verified"

# Cuts the link (or stops these receivers) and prints the time of the cut; heal undoes it.
cut_link() {
  if ((netns)); then
    ip -n "${tag}a" link set "${tag}x" down
  else
    kill -STOP "$@"
  fi
  date +%s.%N
}
heal_link() {
  if ((netns)); then
    ip -n "${tag}a" link set "${tag}x" up
  else
    kill -CONT "$@"
  fi
}
# rounds_ended WHAT K L: receivers K and L end the cut round at their own deadline.
rounds_ended() {
  for _ in $(seq $((deadline_s * 20 + 60))); do
    grep -q "receive failed" "$work/receiver$2.log" && grep -q "receive failed" "$work/receiver$3.log" && break
    sleep 0.1
  done
  for k in "$2" "$3"; do
    grep -q "receive failed" "$work/receiver$k.log" ||
      { cat "$work/receiver$k.log"; echo "FAIL: $1 receiver $k did not end its round"; exit 1; }
  done
  echo "both $1 receivers ended the round: $(grep -h -o "receive failed: [^(]*" "$work/receiver$2.log" "$work/receiver$3.log" | sort -u | head -1)"
}
seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# 4. The same m2n job, the link cut in its third round: both trainer ranks fail within the
# stall deadline.
job_config slurmcut m2n "2 3" 50 false $((port_base + 16)) "$shard"
rank_job slurmcut "$work/slurmcut.yaml" slurm
for _ in $(seq 600); do grep -q "round 2/50" "$work/slurmcut.rank0.log" && break; sleep 0.05; done
grep -q "round 2/50" "$work/slurmcut.rank0.log" || { cat "$work"/slurmcut.rank*.log; echo "FAIL: no m2n round finished"; exit 1; }
sleep 0.2
cut_at=$(cut_link "${pids[2]}" "${pids[3]}")
for r in 0 1; do
  status=0
  wait "${job_pids[$r]}" || status=$?
  took=$(seconds_since "$cut_at")
  log=$work/slurmcut.rank$r.log
  ((status != 0)) || { cat "$log"; echo "FAIL: m2n rank $r did not fail"; exit 1; }
  # As in 5: the stall deadline inside a transfer, the control plane's in rank 0's calls. When
  # rank 0 was held there (the cut came as it started round 3 on a receiver across the link),
  # rank 1 has been seen to end only with it, at the control plane's deadline rather than its
  # own stall deadline: both bound it.
  limit=$deadline_s
  grep -q "did not answer within $control_s s" "$log" "$work/slurmcut.rank0.log" && limit=$control_s
  awk -v t="$took" -v d="$limit" 'BEGIN { exit !(t < d + 3) }' ||
    { cat "$log"; echo "FAIL: m2n rank $r took $took s to fail (deadline $limit s)"; exit 1; }
  echo "m2n trainer rank $r failed $took s after the cut (deadline $limit s): $(grep -o "error: .*" "$log" | head -1 | cut -c1-160)"
done
# The workers end the round at their own deadline, when there was one: on a loaded machine the
# cut can come while the trainer ranks still wait for each other after round 2, or while rank 0
# starts round 3 (its error says which), before any worker has a round to end.
if grep -q -e "after round [0-9]*, waiting for the other trainer ranks" \
  -e "start_weight_update failed" "$work/slurmcut.rank0.log"; then
  echo "the cut came before round 3 reached the workers: no worker had a round to end"
elif ((netns)); then
  rounds_ended m2n 2 3
fi
heal_link "${pids[2]}" "${pids[3]}"
for k in 2 3; do kill -0 "${pids[$k]}" || { echo "FAIL: m2n receiver $k died"; exit 1; }; done

# 5. The link goes down in the middle of a round of the one-rank nccl run.
config cut 50 $((port_base + 11)) false
WT_CACHE_DIR=$cache "${on_trainer[@]}" "$wt" launch "$work/cut.yaml" > "$work/cut.log" 2>&1 &
launch=$!
for _ in $(seq 600); do grep -q "round 2/50" "$work/cut.log" && break; sleep 0.05; done
grep -q "round 2/50" "$work/cut.log" || { cat "$work/cut.log"; echo "FAIL: no round finished"; exit 1; }
sleep 0.2  # into round 3
cut_at=$(date +%s.%N)
if ((netns)); then
  ip -n "${tag}a" link set "${tag}x" down
  echo "link down at round 3 ($(date +%T.%N))"
else
  kill -STOP "${pids[@]}"
  echo "receivers stopped (SIGSTOP) at round 3"
fi
status=0
wait "$launch" || status=$?
took=$(awk -v a="$cut_at" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
((status != 0)) || { cat "$work/cut.log"; echo "FAIL: the trainer did not fail"; exit 1; }
# Inside a broadcast the stall deadline ends the round; in a control call between two (a busy
# machine makes that likelier), the control plane's.
if grep -qE "did not take part in time or went away|stall_timeout_s" "$work/cut.log"; then
  limit=$deadline_s where="in a broadcast"
elif grep -q "did not answer within $control_s s" "$work/cut.log"; then
  limit=$control_s where="in a control call"
else
  cat "$work/cut.log"
  echo "FAIL: the trainer's error does not say what happened"
  exit 1
fi
echo "the trainer failed $took s after the cut, $where (deadline $limit s), exit $status"
awk -v t="$took" -v d="$limit" 'BEGIN { exit !(t < d + 3) }' ||
  { cat "$work/cut.log"; echo "FAIL: the trainer took $took s to fail"; exit 1; }
if ((netns)); then
  # Cut inside a broadcast, the receivers fail their round at their own deadline; either way they
  # stay up.
  if [[ $where == "in a broadcast" ]]; then
    rounds_ended nccl 0 1
  fi
  for k in 0 1; do kill -0 "${pids[$k]}" || { echo "FAIL: receiver $k died"; exit 1; }; done
else
  kill -CONT "${pids[@]}"
fi
echo "PASS"
