// The nccl backend on host memory (Gloo): a trainer and a reference receiver in one process, the
// receiver's worker joining the group from inside init_weight_transfer_engine as vLLM's does.
#include <wt/services/receiver.hpp>
#include <wt/wt.hpp>

#include "packed_chunks.hpp"
#include "support/free_port.hpp"
#include "support/model.hpp"
#include "support/recording_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using ::testing::HasSubstr;
using json = nlohmann::json;

namespace wt {
namespace {

using test::free_port;

InitInfo nccl_info(int port, bool packed, int64_t buffer = 1 << 16, int transfer_s = 30) {
  return InitInfo::from_object({{"backend", "nccl"},
                                {"master_address", "127.0.0.1"},
                                {"master_port", port},
                                {"world_size", 2},
                                {"rank", 0},
                                {"packed", packed},
                                {"packed_buffer_size_bytes", buffer},
                                {"rendezvous_timeout_s", 20},
                                {"transfer_timeout_s", transfer_s}});
}

Receiver::Options receiver_options(int transfer_s = 30) {
  Receiver::Options o;
  o.backend = "nccl";
  o.backend_options = {{"rendezvous_timeout_s", 20}, {"transfer_timeout_s", transfer_s}};
  return o;
}

void expect_same_bytes(test::VectorSource& s, const Receiver& r) {
  ASSERT_EQ(r.names().size(), s.tensors().size());
  for (auto& t : s.tensors()) EXPECT_EQ(r.bytes_of(t.name), std::optional(t.bytes)) << t.name;
}

class NcclHost : public ::testing::TestWithParam<bool> {};

// Holds update_weights (the trainer's side-thread RPC) until released, then refuses it: the
// trainer's broadcast meanwhile waits for a worker that never comes to it.
class GateClient : public Client {
 public:
  explicit GateClient(Client& inner) : inner_(inner) {}
  void init_weight_transfer_engine(std::string_view j) override {
    inner_.init_weight_transfer_engine(j);
  }
  void start_weight_update() override { inner_.start_weight_update(); }
  void update_weights(std::string_view) override {
    std::unique_lock<std::mutex> l(mu_);
    held_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return released_; });
    throw Error(WT_ERR_REMOTE, "held, then refused");
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    inner_.finish_weight_update(v);
  }
  void wait_until_held() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return held_; });
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  Client& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

TEST_P(NcclHost, ByteExactOverSeveralRounds) {
  Receiver receiver(receiver_options());
  InProcessClient inner(receiver);
  test::RecordingClient client(&inner);
  test::VectorSource source;
  test::fill_model(source);
  auto engine = trainer_init(nccl_info(free_port(), GetParam()), client, &source);
  for (int round = 0; round < 3; ++round) {
    SendOptions o;
    o.weight_version = "step-" + std::to_string(round);
    engine->send_weights(o);
    expect_same_bytes(source, receiver);
    EXPECT_EQ(receiver.weight_version(), "step-" + std::to_string(round));
    source.perturb(static_cast<uint32_t>(round));
  }
  // Every tensor landed in the receiver's staging memory through a destination: broadcast
  // straight into it (unpacked: one per tensor; packed: one per chunk, the receiver staging the
  // chunk's tensors back to back), or copied there from the packed buffer.
  EXPECT_EQ(receiver.tensors_written_in_place(), 3 * source.tensors().size());
  // The worker init payload: vLLM's keys, and on host memory each worker's own key (64 hex
  // digits, a new one per init, split per rank by whoever fans the info out), the round
  // digests it asks for, with their seed, and the trainer's rendezvous deadline.
  auto init = json::parse(client.calls()[0].payload);
  std::set<std::string> keys;
  for (auto it = init.begin(); it != init.end(); ++it) keys.insert(it.key());
  EXPECT_EQ(keys, (std::set<std::string>{"master_address", "master_port", "rank_offset",
                                         "world_size", "packed", "packed_buffer_size_bytes",
                                         "packed_num_buffers", "rank_keys", "round_digests",
                                         "round_digests_seed", "rendezvous_timeout_s"}));
  EXPECT_EQ(init["round_digests"], "xxh3-128");
  EXPECT_EQ(init["rendezvous_timeout_s"], 20);
  // Each round: start, the tensors, then their digests (16 bytes per broadcast: one per tensor
  // unpacked, one per chunk packed), then finish.
  const auto methods = client.methods();
  ASSERT_EQ(methods.size(), 1u + 3 * 4);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(methods[1 + 4 * round], "start");
    EXPECT_EQ(methods[2 + 4 * round], "update");
    EXPECT_EQ(methods[3 + 4 * round], "update");
    EXPECT_EQ(methods[4 + 4 * round], "finish");
    const auto digests = json::parse(client.calls()[3 + 4 * round].payload);
    ASSERT_EQ(digests.size(), 1u);
    const std::size_t b64 = digests["round_digests"].get<std::string>().size();
    if (!GetParam()) {
      EXPECT_EQ(b64, (16 * source.tensors().size() + 2) / 3 * 4);
    }
  }
  ASSERT_EQ(init["rank_keys"].size(), 1u);  // one worker: rank_offset 1
  EXPECT_THAT(init["rank_keys"]["1"].get<std::string>(), ::testing::MatchesRegex("[0-9a-f]{64}"));
  EXPECT_THAT(init["round_digests_seed"].get<std::string>(),
              ::testing::MatchesRegex("[0-9a-f]{16}"));
  EXPECT_EQ(init["rank_offset"], 1);
}

