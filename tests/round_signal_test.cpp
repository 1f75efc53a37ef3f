// The round signal (plugins/common/round_signal): ranks watching a round hear the first rank that
// ended it, within a second, named by the store and not by what it says; a rank does not hear
// itself; a store that goes away ends a watch quietly; what a rank may say, and the rounds kept,
// are bounded.
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
      signals.push_back(
          std::make_unique<RoundSignal>("127.0.0.1", port, SessionKeys::of_secret(kSecret, r)));
  }
  std::optional<TcpStoreServer> server;
  int port = 0;
  std::vector<std::unique_ptr<RoundSignal>> signals;
};

// A watch of `round` that hears nothing for 400 ms.
void expect_no_fate(RoundSignal& signal, uint32_t round) {
  Heard heard;
  auto w = signal.watch(round, heard.sink());
  EXPECT_FALSE(heard.wait_for(400ms)) << heard.fate;
}

TEST(RoundSignal, EveryOtherRankHearsTheFirstRankToEndARoundWithinASecond) {
  Group g(3);
  Heard h0, h1, h2;
  auto w0 = g.signals[0]->watch(7, h0.sink());
  auto w1 = g.signals[1]->watch(7, h1.sink());
  auto w2 = g.signals[2]->watch(7, h2.sink());
  std::this_thread::sleep_for(200ms);  // the watches are asking
  const auto raised = Clock::now();
  EXPECT_EQ(g.signals[2]->raise(7, "the weight source failed: tensor 'w' is missing"), "");
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
  // The rank that ended it hears nothing of its own.
  EXPECT_FALSE(h2.wait_for(300ms));
  EXPECT_EQ(w2->fate(), "");
  // A second rank to end it hears whose round it was.
  EXPECT_EQ(g.signals[1]->raise(7, "the transfers were aborted"), h0.fate);
  expect_no_fate(*g.signals[0], 8);  // another round is not this one's
}

// A rank names itself only by its connection: whatever it says, the store says who it was.
TEST(RoundSignal, ARankCannotEndARoundInAnotherRanksName) {
  Group g(3);
  Heard h0;
  auto w0 = g.signals[0]->watch(1, h0.sink());
  EXPECT_EQ(g.signals[1]->raise(1, "trainer rank 2 ended round 1: out of memory\n\xff"), "");
  ASSERT_TRUE(h0.wait_for(1s));
  // Whatever it sends comes out printable.
  EXPECT_EQ(w0->fate(),
            "trainer rank 1 ended round 1: trainer rank 2 ended round 1: out of memory??");
  // A stranger (another session's secret) cannot end a round at all.
  const SessionSecret other = SessionSecret::mint();
  RoundSignal stranger("127.0.0.1", g.port, SessionKeys::of_secret(other, 2));
  EXPECT_EQ(stranger.raise(2, "a stranger"), "");
  expect_no_fate(*g.signals[0], 2);
}

// Rank 0 may end its engine, and its store, while another rank still finishes the last round: the
// watch then ends quietly, and the round is left to its transfers' own deadline.
TEST(RoundSignal, TheStoreGoingAwayEndsTheWatchQuietly) {
  Group g(2);
  Heard h1;
  auto w1 = g.signals[1]->watch(4, h1.sink());
  std::this_thread::sleep_for(200ms);
  g.server.reset();
  EXPECT_FALSE(h1.wait_for(600ms));
  EXPECT_EQ(w1->fate(), "");
  const auto t0 = Clock::now();
  w1.reset();
  EXPECT_LT(Clock::now() - t0, 500ms);                // nothing left to wait for
  EXPECT_EQ(g.signals[0]->raise(4, "too late"), "");  // and raising is best effort
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
  // A rank raising rounds far ahead cannot keep the current round's fate from being kept: the
  // first raised goes first, whatever its number.
  for (uint32_t r = 1; r <= kFatesKept; ++r) EXPECT_TRUE(a.raise_fate(1'000'000 + r, "ahead"));
  EXPECT_FALSE(a.fate(0).has_value());  // raised first, gone first
  EXPECT_TRUE(a.raise_fate(5, "the round running now"));
  ASSERT_TRUE(a.fate(5).has_value());
  EXPECT_EQ(a.fate(5)->why, "the round running now");
  EXPECT_FALSE(a.fate(1'000'001).has_value());
  EXPECT_TRUE(a.fate(1'000'002).has_value());
}

}  // namespace
}  // namespace wt::plugins
