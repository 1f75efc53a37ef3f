// Moving one box (per dimension [lo, hi)) of a row-major tensor: whether its bytes lie back to
// back (then they are sent or received in place), and copying it between a strided tensor and a
// compact buffer (a TP slice along dimension 1 is packed on the sender, unpacked on the worker).
#pragma once

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
// (dst_strides), each pointer at the box's first element. Runs along the last dimension that are
// compact on both sides are one memcpy.
inline void copy_box(unsigned char* dst, const std::vector<int64_t>& dst_strides,
                     const unsigned char* src, const std::vector<int64_t>& src_strides,
                     const std::vector<int64_t>& extent, std::size_t elem, std::size_t dim = 0) {
  const std::size_t nd = extent.size();
  if (nd == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  if (dim + 1 == nd) {
    const int64_t n = extent[dim];
    if (dst_strides[dim] == 1 && src_strides[dim] == 1) {
      std::memcpy(dst, src, static_cast<std::size_t>(n) * elem);
      return;
    }
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(dst + static_cast<std::size_t>(k * dst_strides[dim]) * elem,
                  src + static_cast<std::size_t>(k * src_strides[dim]) * elem, elem);
    return;
  }
  for (int64_t k = 0; k < extent[dim]; ++k)
    copy_box(dst + static_cast<std::size_t>(k * dst_strides[dim]) * elem, dst_strides,
             src + static_cast<std::size_t>(k * src_strides[dim]) * elem, src_strides, extent, elem,
             dim + 1);
}

}  // namespace wt::m2n