INSTANTIATE_TEST_SUITE_P(PackedAndUnpacked, NcclHost, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Packed" : "Unpacked"; });

// A source whose iteration disagrees with its metadata fails the round before any collective,
// naming the index, and the failure does not hang.
TEST(NcclHostFaults, AReorderedSourceIsRejectedBeforeAnyCollective) {
  Receiver receiver(receiver_options(2));
  InProcessClient client(receiver);
  struct Reordered : test::VectorSource {
    const std::vector<ParamMeta>& metadata() override {
      swapped = VectorSource::metadata();
      std::swap(swapped[0], swapped[1]);
      return swapped;
    }
    std::vector<ParamMeta> swapped;
  } source;
  test::fill_model(source, 1);
  auto t0 = std::chrono::steady_clock::now();
  {
    auto engine = trainer_init(nccl_info(free_port(), false, 1 << 16, 2), client, &source);
    try {
      engine->send_weights();
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      // The host checks every pass against metadata() before the plugin sees the item.
      EXPECT_THAT(e.what(), HasSubstr("the weight source's item 0 is 'model.embed_tokens.weight'"));
      EXPECT_THAT(e.what(), HasSubstr("but its metadata declares"));
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_TRUE(receiver.names().empty()) << "nothing of the failed round is committed";
}

// vLLM's boundaries: a chunk closes right after the tensor that takes it past the buffer, and a
// byte count that would wrap (sizes come from the wire) is refused.
TEST(NcclPackedChunks, BoundariesAreVllmsAndSizesCannotWrap) {
  auto c = nccl::packed_chunks({40, 40, 40, 100, 10}, 64);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ((std::vector<std::size_t>{c[0].first, c[0].last, c[1].last, c[2].last}),
            (std::vector<std::size_t>{0, 2, 4, 5}));
  EXPECT_EQ((std::vector<uint64_t>{c[0].bytes, c[1].bytes, c[2].bytes}),
            (std::vector<uint64_t>{80, 140, 10}));
  EXPECT_THROW(nccl::packed_chunks({UINT64_MAX - 5, 10}, UINT64_MAX), sdk::Error);
}

TEST(NcclHostFaults, AWorkerThatNeverComesIsATimeoutNotAHang) {
  test::RecordingClient client;  // no receiver behind it: nobody joins
  test::VectorSource source;
  auto info = InitInfo::from_object({{"backend", "nccl"},
                                     {"master_address", "127.0.0.1"},
                                     {"master_port", free_port()},
                                     {"world_size", 2},
                                     {"rank", 0},
                                     {"rendezvous_timeout_s", 1}});
  auto t0 = std::chrono::steady_clock::now();
  try {
    trainer_init(info, client, &source);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("rendezvous of 2 ranks at 127.0.0.1:"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// A source that stops before yielding tensor `at` until released: the peers then wait inside
// that tensor's broadcast.
class GateSource : public WeightSource {
 public:
  GateSource(WeightSource& inner, std::size_t at) : inner_(inner), at_(at) {}
  const std::vector<ParamMeta>& metadata() override { return inner_.metadata(); }
  void begin() override {
    index_ = 0;
    inner_.begin();
  }
  bool next(wt_tensor& out) override {
    if (index_++ == at_) {
      std::unique_lock<std::mutex> l(mu_);
      blocked_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return released_; });
    }
    return inner_.next(out);
  }
  void end() override { inner_.end(); }
  void wait_until_blocked() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return blocked_; });
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  WeightSource& inner_;
  std::size_t at_, index_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool blocked_ = false, released_ = false;
};

// The trainer ends an update while the worker waits in a broadcast (its own deadline: 30 s): the
// receiver aborts the engine at once, the broadcast stops waiting, the update fails as aborted,
// nothing is committed. The trainer's round fails (by its 3 s deadline at the latest), and a fresh
// trainer_init syncs byte-exact through the same receiver.
TEST(NcclHostFaults, EndingAnUpdateInterruptsAWorkerBlockedInABroadcast) {
  Receiver receiver(receiver_options(30));
  InProcessClient client(receiver);
  test::VectorSource model;
  test::fill_model(model);
  GateSource gate(model, 50);
  auto engine = trainer_init(nccl_info(free_port(), false, 1 << 16, 3), client, &gate);
  std::atomic<bool> round_failed{false};
  std::thread sender([&] {
    try {
      engine->send_weights();
    } catch (const Error&) {
      round_failed = true;
    }
  });
  gate.wait_until_blocked();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the worker waits for tensor 50
  const auto t0 = std::chrono::steady_clock::now();
  receiver.end_weight_update("the trainer gave up");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5))
      << "the worker's broadcast was not interrupted";
  EXPECT_FALSE(receiver.session_active());
  EXPECT_TRUE(receiver.names().empty());
  gate.release();
  sender.join();
  EXPECT_TRUE(round_failed.load());
  engine.reset();

  auto again = trainer_init(nccl_info(free_port(), false), client, &model);
  again->send_weights();
  expect_same_bytes(model, receiver);
}

// abort() on the trainer from another thread interrupts the broadcast it waits in (a worker that
// has not come to it): send_weights fails as aborted, long before the transfer deadline.
TEST(NcclHostFaults, AbortInterruptsATrainerBlockedInABroadcast) {
  Receiver receiver(receiver_options(30));
  InProcessClient inner(receiver);
  GateClient client(inner);  // holds the update call, so the worker never joins the broadcast
  test::VectorSource model;
  test::fill_model(model);
  auto engine = trainer_init(nccl_info(free_port(), false, 1 << 16, 30), client, &model);
  std::atomic<wt_status> code{WT_OK};
  std::thread sender([&] {
    try {
      engine->send_weights();
    } catch (const Error& e) {
      code = e.code();
    }
  });
  client.wait_until_held();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  engine->abort();
  client.release();
  sender.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(code.load(), WT_ERR_ABORTED);
}

}  // namespace
}  // namespace wt
