#!/usr/bin/python3
"""m2n against nccl in one run, host memory: 2 trainer ranks -> 2 receivers, the same model.

m2n: each trainer rank holds half the rows of every tensor and sends its half to both receivers.
nccl: trainer rank 0 broadcasts the whole model (its ranks hold it whole: the gather an FSDP
trainer would need first is not counted, which favours nccl). Prints the median round of each,
their ratio, and the bytes the busiest trainer rank sent per round.

  bench/m2n_vs_nccl.py [--wt build/bin/wt] [--model qwen2.5-0.5b] [--rounds 6]
"""
import argparse
import re
import socket
import statistics

from wt_launch import launch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(wt, backend, model, rounds, shard):
    cfg = f"""backend: {backend}
init_info:
  master_address: 127.0.0.1
  master_port: {free_port()}
trainer:
  ranks: 2
source:
  generate: {{model: {model}}}
{"  shard: {rank_of: trainer, dim: 0}" if shard else ""}
receiver:
  embedded: true
  count: 2
rounds: {rounds}
verify: true
"""
    return launch(wt, cfg, backend)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wt", default="build/bin/wt")
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    m2n, m2n_log = run(a.wt, "m2n", a.model, a.rounds, True)
    nccl, _ = run(a.wt, "nccl", a.model, a.rounds, False)
    model = m2n["bytes_per_round"]
    # The first round also pays for first touches of fresh memory: the median of the rest.
    med = {k: statistics.median(r["seconds"] for r in rep["rounds"][1:])
           for k, rep in (("m2n", m2n), ("nccl", nccl))}
    sent = [int(b) for b in re.findall(r"ready: \d+ piece\(s\)(?: in \d+ message\(s\))?, (\d+) bytes per round", m2n_log)]
    busiest_m2n = max(sent) if sent else float("nan")
    busiest_nccl = 2 * model  # rank 0 sends the model to each of the 2 receivers
    print(f"model: {a.model}, {model / 1e9:.2f} GB; 2 trainer ranks -> 2 receivers; "
          f"{a.rounds} rounds each, all verified")
    print(f"{'':8}{'median round s':>16}{'first round s':>15}{'busiest trainer GB/round':>26}")
    print(f"{'m2n':8}{med['m2n']:16.3f}{m2n['rounds'][0]['seconds']:15.3f}{busiest_m2n / 1e9:26.2f}")
    print(f"{'nccl':8}{med['nccl']:16.3f}{nccl['rounds'][0]['seconds']:15.3f}{busiest_nccl / 1e9:26.2f}")
    print(f"nccl / m2n round time: {med['nccl'] / med['m2n']:.2f}x; "
          f"m2n's busiest rank sent {busiest_m2n / busiest_nccl:.2f} of nccl rank 0's bytes "
          f"(1/M = 0.50 with M = 2 trainer ranks)")


if __name__ == "__main__":
    main()
