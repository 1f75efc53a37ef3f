// The round signal (plugins/common/round_signal): ranks watching a round hear the first rank that
// ended it, within a second, named by the store and not by what it says; a rank does not hear
// itself; the store going away while a round runs is a fate too; what a rank may say is bounded.
#include "round_signal.hpp"
#include "session_secret.hpp"
#include "tcp_store.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace wt::plugins {
namespace {

using Clock = std::chrono::steady_clock;

const SessionSecret kSecret = SessionSecret::mint();

// What a watch heard, and when.
struct Heard {
  std::mutex mu;
  std::string fate;
  Clock::time_point at{};
  int calls = 0;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& f) {
      std::lock_guard<std::mutex> l(mu);
      fate = f;
      at = Clock::now();
      ++calls;
    };
  }
  bool wait_for(std::chrono::milliseconds d) {
    const auto until = Clock::now() + d;
    while (Clock::now() < until) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (calls > 0) return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
};

// Trainer ranks 0..ranks-1, rank 0's store (which a test may stop).
struct Group {
  explicit Group(int ranks) {
    server.emplace("127.0.0.1", 0, kSecret, TcpStoreServer::Limits::for_world(ranks));
    port = server->port();
    for (int r = 0; r < ranks; ++r)
      signals.push_back(std::make_unique<RoundSignal>(
          "127.0.0.1", port, SessionKeys::of_secret(kSecret, r), 30'000ms));
  }
  std::optional<TcpStoreServer> server;
  int port = 0;
  std::vector<std::unique_ptr<RoundSignal>> signals;
};

TEST(RoundSignal, EveryOtherRankHearsTheFirstRankToEndARoundWithinASecond) {
  Group g(3);
  Heard h0, h1, h2;
  auto w0 = g.signals[0]->watch(7, h0.sink());
  auto w1 = g.signals[1]->watch(7, h1.sink());
  auto w2 = g.signals[2]->watch(7, h2.sink());
  std::this_thread::sleep_for(200ms);  // the watches are asking
  const auto raised = Clock::now();
  EXPECT_TRUE(g.signals[2]->raise(7, "the weight source failed: tensor 'w' is missing"));
  ASSERT_TRUE(h0.wait_for(1s));
  ASSERT_TRUE(h1.wait_for(1s));
  for (Heard* h : {&h0, &h1}) {
    std::lock_guard<std::mutex> l(h->mu);
    EXPECT_EQ(h->fate,
              "trainer rank 2 ended round 7: the weight source failed: tensor 'w' is missing");
    EXPECT_LT(h->at - raised, 1s);
    EXPECT_EQ(h->calls, 1);
  }
  EXPECT_EQ(w0->fate(), h0.fate);
  // The rank that ended it hears nothing of its own; a second rank to end it is not the fate.
  EXPECT_FALSE(h2.wait_for(300ms));
  EXPECT_EQ(w2->fate(), "");
  EXPECT_FALSE(g.signals[1]->raise(7, "the transfers were aborted"));
  // Another round is not this one's.
  Heard other;
  auto w = g.signals[0]->watch(8, other.sink());
  EXPECT_FALSE(other.wait_for(400ms));
}

// A rank names itself only by its connection: whatever it says, the store says who it was.
TEST(RoundSignal, ARankCannotEndARoundInAnotherRanksName) {
  Group g(3);
  Heard h0;
  auto w0 = g.signals[0]->watch(1, h0.sink());
  EXPECT_TRUE(g.signals[1]->raise(1, "trainer rank 2 ended round 1: out of memory"));
  ASSERT_TRUE(h0.wait_for(1s));
  EXPECT_EQ(w0->fate(),
            "trainer rank 1 ended round 1: trainer rank 2 ended round 1: out of memory");
  // A stranger (another session's secret) cannot end a round at all.
  const SessionSecret other = SessionSecret::mint();
  RoundSignal stranger("127.0.0.1", g.port, SessionKeys::of_secret(other, 2), 1'000ms);
  EXPECT_FALSE(stranger.raise(2, "a stranger"));
  Heard h2;
  auto w2 = g.signals[0]->watch(2, h2.sink());
  EXPECT_FALSE(h2.wait_for(400ms));
}

TEST(RoundSignal, TheStoreGoingAwayWhileARoundRunsIsAFate) {
  Group g(2);
  Heard h1;
  auto w1 = g.signals[1]->watch(4, h1.sink());
  std::this_thread::sleep_for(200ms);
  g.server.reset();  // rank 0 went, its store with it
  ASSERT_TRUE(h1.wait_for(1s));
  EXPECT_THAT(w1->fate(), HasSubstr("the round signal of round 4"));
  EXPECT_THAT(w1->fate(), HasSubstr("went away while the round ran"));
}

TEST(RoundSignal, WhatARankSaysAndHowManyRoundsAreKeptAreBounded) {
  TcpStoreServer server("127.0.0.1", 0, kSecret, TcpStoreServer::Limits::for_world(2));
  TcpStoreClient a("127.0.0.1", server.port(), SessionKeys::of_secret(kSecret, 1),
                   Clock::now() + 10s);
  EXPECT_TRUE(a.raise_fate(0, std::string(5000, 'x')));
  auto f = a.fate(0);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->why.size(), kMaxFateReason);
  for (uint32_t r = 1; r <= kFatesKept; ++r) EXPECT_TRUE(a.raise_fate(r, "r"));
  EXPECT_FALSE(a.fate(0).has_value());  // the oldest round's fate made room
  EXPECT_TRUE(a.fate(1).has_value());
  EXPECT_TRUE(a.fate(kFatesKept).has_value());
  EXPECT_FALSE(a.fate(kFatesKept + 1).has_value());
}

}  // namespace
}  // namespace wt::plugins
