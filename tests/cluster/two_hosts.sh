#!/usr/bin/env bash
# Two hosts on one box: a trainer in one network namespace, two `wt serve` receivers in another,
# joined by a veth pair with an address on each side (made and removed here). nccl over Gloo syncs
# a model across them, verified; then the link goes down mid-round and every process must fail
# within its deadline, the receivers staying up. Where namespaces cannot be made (no root), the
# same topology runs on two loopback addresses, 127.0.0.2 and 127.0.0.3, and the cut is a
# receiver that stops (SIGSTOP) instead; the script says which it used (WT_TWO_HOSTS_LOOPBACK=1
# forces that form).
#
#   tests/cluster/two_hosts.sh WT_CLI CACHE_DIR
set -euo pipefail
wt=$1
cache=$2
deadline_s=5  # the transfer deadline on both sides
control_s=15  # the control plane's (receiver.timeout_s): a cut between two broadcasts meets it
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
  on_trainer=(ip netns exec "${tag}a")
  on_receivers=(ip netns exec "${tag}b")
  echo "two hosts: network namespaces ${tag}a ($trainer_addr) and ${tag}b ($receiver_addr), joined by a veth pair"
else
  ip netns del "${tag}a" 2>/dev/null || true
  trainer_addr=127.0.0.2 receiver_addr=127.0.0.3
  on_trainer=() on_receivers=()
  echo "two hosts: namespaces refused here; loopback addresses $trainer_addr and $receiver_addr"
fi

port_base=$((20000 + $$ % 20000))
for k in 0 1; do
  "${on_receivers[@]}" "$wt" serve --host "$receiver_addr" --port $((port_base + k)) \
    --weight-transfer-config "{\"backend\": \"nccl\", \"transfer_timeout_s\": $deadline_s, \"rendezvous_timeout_s\": 10}" \
    > "$work/receiver$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1; do
  for _ in $(seq 100); do grep -q "listening on" "$work/receiver$k.log" && break; sleep 0.1; done
  grep -q "listening on" "$work/receiver$k.log" || { cat "$work/receiver$k.log"; exit 1; }
done

config() {  # name rounds master_port verify
  cat > "$work/$1.yaml" <<EOF
backend: nccl
init_info:
  master_address: $trainer_addr
  master_port: $3
  packed: true
  packed_buffer_size_bytes: 335544320  # chunks of 320 MiB: each is sent well within the deadline
  transfer_timeout_s: $deadline_s
source:
  generate: {model: qwen2.5-0.5b}
receiver:
  embedded: false
  url: ["http://$receiver_addr:$port_base", "http://$receiver_addr:$((port_base + 1))"]
  timeout_s: $control_s
rounds: $2
verify: $4
EOF
}

# 1. A verified sync of a 1 GB model across the two hosts.
config sync 2 $((port_base + 10)) true
WT_CACHE_DIR=$cache "${on_trainer[@]}" "$wt" launch "$work/sync.yaml" > "$work/sync.log" 2>&1 ||
  { cat "$work/sync.log"; echo "FAIL: the sync across the two hosts failed"; exit 1; }
grep -q "OK: every round verified" "$work/sync.log" ||
  { cat "$work/sync.log"; echo "FAIL: not every round verified"; exit 1; }
echo "synced and verified: $(grep -c "verified [0-9]*/[0-9]* tensors" "$work/sync.log") rounds across the two hosts"

# 2. The link goes down in the middle of a round.
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
# Inside a broadcast the transfer deadline ends the round; in a control call between two (a busy
# machine makes that likelier), the control plane's.
if grep -q "did not take part in time or went away" "$work/cut.log"; then
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
    for _ in $(seq $((deadline_s * 20 + 60))); do
      grep -q "receive failed" "$work/receiver0.log" && grep -q "receive failed" "$work/receiver1.log" && break
      sleep 0.1
    done
    for k in 0 1; do
      grep -q "receive failed" "$work/receiver$k.log" ||
        { cat "$work/receiver$k.log"; echo "FAIL: receiver $k did not end its round"; exit 1; }
    done
    echo "both receivers ended the round: $(grep -h -o "receive failed: [^(]*" "$work"/receiver*.log | sort -u | head -1)"
  fi
  for k in 0 1; do kill -0 "${pids[$k]}" || { echo "FAIL: receiver $k died"; exit 1; }; done
else
  kill -CONT "${pids[@]}"
fi
echo "PASS"
