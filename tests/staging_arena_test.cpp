// The receiver's staging arena: blocks handed out one after another lie back to back (what lets a
// packed chunk land in place), aligned as asked; a block larger than a reservation gets a mapping
// of its own; a released block's pages go back to the kernel, and the memory of live blocks stays
// untouched by it.
#include "staging_arena.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace wt::detail {
namespace {

TEST(StagingArena, BlocksFollowOneAnotherWhenTheAlignmentAllows) {
  StagingArena arena;
  auto a = arena.allocate(40, 4);
  auto b = arena.allocate(24, 4);
  auto c = arena.allocate(100, 2);
  EXPECT_EQ(b.get(), a.get() + 40);
  EXPECT_EQ(c.get(), b.get() + 24);
  // 6 bytes of bf16, then a float32 tensor: padded to its 4-byte alignment.
  auto d = arena.allocate(6, 2);
  auto e = arena.allocate(8, 4);
  EXPECT_EQ(d.get(), c.get() + 100);
  EXPECT_EQ(e.get(), d.get() + 8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e.get()) % 4, 0u);
}

TEST(StagingArena, TheFirstBlockStartsOnAHugePageBoundary) {
  StagingArena arena;
  auto a = arena.allocate(1, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % (std::size_t{2} << 20), 0u);
}

TEST(StagingArena, ZeroBytesStillGetsItsOwnAddress) {
  StagingArena arena;
  auto a = arena.allocate(0, 1);
  auto b = arena.allocate(0, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a.get(), b.get());
}

TEST(StagingArena, ReleasedBlocksLeaveTheirNeighboursIntact) {
  StagingArena arena;
  const std::size_t page = 4096;
  auto left = arena.allocate(3 * page + 100, 1);
  auto middle = arena.allocate(5 * page, 1);
  auto right = arena.allocate(2 * page, 1);
  std::memset(left.get(), 0x11, 3 * page + 100);
  std::memset(middle.get(), 0x22, 5 * page);
  std::memset(right.get(), 0x33, 2 * page);
  middle.reset();  // its whole pages go back to the kernel; the shared edge pages stay
  for (std::size_t i = 0; i < 3 * page + 100; ++i) ASSERT_EQ(left.get()[i], 0x11) << i;
  for (std::size_t i = 0; i < 2 * page; ++i) ASSERT_EQ(right.get()[i], 0x33) << i;
  // New blocks come after the last one, never over a released one.
  auto next = arena.allocate(16, 1);
  EXPECT_EQ(next.get(), right.get() + 2 * page);
}

TEST(StagingArena, ABlockLargerThanAReservationGetsItsOwnMapping) {
  StagingArena arena;
  auto small = arena.allocate(64, 1);
  // Reserved only (MAP_NORESERVE): nothing is touched but the first and last byte.
  auto large = arena.allocate(StagingArena::kReserve + 1, 1);
  ASSERT_NE(large, nullptr);
  large.get()[0] = 1;
  large.get()[StagingArena::kReserve] = 2;
  EXPECT_EQ(large.get()[StagingArena::kReserve], 2);
  auto after = arena.allocate(64, 1);
  EXPECT_NE(after.get(), small.get() + 64) << "the large block's mapping hands out next";
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Writes every page of `n` bytes at `p` and returns the minor page faults that took.
long faults_writing(unsigned char* p, std::size_t n) {
  const long before = minor_faults();
  for (std::size_t i = 0; i < n; i += 4096) p[i] = 1;
  return minor_faults() - before;
}

TEST(StagingArena, PreparedMemoryIsWrittenWithoutPageFaults) {
  constexpr std::size_t kBlock = std::size_t{8} << 20, kBlocks = 8;
  StagingArena unprepared;
  auto cold = unprepared.allocate(kBlock, 64);
  const long cold_faults = faults_writing(cold.get(), kBlock);
  EXPECT_GT(cold_faults, 0);  // at least one per huge page, one per 4 KiB page without them

#ifdef WT_TEST_SANITIZED
  GTEST_SKIP() << "under ASan every first write to a page also faults in its shadow's page";
#endif
  StagingArena arena;
  const double took = arena.prepare(kBlock * kBlocks, 2, true);
  if (took < 0) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  long faults = 0;
  std::vector<std::shared_ptr<unsigned char>> blocks;
  for (std::size_t i = 0; i < kBlocks; ++i) {
    blocks.push_back(arena.allocate(kBlock, 256));
    faults += faults_writing(blocks.back().get(), kBlock);
  }
  EXPECT_LE(faults, 2) << "cold: " << cold_faults << " faults for one block";
  // What follows the prepared range is not prepared: prepare() did not fault in more.
  auto after = arena.allocate(kBlock, 64);
  EXPECT_GT(faults_writing(after.get(), kBlock), 0);
}

TEST(StagingArena, PreparingInTheBackgroundLeavesWhatIsWrittenMeanwhileIntact) {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  StagingArena arena;
  if (arena.prepare(4096, 1, true) < 0) GTEST_SKIP() << "no MADV_POPULATE_WRITE";
  arena.prepare(kBytes, 2, false);
  // Blocks cut from the range being populated, written at once: populating never changes what a
  // page already holds.
  std::vector<std::shared_ptr<unsigned char>> blocks;
  for (int i = 0; i < 16; ++i) {
    blocks.push_back(arena.allocate(kBytes / 16, 64));
    std::memset(blocks.back().get(), i + 1, kBytes / 16);
  }
  arena.prepare(0, 1, true);  // joins the background one
  for (int i = 0; i < 16; ++i)
    for (std::size_t k = 0; k < kBytes / 16; k += 4093)
      ASSERT_EQ(blocks[static_cast<std::size_t>(i)].get()[k], i + 1) << i << " " << k;
}

}  // namespace
}  // namespace wt::detail
