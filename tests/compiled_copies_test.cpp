// m2n's compiled box copies and staging ring (compiled_copies.hpp, round_table.hpp): every box of
// strided tensors, packed and unpacked by the compiled walk, byte-for-byte what the reference walk
// (box_copy.hpp) moves (small batches: one thread); batches over the threshold, split across 2 or
// 3 threads inside runs and inside boxes, walks of one and two dimensions; the ring hands out
// aligned room first in, first out and never overlaps.
#include "compiled_copies.hpp"
#include "box_copy.hpp"
#include "round_table.hpp"

#include <gtest/gtest.h>

#include <wt/sdk/parallel_copy.hpp>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

using namespace wt::m2n;

struct Tensor {
  std::vector<int64_t> shape, strides;  // strides in elements, padded when `pad`
  std::size_t elem = 2;
  std::vector<unsigned char> bytes;
};

Tensor make_tensor(std::mt19937& rng, std::size_t ndim, int64_t max_dim, bool pad) {
  Tensor t;
  t.elem = std::size_t{1} << (rng() % 3);  // 1, 2 or 4 bytes
  for (std::size_t d = 0; d < ndim; ++d)
    t.shape.push_back(1 + static_cast<int64_t>(rng() % max_dim));
  t.strides.assign(ndim, 1);
  int64_t step = 1;
  for (std::size_t d = ndim; d-- > 0;) {
    t.strides[d] = step;
    step *= t.shape[d] + (pad && rng() % 2 ? static_cast<int64_t>(rng() % 3) : 0);
  }
  t.bytes.resize(static_cast<std::size_t>(step) * t.elem);
  for (auto& b : t.bytes) b = static_cast<unsigned char>(rng());
  return t;
}

struct BoxOf {
  std::vector<int64_t> lo, hi, extent;
  uint64_t bytes = 0;
};

BoxOf random_box(std::mt19937& rng, const Tensor& t) {
  BoxOf b;
  b.bytes = t.elem;
  for (int64_t n : t.shape) {
    const int64_t lo = static_cast<int64_t>(rng() % n);
    const int64_t hi = lo + 1 + static_cast<int64_t>(rng() % (n - lo));
    b.lo.push_back(lo);
    b.hi.push_back(hi);
    b.extent.push_back(hi - lo);
    b.bytes *= static_cast<uint64_t>(hi - lo);
  }
  return b;
}

