#!/usr/bin/env bash
# For whoever has a GPU at hand: builds wt with the CUDA toolkit and runs every CUDA test (they
# skip without a device, so on a machine without one this says so and ends green).
#
#   scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DWT_WITH_CUDA=ON >/dev/null
cmake --build build -j "$(nproc)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
  echo "gpu-check: no nvidia-smi here: the CUDA tests will skip"
fi
# What runs (docs/cuda.md has the table of findings and tests): the ipc CUDA tests, trainer
# process to a `wt serve --device cuda:0` receiver (or the test receiver that checks inside the
# load), unpacked and packed: separate allocations, one allocation at 2-byte offsets, a producer on
# a held-back non-blocking stream, an asynchronous consumer through 2 small packed buffers,
# bf16[3]/f32[5] alignment, zero-element tensors, cudaMallocAsync and cuMemCreate memory, abort
# during a slow load, a 2.3 GB model with GB/s printed; the UUID check; the device guard; the
# no-GPU refusals; the driver-range tests with a stand-in libcuda; and nccl over NCCL with
# configs/nccl_cuda.yaml, and m2n over NCCL send/recv, where 2 GPUs are present (skipped with one).
cd build
ctest --output-on-failure -V -R 'IpcCuda|CudaDriver|NcclCuda|M2nCuda' -j 1 | grep -Ev '^[0-9]+: (Test command|Working Directory|Environment)'
