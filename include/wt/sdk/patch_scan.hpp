// The scans every sparse patch goes through before it is applied: its int32 indices against the
// tensor's element count (and for duplicates, when they are strictly increasing), its values for
// NaN. A round carries millions of them, so the scans are branch-free over fixed blocks, which the
// compiler vectorises; only a block that holds a culprit is searched again for its position.
// Header-only: libwt's receiver and the sparse backends use the same code.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace wt {

struct IndexScan {
  std::size_t out_of_range;  // position of the first index outside [0, limit); n when none is
  bool increasing;  // strictly increasing, so no index appears twice (meaningful when all in range)
};

namespace detail {

// Scans run over blocks of this many elements: a loop of a fixed count is what the compiler
// vectorises at -O2; the tail of an array goes through the same code unvectorised.
inline constexpr std::size_t kScanBlock = 1024;

template <typename T>
inline T load_at(const unsigned char* p, std::size_t i) {
  T v;
  std::memcpy(&v, p + sizeof(T) * i, sizeof(T));  // the data need not be aligned
  return v;
}

// Calls scan(offset, count) over [0, n) in blocks; stops at the first block where it returns
// true and gives that block's offset, or n.
template <typename Scan>
inline std::size_t first_block(std::size_t n, Scan scan) {
  std::size_t b = 0;
  for (; n - b >= kScanBlock; b += kScanBlock)
    if (scan(b, kScanBlock)) return b;
  return b < n && scan(b, n - b) ? b : n;
}

// An index v is in range when (uint32_t)v < limit: negative ones wrap to >= 2^31 >= limit.
inline bool out_of_range(const unsigned char* p, std::size_t i, uint32_t limit) {
  return static_cast<uint32_t>(load_at<int32_t>(p, i)) >= limit;
}

// NaN when the bits without the sign are above infinity's.
template <typename U>
inline std::size_t first_nan_bits(const unsigned char* p, std::size_t n, U magnitude, U infinity) {
  auto nan = [&](std::size_t i) { return (load_at<U>(p, i) & magnitude) > infinity; };
  const std::size_t b = first_block(n, [&](std::size_t at, std::size_t count) {
    uint32_t any = 0;
    for (std::size_t i = 0; i < count; ++i) any |= nan(at + i);
    return any != 0;
  });
  for (std::size_t i = b; i < n; ++i)
    if (nan(i)) return i;
  return n;
}

}  // namespace detail

// Scans `n` int32 indices at `data` against [0, limit). A limit above 2^31 is taken as 2^31 (every
// non-negative int32 is then in range).
inline IndexScan scan_indices(const void* data, std::size_t n, int64_t limit) {
  const auto* p = static_cast<const unsigned char*>(data);
  const uint32_t lim = limit <= 0                   ? 0u
                       : limit > (int64_t{1} << 31) ? (uint32_t{1} << 31)
                                                    : static_cast<uint32_t>(limit);
  uint32_t down = 0;
  const std::size_t b = detail::first_block(n, [&](std::size_t at, std::size_t count) {
    const unsigned char* q = p + 4 * at;
    uint32_t bad = 0;
    for (std::size_t i = 0; i < count; ++i) bad |= detail::out_of_range(q, i, lim);
    if (bad) return true;
    // Each index against the one before it (the first of the array has none: being in range, it
    // is above -1). Written as two arrays one element apart, which vectorises.
    uint32_t d = 0;
    if (at > 0)
      for (std::size_t i = 0; i < count; ++i)
        d |= detail::load_at<int32_t>(q, i) <= detail::load_at<int32_t>(q - 4, i);
    else
      for (std::size_t i = 1; i < count; ++i)
        d |= detail::load_at<int32_t>(q, i) <= detail::load_at<int32_t>(q, i - 1);
    down |= d;
    return false;
  });
  IndexScan scan{n, down == 0};
  for (std::size_t i = b; i < n; ++i)
    if (detail::out_of_range(p, i, lim)) {
      scan.out_of_range = i;
      break;
    }
  return scan;
}

// Position of the first element holding a NaN among `n` elements of `dtype` at `data` (an element
// of several lanes holds one if any lane does); n when there is none, or when the dtype is not IEEE
// float16, bfloat16, float32 or float64 (integers have no NaN).
inline std::size_t first_nan(const void* data, std::size_t n, DLDataType dtype) {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t lanes = dtype.lanes == 0 ? 1 : dtype.lanes;
  const std::size_t scalars = n * lanes;
  std::size_t at = scalars;
  if (dtype.code == kDLFloat && dtype.bits == 16)
    at = detail::first_nan_bits<uint16_t>(p, scalars, 0x7fff, 0x7c00);
  else if (dtype.code == kDLBfloat && dtype.bits == 16)
    at = detail::first_nan_bits<uint16_t>(p, scalars, 0x7fff, 0x7f80);
  else if (dtype.code == kDLFloat && dtype.bits == 32)
    at = detail::first_nan_bits<uint32_t>(p, scalars, 0x7fffffffu, 0x7f800000u);
  else if (dtype.code == kDLFloat && dtype.bits == 64)
    at = detail::first_nan_bits<uint64_t>(p, scalars, 0x7fffffffffffffffull, 0x7ff0000000000000ull);
  return at == scalars ? n : at / lanes;
}

}  // namespace wt
