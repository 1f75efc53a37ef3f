// The multi-threaded copy of the receiver and of ipc packing: every byte lands where it belongs,
// whatever the split.
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/parallel_for.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <random>
#include <vector>

namespace wt {
namespace {

TEST(ParallelCopy, EveryThreadCountCopiesEveryByteOfOddSizedBuffers) {
  std::mt19937 rng(3);
  // 40 buffers of odd sizes, 48 MiB in all: above the threshold, so threads split the batch at
  // boundaries that fall inside buffers.
  std::vector<std::vector<unsigned char>> src, dst;
  std::size_t total = 0;
  while (total < (std::size_t{48} << 20)) {
    std::size_t n = 1 + rng() % (std::size_t{3} << 20);
    src.emplace_back(n);
    for (auto& b : src.back()) b = static_cast<unsigned char>(rng());
    total += n;
  }
  src.emplace_back();  // an empty one too
  ASSERT_GE(total, kParallelCopyMinBytes);
  for (unsigned threads : {1u, 2u, 3u, 7u, 64u}) {
    dst.assign(src.size(), {});
    std::vector<CopyJob> jobs;
    for (std::size_t i = 0; i < src.size(); ++i) {
      dst[i].assign(src[i].size(), 0);
      jobs.push_back({dst[i].data(), src[i].data(), src[i].size()});
    }
    parallel_copy(jobs, threads);
    for (std::size_t i = 0; i < src.size(); ++i)
      ASSERT_EQ(dst[i], src[i]) << "buffer " << i << " with " << threads << " threads";
  }
}

TEST(ParallelCopy, SmallBatchAndEmptyBatch) {
  std::vector<unsigned char> a(1000), b(1000, 0);
  std::iota(a.begin(), a.end(), 0);
  parallel_copy({{b.data(), a.data(), a.size()}}, 8);
  EXPECT_EQ(a, b);
  parallel_copy({}, 8);
  EXPECT_GE(default_copy_threads(), 1u);
  EXPECT_LE(default_copy_threads(), 8u);
}

TEST(ParallelFor, EveryItemRunsExactlyOnceWhateverTheThreadCount) {
  for (unsigned threads : {0u, 1u, 2u, 5u, 64u}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
      std::vector<std::atomic<int>> runs(count);
      parallel_for(count, threads, [&](std::size_t i) { runs[i].fetch_add(1); });
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(runs[i].load(), 1)
            << "item " << i << " of " << count << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace wt
