// The nccl backend on host memory (Gloo): a trainer and a reference receiver in one process, the
// receiver's worker joining the group from inside init_weight_transfer_engine as vLLM's does.
#include <wt/receiver.hpp>
#include <wt/wt.hpp>

#include "packed_chunks.hpp"
#include "support/free_port.hpp"
#include "support/model.hpp"
#include "support/recording_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>

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
  // Unpacked: every tensor was broadcast straight into the receiver's staging memory.
  if (!GetParam()) {
    EXPECT_EQ(receiver.tensors_written_in_place(), 3 * source.tensors().size());
  }
  // The worker init payload: vLLM's keys exactly.
  auto init = json::parse(client.calls()[0].payload);
  std::set<std::string> keys;
  for (auto it = init.begin(); it != init.end(); ++it) keys.insert(it.key());
  EXPECT_EQ(keys,
            (std::set<std::string>{"master_address", "master_port", "rank_offset", "world_size",
                                   "packed", "packed_buffer_size_bytes", "packed_num_buffers"}));
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
      EXPECT_THAT(e.what(), HasSubstr("disagrees with iteration at index 0"));
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

}  // namespace
}  // namespace wt
