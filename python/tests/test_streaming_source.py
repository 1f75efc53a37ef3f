"""A generator source that gathers one full tensor per parameter (as FSDP's full_tensor() does) and
lets it go: through nccl (WT_CAP_STREAMING_SOURCE) only one gathered tensor is alive at a time, so
the round's peak memory is about one tensor and a packed chunk, not the model; the same tensors
kept in a list peak at the model's size. The bytes arrive exact either way."""

import json
import os
import subprocess
import sys
import textwrap

import torch

import wt
from conftest import free_port, xxh3

COUNT, NUMEL = 12, 4 << 20  # 12 tensors of 16 MiB: a 192 MiB model

ROUND = textwrap.dedent("""
    import json, sys, torch, wt
    url, port, keep_all = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "list"
    COUNT, NUMEL = 12, 4 << 20

    def peak_kib():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))

    def gathered():  # a fresh full tensor per parameter, dropped by the caller
        for i in range(COUNT):
            yield f"layers.{i}.weight", torch.full((NUMEL,), float(i + 1))

    source = (lambda: list(gathered())) if keep_all else gathered
    meta = [(f"layers.{i}.weight", torch.float32, [NUMEL]) for i in range(COUNT)]
    engine = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                              "master_port": port, "world_size": 2, "packed": True,
                              "packed_buffer_size_bytes": 32 << 20},
                             client=url, source=source, metadata=meta)
    engine.send_weights()  # the chunk buffers are allocated by the first round
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak (VmHWM) to what is resident now
    before = peak_kib()
    engine.send_weights(weight_version="measured")
    print(json.dumps({"streams": engine.streams_source, "peak_mib": (peak_kib() - before) / 1024}))
""")


def measured_round(url, how):
    """One measured round in a fresh process (its own peak), the source `how` ("generator" or
    "list")."""
    # A fixed mmap threshold: glibc otherwise raises it after the first 16 MiB tensor is freed, and
    # later tensors come from a heap that is not trimmed at once, so the peak would count memory
    # freed but kept by the allocator (48 to 80 MiB from run to run) instead of live tensors.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    run = subprocess.run([sys.executable, "-c", ROUND, url, str(free_port()), how],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_generator_keeps_one_gathered_tensor_alive(serve):
    url = serve("nccl")
    model_mib = COUNT * NUMEL * 4 / (1 << 20)
    lazy = measured_round(url, "generator")
    kept = measured_round(url, "list")
    assert lazy["streams"] and kept["streams"]
    tensor_mib = NUMEL * 4 / (1 << 20)
    assert lazy["peak_mib"] < 1.5 * tensor_mib, lazy  # one 16 MiB tensor alive at a time
    assert kept["peak_mib"] > model_mib * 0.9, kept  # the list holds every tensor
    want = {f"layers.{i}.weight": xxh3(torch.full((NUMEL,), float(i + 1))) for i in range(COUNT)}
    assert wt.HttpClient(url).weight_checksums() == want


def test_a_backend_without_the_capability_keeps_the_tensors_until_the_round_ends():
    receiver = wt.Receiver("ipc")
    engine = wt.trainer_init({"backend": "ipc"}, client=receiver,
                             source=lambda: [("w", torch.ones(4))], metadata=[("w", "float32", [4])])
    assert not engine.streams_source  # ipc's unpacked path hands out the tensors' own memory
    engine.send_weights()
    assert torch.equal(receiver.tensor("w"), torch.ones(4))
    in_process = wt.Receiver("nccl")
    dense = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                             "master_port": free_port(), "world_size": 2}, client=in_process,
                            source={"w": torch.full((4,), 2.0)})
    assert not dense.streams_source  # a dict's tensors are alive anyway: nothing to let go
    dense.send_weights()
    assert torch.equal(in_process.tensor("w"), torch.full((4,), 2.0))
    dense.close()
