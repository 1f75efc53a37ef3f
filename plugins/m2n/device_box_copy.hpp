// copy_box for CUDA memory: the same walk, each run along the last dimension (compact on both
// sides) queued as one asynchronous copy on `stream` (a CUstream of `device`); a last dimension
// strided on either side is copied element by element. Host and CUDA memory may be mixed (unified
// addressing).
#pragma once

#include "../common/device_bytes.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wt::m2n {

inline void copy_box_async(int device, void* stream, unsigned char* dst,
                           const std::vector<int64_t>& dst_strides, const unsigned char* src,
                           const std::vector<int64_t>& src_strides,
                           const std::vector<int64_t>& extent, std::size_t elem,
                           std::size_t dim = 0) {
  const std::size_t nd = extent.size();
  if (nd == 0) {
    plugins::copy_async(device, dst, src, elem, stream);
    return;
  }
  if (dim + 1 == nd) {
    const int64_t n = extent[dim];
    if (dst_strides[dim] == 1 && src_strides[dim] == 1) {
      if (n > 0) plugins::copy_async(device, dst, src, static_cast<std::size_t>(n) * elem, stream);
      return;
    }
    for (int64_t k = 0; k < n; ++k)
      plugins::copy_async(device, dst + static_cast<std::size_t>(k * dst_strides[dim]) * elem,
                          src + static_cast<std::size_t>(k * src_strides[dim]) * elem, elem,
                          stream);
    return;
  }
  for (int64_t k = 0; k < extent[dim]; ++k)
    copy_box_async(device, stream, dst + static_cast<std::size_t>(k * dst_strides[dim]) * elem,
                   dst_strides, src + static_cast<std::size_t>(k * src_strides[dim]) * elem,
                   src_strides, extent, elem, dim + 1);
}

}  // namespace wt::m2n
