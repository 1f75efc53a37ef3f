#!/usr/bin/python3
"""m2n with block FP8 on the wire against BF16, in one run: the same model, ranks and receiver.

2 trainer ranks (FSDP rows) -> one `wt serve --tensor-parallel-size 2` holding the engine's own
fused tensors (configs/m2n_engine_host.yaml, and configs/m2n_fp8_host.yaml's wire_dtype). Every
round of both is verified (FP8: against the checkpoint quantized whole, bit for bit). Prints the
bytes the trainer ranks send per round, the median round time of each, and one core's
quantization rate (wt_bench_fp8, when built).

  bench/m2n_fp8_vs_bf16.py [--wt build/bin/wt] [--model qwen2.5-0.5b] [--rounds 6]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys

from wt_launch import launch

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(wt, config, model, rounds):
    with open(os.path.join(HERE, "..", "configs", config)) as f:
        text = f.read()
    text = re.sub(r"master_port: \d+", f"master_port: {free_port()}", text)
    text = re.sub(r"model: [\w.-]+", f"model: {model}", text)
    text = re.sub(r"rounds: \d+", f"rounds: {rounds}", text)
    report, log = launch(wt, text, config)
    sent = [int(b) for b in re.findall(
        r"ready: \d+ piece\(s\) in \d+ message\(s\), (\d+) bytes per round", log)]
    if len(sent) != 2:
        sys.exit(f"{config}: found {len(sent)} trainer ranks' bytes in the log, not 2")
    median = statistics.median(r["seconds"] for r in report["rounds"][1:])
    return sum(sent), median, report


def quantize_rate(wt):
    bench = os.path.join(os.path.dirname(wt), "wt_bench_fp8")
    if not os.path.exists(bench):
        return None
    out = subprocess.run([bench], capture_output=True, text=True).stdout
    m = re.search(r"fp8 quantize: ([\d.]+) GB/s of BF16 per core", out)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wt", default="build/bin/wt")
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    bf16_bytes, bf16_s, report = run(a.wt, "m2n_engine_host.yaml", a.model, a.rounds)
    fp8_bytes, fp8_s, _ = run(a.wt, "m2n_fp8_host.yaml", a.model, a.rounds)
    print(f"model: {a.model}, {report['bytes_per_round'] / 1e9:.2f} GB as held; 2 trainer ranks "
          f"-> TP 2 receiver; {a.rounds} rounds each, all verified")
    print(f"{'':6}{'sent GB/round':>15}{'median round s':>16}")
    print(f"{'bf16':6}{bf16_bytes / 1e9:15.3f}{bf16_s:16.3f}")
    print(f"{'fp8':6}{fp8_bytes / 1e9:15.3f}{fp8_s:16.3f}")
    rate = quantize_rate(a.wt)
    if rate is not None:
        print(f"quantize: {rate:.2f} GB/s of BF16 per core (goal >= 1 GB/s)")
    print(f"m2n fp8 vs bf16: {fp8_bytes / bf16_bytes:.3f}x the bytes on the wire, "
          f"{fp8_s / bf16_s:.2f}x the round time (the trainer ranks quantize on the cores that "
          f"also carry both ends of the loopback)")


if __name__ == "__main__":
    main()
