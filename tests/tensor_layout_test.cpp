// wt::copy_strided (and copy_to_contiguous over it), the one strided copy of wt's host paths,
// against a walk that computes every element's offset from scratch: random boxes of random
// layouts (padded, permuted, transposed, negative strides), element sizes 1 to 8.
#include <wt/sdk/tensor_layout.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace wt {
namespace {

// Element strides of a layout that holds `extent` in some dimension order, with padding.
std::vector<int64_t> random_strides(const std::vector<int64_t>& extent, std::mt19937& rng,
                                    bool negative_ok, int64_t* span) {
  std::vector<std::size_t> order(extent.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> strides(extent.size());
  int64_t step = 1;
  for (std::size_t k = order.size(); k-- > 0;) {  // order[last] is the fastest
    strides[order[k]] = step;
    step *= extent[order[k]] + static_cast<int64_t>(rng() % 2);  // some dims padded
  }
  if (negative_ok && !strides.empty() && rng() % 3 == 0) strides[rng() % strides.size()] *= -1;
  *span = step;
  return strides;
}

// The byte offset of the element at `idx` from the box's first element.
int64_t offset(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t o = 0;
  for (std::size_t d = 0; d < idx.size(); ++d) o += idx[d] * strides[d];
  return o;
}

TEST(CopyStrided, EveryBoxOfEveryLayoutAsTheElementWalk) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t nd = rng() % 5;  // 0 (a scalar) to 4 dims
    std::vector<int64_t> extent(nd);
    for (auto& e : extent) e = 1 + static_cast<int64_t>(rng() % 5);
    const std::size_t elem = std::size_t{1} << (rng() % 4);
    int64_t src_span = 1, dst_span = 1;
    const auto ss = random_strides(extent, rng, true, &src_span);
    const auto ds = random_strides(extent, rng, false, &dst_span);
    // Room for negative strides on both sides of the first element.
    std::vector<unsigned char> src(static_cast<std::size_t>(2 * src_span + 1) * elem);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    std::vector<unsigned char> got(static_cast<std::size_t>(dst_span) * elem, 0xEE), want = got;
    const unsigned char* s0 = src.data() + static_cast<std::size_t>(src_span) * elem;
    // The walk: every index of the box, offsets from scratch.
    std::vector<int64_t> idx(nd, 0);
    int64_t count = 1;
    for (auto e : extent) count *= e;
    for (int64_t n = 0; n < count; ++n) {
      std::memcpy(want.data() + offset(idx, ds) * static_cast<int64_t>(elem),
                  s0 + offset(idx, ss) * static_cast<int64_t>(elem), elem);
      for (std::size_t d = nd; d-- > 0;) {
        if (++idx[d] < extent[d]) break;
        idx[d] = 0;
      }
    }
    copy_strided(got.data(), ds.data(), s0, ss.data(), extent.data(), static_cast<int32_t>(nd),
                 elem);
    ASSERT_EQ(got, want) << "trial " << trial;
  }
}

TEST(CopyStrided, ATransposedViewGathersRowMajor) {
  // A 3 x 4 float32 matrix, and its transpose (4 x 3, strides 1, 4) copied contiguous.
  std::vector<float> m(12);
  std::iota(m.begin(), m.end(), 0.f);
  int64_t shape[2] = {4, 3}, strides[2] = {1, 4};
  DLTensor t{m.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 0};
  std::vector<float> out(12);
  copy_to_contiguous(reinterpret_cast<unsigned char*>(out.data()), t, sizeof(float) * 12);
  EXPECT_EQ(out, (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

}  // namespace
}  // namespace wt
