"""Shared helpers of the Python tests: free ports, `wt serve` processes, safetensors files, and
checksums of torch tensors computed without wt (python3-xxhash)."""

import json
import os
import pathlib
import socket
import struct
import subprocess
import sys

import pytest
import torch
import xxhash

import wt

CLI = os.environ.get("WT_CLI", "wt")

_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
              torch.int32: "I32", torch.int64: "I64"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def docs_python_block(heading):
    """The first ```python block under `heading` in docs/python.md, as written there."""
    text = DOCS.read_text()
    section = text[text.index(heading):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


def raw_bytes(t):
    """The tensor's bytes, row-major, as numpy cannot hold bfloat16."""
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def xxh3(t):
    return xxhash.xxh3_64_hexdigest(raw_bytes(t))


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = raw_bytes(t)
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class SilentControl:
    """vLLM's four methods, each doing nothing: a control plane that accepts the init and starts
    no worker, and has no get_world_size()."""

    def init_weight_transfer_engine(self, info):
        pass

    def start_weight_update(self):
        pass

    def update_weights(self, info):
        pass

    def finish_weight_update(self, weight_version=None):
        pass


class Serve:
    """A `wt serve` process on a free port; .url once it listens."""

    def __init__(self, backend, *extra):
        self.proc = subprocess.Popen([CLI, "serve", "--port", "0", "--backend", backend, *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in self.proc.stdout:
            if "listening on" in line:
                self.url = line.split("listening on ")[1].split()[0]
                return
        raise RuntimeError(f"wt serve --backend {backend} did not start")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def serve():
    started = []

    def start(backend, *extra):
        s = Serve(backend, *extra)
        started.append(s)
        return s.url

    yield start
    for s in started:
        s.stop()