// A batch of messages over `tensors`, each of a few boxes, packed by the compiled copies on
// `threads` threads, compared with the reference; then unpacked into zeroed tensors, compared
// with the boxes of the originals (and nothing else written).
void check_batch(std::mt19937& rng, std::vector<Tensor>& tensors, std::size_t messages,
                 unsigned threads, bool tp_slices = false) {
  CopyWalks walks;
  std::vector<CompiledCopy> copies;
  std::vector<std::vector<unsigned char>> buffers(messages), want(messages);
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // per message: its copies
  std::vector<std::vector<std::pair<std::size_t, BoxOf>>> boxes(messages);
  // Boxes of one tensor must not overlap to unpack: one box per tensor per batch.
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::size_t next = 0;
  for (std::size_t m = 0; m < messages; ++m) {
    const std::size_t first = copies.size();
    uint64_t at = 0;
    const std::size_t count = tp_slices ? 2 : 1 + rng() % 3;
    for (std::size_t k = 0; k < count && next < order.size(); ++k) {
      const std::size_t p = order[next++];
      const Tensor& t = tensors[p];
      BoxOf b = random_box(rng, t);
      if (tp_slices) {  // all of dim 0, all but the first and last of every other dim: walked
        b = BoxOf{};
        b.bytes = t.elem;
        for (std::size_t d = 0; d < t.shape.size(); ++d) {
          const int64_t lo = d == 0 ? 0 : 1, hi = d == 0 ? t.shape[d] : t.shape[d] - 1;
          b.lo.push_back(lo);
          b.hi.push_back(hi);
          b.extent.push_back(hi - lo);
          b.bytes *= static_cast<uint64_t>(hi - lo);
        }
      }
      copies.push_back(
          compile_copy(static_cast<uint32_t>(p), t.strides, b.lo, b.hi, t.elem, walks));
      EXPECT_EQ(copies.back().bytes(), b.bytes);
      want[m].resize(at + b.bytes);
      copy_box(want[m].data() + at, compact_strides(b.extent),
               t.bytes.data() + static_cast<std::size_t>(box_offset(t.strides, b.lo)) * t.elem,
               t.strides, b.extent, t.elem);
      boxes[m].emplace_back(p, b);
      at += b.bytes;
    }
    buffers[m].assign(at, 0xee);
    ranges.emplace_back(first, copies.size() - first);
  }
  std::vector<CopyBatchItem> batch;
  for (std::size_t m = 0; m < messages; ++m)
    batch.push_back(
        {std::span(copies).subspan(ranges[m].first, ranges[m].second), buffers[m].data()});
  uint64_t total = 0;
  for (const auto& c : copies) total += c.bytes();
  if (tp_slices) {  // the point of it: over the threshold, so that the threads share it
    EXPECT_GE(total, wt::kParallelCopyMinBytes);
  }
  std::vector<unsigned char*> bases;
  for (auto& t : tensors) bases.push_back(t.bytes.data());
  execute_copies(batch, walks, bases, CopyDirection::kPack, threads);
  for (std::size_t m = 0; m < messages; ++m) ASSERT_EQ(buffers[m], want[m]) << "message " << m;

  std::vector<Tensor> into = tensors;
  for (auto& t : into) std::fill(t.bytes.begin(), t.bytes.end(), 0);
  std::vector<unsigned char*> into_bases;
  for (auto& t : into) into_bases.push_back(t.bytes.data());
  execute_copies(batch, walks, into_bases, CopyDirection::kUnpack, threads);
  for (std::size_t m = 0; m < messages; ++m)
    for (const auto& [p, b] : boxes[m]) {
      // What the box should now hold: the original's box, by the reference walk, and the rest 0.
      std::vector<unsigned char> expect(tensors[p].bytes.size(), 0);
      const std::size_t off =
          static_cast<std::size_t>(box_offset(tensors[p].strides, b.lo)) * tensors[p].elem;
      copy_box(expect.data() + off, tensors[p].strides, tensors[p].bytes.data() + off,
               tensors[p].strides, b.extent, tensors[p].elem);
      ASSERT_EQ(into[p].bytes, expect) << "tensor " << p;
    }
}

TEST(CompiledCopies, EveryBoxOfStridedTensorsPacksAndUnpacksAsTheReferenceWalk) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<Tensor> tensors;
    for (int k = 0; k < 8; ++k)
      tensors.push_back(make_tensor(rng, 1 + rng() % 4, 9, trial % 2 == 1));
    check_batch(rng, tensors, 4, 1 + static_cast<unsigned>(trial % 4));
  }
}

TEST(CompiledCopies, ABatchSplitAcrossThreadsSplitsInsideRunsAndBoxes) {
  // Over kParallelCopyMinBytes, so the threads share byte ranges whose edges fall mid-run.
  std::mt19937 rng(11);
  std::vector<Tensor> tensors;
  uint64_t boxed = 0;
  for (int k = 0; k < 4; ++k) {
    Tensor t;
    t.elem = 2;
    t.shape = {1500 + 3 * k, 3001};
    t.strides = {3001 + 7, 1};  // padded rows
    t.bytes.resize(static_cast<std::size_t>(t.shape[0] * t.strides[0]) * t.elem);
    for (auto& b : t.bytes) b = static_cast<unsigned char>(rng());
    boxed += static_cast<uint64_t>(t.shape[0] * (t.shape[1] - 2)) * t.elem;
    tensors.push_back(std::move(t));
  }
  ASSERT_GE(boxed, wt::kParallelCopyMinBytes);
  for (unsigned threads : {2u, 3u}) check_batch(rng, tensors, 2, threads, true);
  // Three dimensions, padded in two: a walk of two dimensions, whose odometer starts mid-box.
  tensors.clear();
  for (int k = 0; k < 4; ++k) {
    Tensor t;
    t.elem = 2;
    t.shape = {64 + k, 301, 257};
    t.strides = {301 * (257 + 5) + 7, 257 + 5, 1};
    t.bytes.resize(static_cast<std::size_t>(t.shape[0] * t.strides[0]) * t.elem);
    for (auto& b : t.bytes) b = static_cast<unsigned char>(rng());
    tensors.push_back(std::move(t));
  }
  check_batch(rng, tensors, 2, 3, true);
}

