// The scans of a sparse patch's elements (<wt/sdk/patch_scan.hpp>): they run over fixed blocks
// and search a block again only when it holds a culprit, so every position is tried around the
// block edges and in the tail, on unaligned data too. Built optimised (tests/CMakeLists.txt), so
// that the vectorised loops are the ones tested.
#include <wt/sdk/patch_scan.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace wt {
namespace {

constexpr std::size_t kBlock = detail::kScanBlock;

// The elements start one byte into the buffer, so that no load is aligned.
template <typename T>
std::vector<unsigned char> unaligned(const std::vector<T>& v) {
  std::vector<unsigned char> bytes(1 + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(bytes.data() + 1, v.data(), v.size() * sizeof(T));
  return bytes;
}

// 5, 8, 11, ...: in range below limit(n), with room below the first.
std::vector<int32_t> increasing(std::size_t n) {
  std::vector<int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(5 + 3 * i);
  return v;
}
int64_t limit(std::size_t n) {
  return 5 + 3 * static_cast<int64_t>(n);
}

// Lengths around every edge: empty, inside one block, a block exactly, just over, and several.
const std::vector<std::size_t> kLengths = {0,      1,          2,          kBlock - 1,
                                           kBlock, kBlock + 1, 2 * kBlock, 3 * kBlock + 7};

TEST(PatchScan, IncreasingIndicesInRangePassAtEveryLength) {
  for (std::size_t n : kLengths) {
    const auto bytes = unaligned(increasing(n));
    const IndexScan s = scan_indices(bytes.data() + 1, n, limit(n));
    EXPECT_EQ(s.out_of_range, n) << n;
    EXPECT_TRUE(s.increasing) << n;
  }
}

TEST(PatchScan, TheFirstIndexOutOfRangeIsFoundWhereverItIs) {
  for (std::size_t n : kLengths) {
    for (std::size_t at : {std::size_t{0}, kBlock - 1, kBlock, kBlock + 1, n - 1}) {
      if (n == 0 || at >= n) continue;
      for (int32_t bad : {-1, INT32_MIN, static_cast<int32_t>(limit(n)), INT32_MAX}) {
        auto v = increasing(n);
        v[at] = bad;
        if (at + 1 < n) v[n - 1] = -5;  // a later culprit: the first one is reported
        const auto bytes = unaligned(v);
        EXPECT_EQ(scan_indices(bytes.data() + 1, n, limit(n)).out_of_range, at)
            << "n " << n << ", index " << bad << " at " << at;
      }
    }
  }
}

TEST(PatchScan, AnIndexNotAboveTheOneBeforeIsSeenAcrossBlockEdges) {
  for (std::size_t n : kLengths) {
    for (std::size_t at : {std::size_t{1}, kBlock - 1, kBlock, kBlock + 1, n - 1}) {
      if (n < 2 || at == 0 || at >= n) continue;
      for (int32_t step : {0, -1}) {  // the same index twice, or one going down
        auto v = increasing(n);
        v[at] = v[at - 1] + step;
        const auto bytes = unaligned(v);
        const IndexScan s = scan_indices(bytes.data() + 1, n, limit(n));
        EXPECT_EQ(s.out_of_range, n);
        EXPECT_FALSE(s.increasing) << "n " << n << ", at " << at << ", step " << step;
      }
    }
  }
}

TEST(PatchScan, ALimitBeyondInt32AdmitsEveryNonNegativeIndex) {
  std::vector<int32_t> v = {0, 7, INT32_MAX};
  EXPECT_EQ(scan_indices(v.data(), v.size(), int64_t{1} << 40).out_of_range, v.size());
  v[1] = -7;
  EXPECT_EQ(scan_indices(v.data(), v.size(), int64_t{1} << 40).out_of_range, 1u);
  EXPECT_EQ(scan_indices(v.data(), v.size(), 0).out_of_range, 0u);  // nothing is below 0
}

template <typename U>
void expect_nan_found(DLDataType dtype, U one, U nan, U infinity) {
  for (std::size_t n : kLengths) {
    if (n == 0) continue;
    std::vector<U> v(n, one);
    v[n / 2] = infinity;                                                            // not a NaN
    v[n / 2 - (n > 2)] = static_cast<U>(infinity | (U{1} << (sizeof(U) * 8 - 1)));  // -infinity
    auto clean = unaligned(v);
    EXPECT_EQ(first_nan(clean.data() + 1, n, dtype), n) << n;
    for (std::size_t at : {std::size_t{0}, kBlock - 1, kBlock, n - 1}) {
      if (at >= n) continue;
      for (U bits : {nan, static_cast<U>(nan | (U{1} << (sizeof(U) * 8 - 1)))}) {  // either sign
        auto w = v;
        w[at] = bits;
        if (at + 1 < n) w[n - 1] = nan;
        auto bytes = unaligned(w);
        EXPECT_EQ(first_nan(bytes.data() + 1, n, dtype), at) << "n " << n << ", at " << at;
      }
    }
  }
}

TEST(PatchScan, NaNIsFoundInEveryFloatTypeAndInfinityIsNot) {
  expect_nan_found<uint16_t>({kDLBfloat, 16, 1}, 0x3f80, 0x7fc1, 0x7f80);
  expect_nan_found<uint16_t>({kDLFloat, 16, 1}, 0x3c00, 0x7c01, 0x7c00);
  expect_nan_found<uint32_t>({kDLFloat, 32, 1}, 0x3f800000u, 0x7f800001u, 0x7f800000u);
  expect_nan_found<uint64_t>({kDLFloat, 64, 1}, 0x3ff0000000000000ull, 0x7ff8000000000000ull,
                             0x7ff0000000000000ull);
}

TEST(PatchScan, IntegersHoldNoNaNAndLanesCountAsOneElement) {
  std::vector<uint32_t> v(10, 0x7fffffffu);  // a NaN's bits, as int32
  EXPECT_EQ(first_nan(v.data(), v.size(), {kDLInt, 32, 1}), v.size());
  // Five float32x2 elements; the NaN is in the second lane of element 3.
  std::vector<uint32_t> lanes(10, 0x3f800000u);
  lanes[7] = 0x7fc00000u;
  EXPECT_EQ(first_nan(lanes.data(), 5, {kDLFloat, 32, 2}), 3u);
}

}  // namespace
}  // namespace wt
