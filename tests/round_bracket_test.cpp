// The sender's round bracket (plugins/common/round_bracket.hpp) with a client whose
// start_weight_update does not answer, as a stopped receiver host's would not: a rank that gave
// the round up ends it at once, the inference side is told only after the start call ended (never
// before it, and reaching the client although the bracket is gone by then), and with no such rank
// the round waits for the call as before.
#include "round_bracket.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace wt::plugins {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// A receiver whose start_weight_update blocks until released; it records every call in order.
struct HeldReceiver {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::vector<std::string> calls;

  void record(std::string call) {
    std::lock_guard<std::mutex> l(mu);
    calls.push_back(std::move(call));
  }
  void release() {
    {
      std::lock_guard<std::mutex> l(mu);
      released = true;
    }
    cv.notify_all();
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> l(mu);
    return calls;
  }

  static HeldReceiver& of(void* ctx) { return *static_cast<HeldReceiver*>(ctx); }
  wt_client client() {
    wt_client c{};
    c.struct_size = sizeof(wt_client);
    c.abi_version = WT_ABI_VERSION;
    c.ctx = this;
    c.start_weight_update = [](void* ctx, char*, size_t) {
      auto& r = of(ctx);
      std::unique_lock<std::mutex> l(r.mu);
      r.cv.wait(l, [&] { return r.released; });
      r.calls.push_back("start");
      return WT_OK;
    };
    c.update_weights = [](void* ctx, const char*, char*, size_t) {
      of(ctx).record("update");
      return WT_OK;
    };
    c.finish_weight_update = [](void* ctx, const char*, char*, size_t) {
      of(ctx).record("finish");
      return WT_OK;
    };
    c.end_weight_update = [](void* ctx, const char* reason, char*, size_t) {
      of(ctx).record(std::string("end: ") + (reason ? reason : ""));
      return WT_OK;
    };
    return c;
  }
};

// One round's sender side: the held receiver, its client, the abort flag and the parked calls.
// Ending releases the receiver first, so a failed test never leaves a parked call waiting on it.
class RoundBracketTest : public ::testing::Test {
 protected:
  ~RoundBracketTest() override {
    receiver.release();
    parked.clear();
  }

  HeldReceiver receiver;
  const wt_client c = receiver.client();
  sdk::ClientRef client{&c};
  sdk::AbortSignal aborted;
  std::vector<std::unique_ptr<AsyncRpc>> parked;
};

TEST_F(RoundBracketTest, ARankThatGaveUpEndsARoundWhoseStartIsNotAnswered) {
  bool transferred = false;
  const auto t0 = Clock::now();
  // The bracket lives in storage that is scribbled over once it is gone, as a round's stack frame
  // is reused after the round threw: the parked calls must not reach the client through it.
  alignas(RoundBracket) unsigned char storage[sizeof(RoundBracket)];
  auto* bracket = new (storage) RoundBracket(client, aborted, parked, [] {});
  try {
    bracket->run(
        "{}", [&](RoundBracket::Round&) { transferred = true; }, [](bool) {}, nullptr, nullptr,
        [&]() -> std::string {
          return Clock::now() - t0 > 100ms ? "rank 1 closed its pair with this rank" : "";
        });
    ADD_FAILURE() << "the round succeeded";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_STREQ(e.what(), "start_weight_update: rank 1 closed its pair with this rank");
  }
  bracket->~RoundBracket();
  std::memset(storage, 0, sizeof storage);
  const auto took = Clock::now() - t0;
  EXPECT_FALSE(transferred);
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 2s) << "the round waited for the start call";
  EXPECT_TRUE(receiver.seen().empty()) << "end_weight_update went before the start ended";
  receiver.release();
  parked.clear();  // joins: the start, then the end after it
  EXPECT_THAT(receiver.seen(), ElementsAre("start",
                                           "end: start_weight_update: rank 1 closed its "
                                           "pair with this rank"));
}

TEST_F(RoundBracketTest, WithNoRankGivingUpTheRoundWaitsForItsStart) {
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    receiver.release();
  });
  const auto t0 = Clock::now();
  RoundBracket bracket(client, aborted, parked, [] {});
  bracket.run(
      "{}", [&](RoundBracket::Round& r) { r.before_collective(); }, [](bool) {}, "v1", nullptr,
      [] { return std::string(); });
  releaser.join();
  EXPECT_GE(Clock::now() - t0, 200ms);
  EXPECT_THAT(receiver.seen(), ElementsAre("start", "update", "finish"));
}

}  // namespace
}  // namespace wt::plugins
