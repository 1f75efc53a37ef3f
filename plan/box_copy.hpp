// Moving one box (per dimension [lo, hi)) of a row-major tensor: whether its bytes lie back to
// back (then they are sent or received in place), and copying it between a strided tensor and a
// compact buffer (a TP slice along dimension 1 is packed on the sender, unpacked on the worker).
#pragma once

#include <wt/sdk/tensor_layout.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace wt::m2n {

// Element strides of a compact row-major tensor of `shape`.
inline std::vector<int64_t> compact_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// A box of a compact tensor is one run of bytes when every dimension before some dimension i has
// extent 1 and every one after it is whole.
inline bool box_is_contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& lo,
                              const std::vector<int64_t>& hi) {
  std::size_t i = 0;
  while (i < shape.size() && hi[i] - lo[i] == 1) ++i;
  for (std::size_t j = i + 1; j < shape.size(); ++j)
    if (lo[j] != 0 || hi[j] != shape[j]) return false;
  return true;
}

// Offset, in elements, of the box's first element in a tensor with `strides`.
inline int64_t box_offset(const std::vector<int64_t>& strides, const std::vector<int64_t>& lo) {
  int64_t off = 0;
  for (std::size_t d = 0; d < lo.size(); ++d) off += lo[d] * strides[d];
  return off;
}

// Copies `extent` elements per dimension from `src` (element strides src_strides) to `dst`
// (dst_strides), each pointer at the box's first element: wt::copy_strided, the SDK's one strided
// copy (runs compact on both sides are one memcpy).
inline void copy_box(unsigned char* dst, const std::vector<int64_t>& dst_strides,
                     const unsigned char* src, const std::vector<int64_t>& src_strides,
                     const std::vector<int64_t>& extent, std::size_t elem) {
  copy_strided(dst, dst_strides.data(), src, src_strides.data(), extent.data(),
               static_cast<int32_t>(extent.size()), elem);
}

}  // namespace wt::m2n
