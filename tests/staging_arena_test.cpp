// The receiver's staging arena: blocks handed out one after another lie back to back (what lets a
// packed chunk land in place), aligned as asked; a block larger than a reservation gets a mapping
// of its own; a released block's pages go back to the kernel, and the memory of live blocks stays
// untouched by it.
#include "staging_arena.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace wt::detail
