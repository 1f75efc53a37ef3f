// WT_CAP_CUDA_MEMORY for a plugin built with the CUDA toolkit's headers (wt_add_plugin's CUDA or
// NCCL option defines WT_PLUGIN_WITH_CUDA), else 0: the driver and libnccl are reached at run
// time, so the same file moves host memory on machines without them.
#pragma once

#include <wt/wt_plugin.h>

#include <cstdint>

namespace wt::plugins {

#ifdef WT_PLUGIN_WITH_CUDA
inline constexpr uint64_t kCudaMemoryIfBuilt = WT_CAP_CUDA_MEMORY;
#else
inline constexpr uint64_t kCudaMemoryIfBuilt = 0;
#endif

}  // namespace wt::plugins
