// Memory layout of DLPack tensors: compactness and copying a strided host tensor into contiguous
// bytes. Header-only: libwt's checksums and the plugins' packing use the same code.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/dtype.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace wt {

// True when the tensor is row-major contiguous (strides NULL, or equal to the compact ones;
// strides of size-1 dimensions do not matter).
inline bool is_compact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expect = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

// Copies the `nbytes` logical bytes of a host tensor, compact or strided, to dst in row-major
// order.
inline void copy_to_contiguous(unsigned char* dst, const DLTensor& t, uint64_t nbytes) {
  const auto* src = static_cast<const unsigned char*>(t.data) + t.byte_offset;
  if (is_compact(t)) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  const std::size_t es = element_size(t.dtype);
  std::vector<int64_t> idx(static_cast<std::size_t>(t.ndim), 0);
  for (uint64_t i = 0, n = nbytes / es; i < n; ++i) {
    int64_t off = 0;
    for (int32_t d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    std::memcpy(dst + i * es, src + off * static_cast<int64_t>(es), es);
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace wt