TEST(CompiledCopies, DimensionsMergeIntoOneRunWhereTheyLieBackToBack) {
  CopyWalks walks;
  // Whole rows of a compact [8, 16] tensor: one run of 3 rows.
  auto rows = compile_copy(0, {16, 1}, {2, 0}, {5, 16}, 4, walks);
  EXPECT_EQ(rows.run, 3u * 16 * 4);
  EXPECT_EQ(rows.runs, 1u);
  EXPECT_EQ(rows.walk_dims, 0u);
  EXPECT_EQ(rows.tensor_at, 2u * 16 * 4);
  // A column slice (TP along dimension 1): a run per row, walked at the row pitch.
  auto cols = compile_copy(0, {16, 1}, {0, 4}, {8, 12}, 2, walks);
  EXPECT_EQ(cols.run, 8u * 2);
  EXPECT_EQ(cols.runs, 8u);
  ASSERT_EQ(cols.walk_dims, 1u);
  EXPECT_EQ(walks.dims[cols.walk_at].pitch, 16 * 2);
  // An empty box moves nothing.
  EXPECT_EQ(compile_copy(0, {16, 1}, {3, 0}, {3, 16}, 2, walks).bytes(), 0u);
}

TEST(StagingRing, HandsOutRoomFirstInFirstOutWrappingAndNeverOverlapping) {
  constexpr int64_t k = StagingRing::kAlign;  // messages start on multiples of it
  StagingRing ring;
  ring.reset(100 * k, 8);
  EXPECT_EQ(ring.take(100 * k + 1), -1);  // larger than the ring: never
  EXPECT_EQ(ring.take(40 * k), 0);
  EXPECT_EQ(ring.take(40 * k - 3), 40 * k);
  EXPECT_EQ(ring.take(30 * k), -1);      // 20 k left at the end, the start is live
  ring.give_back_oldest();               // [0, 40 k) free
  EXPECT_EQ(ring.take(30 * k), 0);       // wraps
  EXPECT_EQ(ring.take(10 * k + 1), -1);  // [30 k, 40 k) is all there is before the oldest
  EXPECT_EQ(ring.take(10 * k), 30 * k);
  ring.give_back_oldest();
  ring.give_back_oldest();
  ring.give_back_oldest();
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.take(100 * k), 0);  // empty: the whole ring
  // Random FIFO traffic: live ranges never overlap and stay inside the ring.
  std::mt19937 rng(3);
  ring.reset(1000, 64);
  std::vector<std::pair<int64_t, int64_t>> live;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() == 64)) {
      ring.give_back_oldest();
      live.erase(live.begin());
      continue;
    }
    const int64_t n = 1 + static_cast<int64_t>(rng() % 400);
    const int64_t at = ring.take(static_cast<uint64_t>(n));
    if (at < 0) {
      ASSERT_FALSE(live.empty()) << "an empty ring refused " << n << " bytes";
      continue;
    }
    ASSERT_LE(at + n, 1000);
    ASSERT_EQ(at % StagingRing::kAlign, 0) << "a message not on a cache line";
    for (auto [a, b] : live) ASSERT_TRUE(at + n <= a || b <= at) << "overlap";
    live.emplace_back(at, at + n);
  }
}

}  // namespace
