// The stall deadline's watch (plugins/common/stall_watch.hpp): it interrupts a wait that saw no
// progress within the deadline, again until the wait is disarmed; progress, or a wait begun
// within the deadline, keeps it quiet.
#include "stall_watch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace wt::plugins {
namespace {

using namespace std::chrono_literals;
using Clock = StallWatch::Clock;

TEST(StallWatch, InterruptsAWaitWithoutProgressAndKeepsAtItUntilDisarmed) {
  StallWatch watch(100ms);
  std::atomic<int> interrupts{0};
  const auto t0 = Clock::now();
  watch.arm([] { return Clock::time_point{}; }, [&] { ++interrupts; });
  while (interrupts < 3 && Clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
  const auto first = Clock::now() - t0;
  EXPECT_TRUE(watch.disarm());
  EXPECT_GE(interrupts.load(), 3);
  EXPECT_GE(first, 100ms);  // not before the deadline
  const int after = interrupts;
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(interrupts.load(), after) << "no interrupt once disarmed";
}

TEST(StallWatch, ProgressKeepsAWaitAliveBeyondTheDeadline) {
  StallWatch watch(100ms);
  std::atomic<int> interrupts{0};
  watch.arm([] { return Clock::now() - 20ms; }, [&] { ++interrupts; });
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(watch.disarm());
  EXPECT_EQ(interrupts.load(), 0);
}

TEST(StallWatch, IdleTimeBeforeTheWaitBeganDoesNotCount) {
  StallWatch watch(300ms);
  std::atomic<int> interrupts{0};
  // The pair was last busy long ago; the wait itself is younger than the deadline.
  watch.arm([] { return Clock::now() - 1h; }, [&] { ++interrupts; });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(watch.disarm());
  // A fresh arm starts its own clock, and a fired watch does not carry over.
  watch.arm([] { return Clock::time_point{}; }, [&] { ++interrupts; });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(watch.disarm());
  EXPECT_EQ(interrupts.load(), 0);
}

}  // namespace
}  // namespace wt::plugins
