// Memory layout of DLPack tensors: compactness and copying a strided host tensor into contiguous
// bytes. Header-only: libwt's checksums and the plugins' packing use the same code.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/dtype.hpp>

#include <dlpack/dlpack.h>

#include <algorithm>
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

// Copies a box of extent[0] x ... x extent[ndim-1] elements of `elem` bytes from src to dst, each
// side with its own element strides (each pointer at the box's first element). The one strided
// copy of wt's host paths: dimensions that are contiguous on both sides are merged, so a box whose
// rows are compact is one memcpy per row (or one in all), and only a side that is strided in its
// last dimension (a transposed view) is copied element by element, by pointer steps.
inline void copy_strided(unsigned char* dst, const int64_t* dst_strides, const unsigned char* src,
                         const int64_t* src_strides, const int64_t* extent, int32_t ndim,
                         std::size_t elem) {
  // The dimensions that matter (extent > 1), outermost first, with runs merged: dimension d joins
  // d+1 when stepping d is stepping d+1 extent times, on both sides.
  struct Dim {
    int64_t n, ds, ss;
  };
  std::vector<Dim> dims;
  for (int32_t d = 0; d < ndim; ++d) {
    if (extent[d] == 0) return;
    if (extent[d] == 1) continue;
    dims.push_back({extent[d], dst_strides[d], src_strides[d]});
  }
  std::vector<Dim> runs;  // from the inside out
  for (std::size_t i = dims.size(); i-- > 0;) {
    const Dim& d = dims[i];
    if (!runs.empty() && d.ds == runs.back().ds * runs.back().n &&
        d.ss == runs.back().ss * runs.back().n) {
      runs.back().n *= d.n;  // d steps over the whole inner run on both sides
      continue;
    }
    runs.push_back(d);
  }
  // runs[0] is the innermost. Its bytes are one memcpy when it is compact on both sides.
  std::size_t run_bytes = elem;
  int64_t run_count = 1, run_ds = 0, run_ss = 0;
  std::size_t first_outer = 0;
  if (!runs.empty()) {
    if (runs[0].ds == 1 && runs[0].ss == 1) {
      run_bytes = static_cast<std::size_t>(runs[0].n) * elem;
      first_outer = 1;
    } else {
      run_count = runs[0].n;
      run_ds = runs[0].ds * static_cast<int64_t>(elem);
      run_ss = runs[0].ss * static_cast<int64_t>(elem);
      first_outer = 1;
    }
  }
  const std::size_t outer = runs.size() - std::min(runs.size(), first_outer);
  std::vector<int64_t> idx(outer, 0);
  for (;;) {
    unsigned char* d = dst;
    const unsigned char* s = src;
    for (int64_t k = 0; k < run_count; ++k, d += run_ds, s += run_ss) std::memcpy(d, s, run_bytes);
    // The odometer over the outer runs, innermost (runs[1]) fastest, by pointer steps.
    std::size_t j = 0;
    for (; j < outer; ++j) {
      const Dim& r = runs[first_outer + j];
      dst += r.ds * static_cast<int64_t>(elem);
      src += r.ss * static_cast<int64_t>(elem);
      if (++idx[j] < r.n) break;
      dst -= r.ds * r.n * static_cast<int64_t>(elem);
      src -= r.ss * r.n * static_cast<int64_t>(elem);
      idx[j] = 0;
    }
    if (j == outer) return;
  }
}

// Copies the `nbytes` logical bytes of a host tensor, compact or strided, to dst in row-major
// order (copy_strided, from the tensor's strides to compact ones).
inline void copy_to_contiguous(unsigned char* dst, const DLTensor& t, uint64_t nbytes) {
  const auto* src = static_cast<const unsigned char*>(t.data) + t.byte_offset;
  if (is_compact(t)) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  std::vector<int64_t> compact(static_cast<std::size_t>(t.ndim), 1);
  for (int32_t d = t.ndim - 1; d > 0; --d) compact[d - 1] = compact[d] * t.shape[d];
  copy_strided(dst, compact.data(), src, t.strides, t.shape, t.ndim, element_size(t.dtype));
}

}  // namespace wt
