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
# What runs: the ipc CUDA tests (trainer process to a `wt serve --device cuda:0` receiver,
# unpacked and packed: separate allocations, one allocation at 2-byte offsets, a producer on a
# held-back non-blocking stream, cudaMallocAsync memory staged for export; the UUID check; the
# device guard; the no-GPU refusals).
cd build
ctest --output-on-failure -R 'IpcCuda' -j 1
