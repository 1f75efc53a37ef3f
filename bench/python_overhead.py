#!/usr/bin/env python3
"""Python trainer through wt against the same sync driven from C++, and against
torch.distributed (gloo) broadcasting the parameters one by one, as the Python RL stacks do.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--gib 1] [--rounds 9]

Cases: ipc and nccl (host memory), each with a model of ~300 tensors (--gib in all), one of 100
tensors of 1 MiB (where torch.distributed's per-tensor broadcasts come closest) and one of 2,000
small tensors, each laid out as one flat buffer (as the checkpoint the C++ run maps).
Prints seconds per round (median), GB/s and the ratios: Python / C++ (the binding's overhead:
the median over back-to-back round pairs, with its interquartile range; target <= 1.05),
torch.distributed / wt for the 100- and 2,000-tensor models (target >= 3 at 2,000), and m2n from
2 Python trainer ranks (torch.distributed's group, each holding half the rows) against nccl from
one Python rank, the ~300-tensor model into one receiver.
"""

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import wt

CLI = os.environ.get("WT_CLI") or os.path.join(os.path.dirname(__file__), "..", "build", "bin", "wt")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_of(total_bytes, count):
    """Views of one flat buffer, laid out as the C++ run's mapped checkpoint is (tensors back to
    back), so that both runs move the same bytes the same way."""
    numel = max(1, total_bytes // 4 // count)
    flat = torch.rand(numel * count, generator=torch.Generator().manual_seed(0))
    return {f"layers.{i}.weight": flat[i * numel:(i + 1) * numel] for i in range(count)}


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, t in tensors.items():
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for t in tensors.values():
            f.write(t.numpy().tobytes())


def serve(backend):
    proc = subprocess.Popen([CLI, "serve", "--port", "0", "--backend", backend],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().split("listening on ")[1].split()[0]
    return proc, url


def init_info(backend):
    if backend == "ipc":
        return {"packed": True}
    return {"master_address": "127.0.0.1", "master_port": free_port(), "packed": True}


def alternated_round_seconds(backend, model, rounds):
    """Rounds alternate between a live Python source (the dict: Python fetches every tensor each
    round) and wt.PinnedSource over the same tensors (iterated in C++, no Python in the round),
    each into a wt serve of its own, so that the machine's noise hits both alike."""
    procs, engines = [], {}
    try:
        for kind in ("python", "c++"):
            proc, url = serve(backend)
            procs.append(proc)
            info = {"backend": backend, **init_info(backend)}
            if backend == "nccl":
                info["world_size"] = 2
            source = model if kind == "python" else wt.PinnedSource(model)
            engines[kind] = wt.trainer_init(info, client=url, source=source)
            engines[kind].send_weights()  # warm-up: the receiver allocates, pages are mapped
        times = {"python": [], "c++": []}
        for i in range(rounds):
            order = ["python", "c++"] if i % 2 == 0 else ["c++", "python"]  # ABBA: no order bias
            for kind in order:
                engine = engines[kind]
                start = time.perf_counter()
                engine.send_weights()
                times[kind].append(time.perf_counter() - start)
        for engine in engines.values():
            engine.close()
        # The overhead is the median of each round pair's ratio: a pair runs back to back, so a
        # slow stretch of the machine weighs on both of its rounds, not on one side's median.
        pairs = sorted(p / c for p, c in zip(times["python"], times["c++"]))
        quartiles = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
        return (statistics.median(times["python"]), statistics.median(times["c++"]),
                statistics.median(pairs), (quartiles[0], quartiles[-1]))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def launch_round_seconds(backend, checkpoint, rounds, tmp):
    config = {"backend": backend, "init_info": init_info(backend),
              "source": {"safetensors": checkpoint}, "rounds": rounds + 1,
              "training_step": {"perturb_fraction": 0.0}, "verify": False}
    path = os.path.join(tmp, f"{backend}.yaml")
    with open(path, "w") as f:
        json.dump(config, f)
    run = subprocess.run([CLI, "launch", "--json", path], capture_output=True, text=True)
    report = json.loads(run.stdout)
    if not report.get("ok"):
        sys.exit(f"wt launch failed: {report.get('errors')}")
    return statistics.median(r["seconds"] for r in report["rounds"][1:])


GLOO_PEER = r"""
import sys, time, torch, torch.distributed as dist
rank, port, count, numel, rounds = map(int, sys.argv[1:6])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
g = torch.Generator().manual_seed(0)
params = [torch.rand(numel, generator=g) if rank == 0 else torch.empty(numel) for _ in range(count)]
times = []
for r in range(rounds + 1):
    dist.barrier()
    start = time.perf_counter()
    for p in params:
        dist.broadcast(p, src=0)
    dist.barrier()
    times.append(time.perf_counter() - start)
if rank == 0:
    times = sorted(times[1:])
    print(times[len(times) // 2])
"""


# One m2n trainer rank, as torchrun starts it: the model's rows of this rank, the group
# torch.distributed's; rank 0 prints the median round after the first.
M2N_RANK = r"""
import math, sys, time, statistics
import torch, torch.distributed as dist
import wt
url, port, gib, count, rounds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
numel = max(1, int(gib * (1 << 30)) // 4 // count)
flat = torch.rand(numel * count, generator=torch.Generator().manual_seed(0))
rows = math.ceil(numel / world)
lo = min(rank * rows, numel)
source = {f"layers.{i}.weight": wt.Shard(flat[i * numel + lo:i * numel + min(lo + rows, numel)],
                                         (numel,), dim=0, offset=lo) for i in range(count)}
engine = wt.trainer_init({"backend": "m2n", "master_address": "127.0.0.1", "master_port": port},
                         client=url, source=source)
times = []
for _ in range(rounds + 1):
    t0 = time.perf_counter()
    engine.send_weights()
    times.append(time.perf_counter() - t0)
engine.close()
if rank == 0:
    print(statistics.median(times[1:]))
dist.destroy_process_group()
"""


def m2n_round_seconds(gib, count, rounds):
    proc, url = serve("m2n")
    try:
        group_port, port = free_port(), free_port()
        ranks = [subprocess.Popen([sys.executable, "-c", M2N_RANK, url, str(port), str(gib),
                                   str(count), str(rounds)], stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, RANK=str(r), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(group_port)))
                 for r in (0, 1)]
        out = ranks[0].communicate()[0]
        ranks[1].wait()
        if ranks[0].returncode != 0 or ranks[1].returncode != 0:
            sys.exit("the m2n ranks failed")
        return float(out.strip())
    finally:
        proc.terminate()
        proc.wait()


def nccl_round_seconds(model, rounds):
    proc, url = serve("nccl")
    try:
        engine = wt.trainer_init({"backend": "nccl", **init_info("nccl")}, client=url,
                                 source=model)
        times = []
        for _ in range(rounds + 1):
            start = time.perf_counter()
            engine.send_weights()
            times.append(time.perf_counter() - start)
        engine.close()
        return statistics.median(times[1:])
    finally:
        proc.terminate()
        proc.wait()


def gloo_round_seconds(count, numel, rounds):
    port = free_port()
    peers = [subprocess.Popen([sys.executable, "-c", GLOO_PEER, str(r), str(port), str(count),
                               str(numel), str(rounds)], stdout=subprocess.PIPE, text=True)
             for r in (0, 1)]
    out = peers[0].communicate()[0]
    peers[1].wait()
    return float(out.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0, help="size of the ~300-tensor model")
    ap.add_argument("--rounds", type=int, default=9, help="timed round pairs per case")
    ap.add_argument("--small-count", type=int, default=2000)
    ap.add_argument("--small-kib", type=int, default=64, help="size of each small tensor")
    args = ap.parse_args()
    models = {
        "300 tensors": model_of(int(args.gib * (1 << 30)), 300),
        "100 tensors": model_of(100 << 20, 100),
        f"{args.small_count} tensors": model_of(args.small_count * args.small_kib * 1024,
                                                args.small_count),
    }
    print(f"wt {wt.__version__}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    print(f"{'case':<24}{'bytes':>11}{'Python s':>10}{'C++ s':>9}{'Py/C++':>8}{'IQR':>14}"
          f"{'GB/s':>7}{'wt launch s':>13}")
    nccl_py = {}  # label -> wt nccl from Python, s per round
    with tempfile.TemporaryDirectory(prefix="wt-bench-") as tmp:
        for label, model in models.items():
            nbytes = sum(t.numel() * 4 for t in model.values())
            checkpoint = os.path.join(tmp, "model.safetensors")
            write_safetensors(checkpoint, model)
            for backend in ("ipc", "nccl"):
                py, cxx, ratio, (q1, q3) = alternated_round_seconds(backend, model, args.rounds)
                launched = launch_round_seconds(backend, checkpoint, args.rounds, tmp)
                print(f"{backend + ', ' + label:<24}{nbytes:>11}{py:>10.4f}{cxx:>9.4f}"
                      f"{ratio:>8.3f}{f'{q1:.3f}-{q3:.3f}':>14}{nbytes / py / 1e9:>7.2f}"
                      f"{launched:>13.4f}")
                if backend == "nccl":
                    nccl_py[label] = py
            os.unlink(checkpoint)
    for label, count, kib in (("100 tensors", 100, 1024),
                              (f"{args.small_count} tensors", args.small_count, args.small_kib)):
        gloo = gloo_round_seconds(count, kib * 1024 // 4, args.rounds)
        print(f"torch.distributed gloo, {count} broadcasts of {kib} KiB: {gloo:.4f} s per round; "
              f"wt nccl (host, packed) from Python: {nccl_py[label]:.4f} s; "
              f"gloo / wt = {gloo / nccl_py[label]:.2f}")
    m2n = m2n_round_seconds(args.gib, 300, args.rounds)
    nccl = nccl_round_seconds(models["300 tensors"], args.rounds)
    print(f"~300 tensors, {args.gib:g} GiB, one receiver: m2n from 2 Python ranks {m2n:.4f} s per "
          f"round, nccl from 1 Python rank {nccl:.4f} s; nccl / m2n = {nccl / m2n:.2f}")


if __name__ == "__main__":
    main()
