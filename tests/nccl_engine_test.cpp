// The nccl engines on their own, from the plugin's sources, with a recording client and a spy
// communicator in place of Gloo/NCCL (the reference suite's §10 cases): the exact worker init
// payload, the call order, non-sender ranks, sources rejected before any collective, strided
// views sent contiguous, a blocked RPC never waited for when the source fails, and the wire
// parameters a worker learns from its init info.
#include "nccl_trainer.hpp"
#include "nccl_worker.hpp"
#include "packed_chunks.hpp"

#include "support/model.hpp"
#include "support/recording_client.hpp"
#include "support/spy_communicator.hpp"

#include <wt/error.hpp>
#include <wt/sdk/base64.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

namespace wt {
namespace {

// What each broadcast moved.
using test::Spy;

nccl::NcclInitInfo info(int rank = 0, bool packed = false, int64_t buffer = 1 << 16) {
  auto parsed = nccl::NcclInitInfo::parse({{"master_address", "10.0.0.1"},
                                           {"master_port", 29500},
                                           {"world_size", 3},
                                           {"rank", rank},
                                           {"packed", packed},
                                           {"packed_buffer_size_bytes", buffer}});
  return static_cast<nccl::NcclInitInfo&>(*parsed);
}

sdk::TrainerContext context(Client& client, WeightSource* source) {
  sdk::TrainerContext c;
  c.client = sdk::ClientRef(client.c_client());
  c.source = sdk::SourceRef(source ? source->c_source() : nullptr);
  return c;
}

TEST(NcclTrainerSpy, InitShipsExactlyVllmsWorkerInitInfo) {
  test::RecordingClient client;
  test::VectorSource source;
  test::fill_model(source, 2, 8);
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(0, true), spy.factory());
  ASSERT_THAT(client.methods(), ElementsAre("init"));
  EXPECT_EQ(json::parse(client.calls()[0].payload), json({{"master_address", "10.0.0.1"},
                                                          {"master_port", 29500},
                                                          {"rank_offset", 1},
                                                          {"world_size", 3},
                                                          {"packed", true},
                                                          {"packed_buffer_size_bytes", 65536},
                                                          {"packed_num_buffers", 2}}));
  EXPECT_EQ(spy.made, 1);
  EXPECT_TRUE(spy.log->empty());
}

TEST(NcclTrainerSpy, SendDrivesTheClientInOrderAndBroadcastsEveryTensor) {
  test::RecordingClient client;
  test::VectorSource source;
  test::fill_model(source, 2, 8);
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(), spy.factory());
  sdk::SendArgs args;
  args.weight_version = "step-42";
  trainer.send_weights(args);
  EXPECT_THAT(client.methods(), ElementsAre("init", "start", "update", "finish"));
  auto update = json::parse(client.calls()[2].payload);
  EXPECT_FALSE(update.contains("packed"));
  EXPECT_EQ(update["names"].size(), source.tensors().size());
  EXPECT_EQ(client.calls()[3].payload, "step-42");
  ASSERT_EQ(spy.log->size(), source.tensors().size()) << "one broadcast per tensor, unpacked";
  for (std::size_t i = 0; i < source.tensors().size(); ++i) {
    EXPECT_EQ((*spy.log)[i].data, source.tensors()[i].bytes) << i;
    EXPECT_TRUE((*spy.log)[i].dtype == source.tensors()[i].dtype) << "typed, as NCCL peers expect";
  }
}

TEST(NcclTrainerSpy, PackedRoundsBroadcastVllmsChunksAsBytes) {
  test::RecordingClient client;
  test::VectorSource source;
  test::fill_model(source, 4, 16);
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(0, true, 4096), spy.factory());
  trainer.send_weights({});
  std::vector<uint64_t> sizes;
  std::vector<unsigned char> all;
  for (auto& t : source.tensors()) {
    sizes.push_back(t.bytes.size());
    all.insert(all.end(), t.bytes.begin(), t.bytes.end());
  }
  const auto chunks = nccl::packed_chunks(sizes, 4096);
  ASSERT_EQ(spy.log->size(), chunks.size());
  std::vector<unsigned char> sent;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    EXPECT_EQ((*spy.log)[c].bytes, chunks[c].bytes);
    EXPECT_EQ((*spy.log)[c].dtype.code, kDLUInt);
    sent.insert(sent.end(), (*spy.log)[c].data.begin(), (*spy.log)[c].data.end());
  }
  EXPECT_EQ(sent, all) << "every byte, in order, through the rotating buffers";
}

// Tensors back to back in one buffer (a checkpoint mapped from one file): each chunk is broadcast
// straight from the source's memory, not packed; the bytes are the same.
TEST(NcclTrainerSpy, ChunksLyingBackToBackInTheSourceAreBroadcastWithoutPacking) {
  struct Flat : WeightSource {
    std::vector<unsigned char> bytes = std::vector<unsigned char>(10 * 1000);
    int64_t shape[1] = {250};
    std::vector<ParamMeta> meta;
    std::size_t i = 0;
    Flat() {
      for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<unsigned char>(k * 7);
      for (int k = 0; k < 10; ++k)
        meta.push_back({"t" + std::to_string(k), {kDLFloat, 32, 1}, {250}});
    }
    const std::vector<ParamMeta>& metadata() override { return meta; }
    void begin() override { i = 0; }
    bool next(wt_tensor& out) override {
      if (i == meta.size()) return false;
      out.name = meta[i].name.c_str();
      out.tensor =
          DLTensor{bytes.data() + 1000 * i, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
      ++i;
      return true;
    }
    void end() override {}
  } source;
  test::RecordingClient client;
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(0, true, 2500), spy.factory());
  trainer.send_weights({});
  ASSERT_EQ(spy.log->size(), 4u) << "chunks of 3, 3, 3 and 1 tensors (each closes past 2500 B)";
  std::vector<unsigned char> sent;
  for (const auto& b : *spy.log) {
    EXPECT_GE(b.at, static_cast<const void*>(source.bytes.data()));
    EXPECT_LT(b.at, static_cast<const void*>(source.bytes.data() + source.bytes.size()))
        << "broadcast from the source's memory";
    sent.insert(sent.end(), b.data.begin(), b.data.end());
  }
  EXPECT_EQ(sent, source.bytes);
}

TEST(NcclTrainerSpy, ANonSenderRankMakesNoCallsAndNoDomainAndOnlyIterates) {
  test::RecordingClient client;
  test::VectorSource source;
  test::fill_model(source, 2, 8);
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(1), spy.factory());
  trainer.send_weights({});
  trainer.send_weights({});
  EXPECT_EQ(source.passes(), 2) << "its iteration may drive the sender's (FSDP gathers)";
  EXPECT_TRUE(client.calls().empty());
  EXPECT_EQ(spy.made, 0);
  EXPECT_TRUE(spy.log->empty());
}

TEST(NcclTrainerSpy, RequiresASource) {
  test::RecordingClient client;
  Spy spy;
  try {
    nccl::NcclTrainer trainer(context(client, nullptr), info(), spy.factory());
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("requires a weight source"));
  }
  EXPECT_TRUE(client.calls().empty());
}

// A source whose iteration is scripted apart from its metadata.
class ScriptedSource : public test::VectorSource {
 public:
  std::vector<ParamMeta> declared;
  std::size_t stop_after = SIZE_MAX;  // yields this many, then ends early
  bool throw_instead = false;         // ... or throws there
  const std::vector<ParamMeta>& metadata() override { return declared; }
  bool next(wt_tensor& out) override {
    if (yielded_++ == stop_after) {
      if (throw_instead) throw Error(WT_ERR_SYSTEM, "the source failed");
      return false;
    }
    return VectorSource::next(out);
  }
  void begin() override {
    yielded_ = 0;
    VectorSource::begin();
  }

 private:
  std::size_t yielded_ = 0;
};

void expect_rejected_before_any_collective(ScriptedSource& source, const std::string& message) {
  test::RecordingClient client;
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(), spy.factory());
  try {
    trainer.send_weights({});
    FAIL() << "accepted";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
  EXPECT_TRUE(spy.log->empty()) << "no collective after a rejected source";
}

TEST(NcclTrainerSpy, AReorderedSourceIsRejectedAtIndex0) {
  ScriptedSource s;
  s.add("a", {kDLFloat, 32, 1}, {2}, 1);
  s.add("b", {kDLFloat, 32, 1}, {2}, 2);
  s.declared = {s.metadata_of(1), s.metadata_of(0)};
  expect_rejected_before_any_collective(s, "disagrees with iteration at index 0");
}

TEST(NcclTrainerSpy, ADtypeDisagreementIsRejected) {
  ScriptedSource s;
  s.add("a", {kDLFloat, 32, 1}, {2}, 1);
  s.declared = {{"a", {kDLBfloat, 16, 1}, {2}}};
  expect_rejected_before_any_collective(s, "declared 'a' bfloat16 [2], got 'a' float32 [2]");
}

TEST(NcclTrainerSpy, ATruncatedSourceIsRejected) {
  ScriptedSource s;
  s.add("a", {kDLFloat, 32, 1}, {2}, 1);
  s.add("b", {kDLFloat, 32, 1}, {2}, 2);
  s.declared = {s.metadata_of(0), s.metadata_of(1)};
  s.stop_after = 1;
  test::RecordingClient client;
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &s), info(), spy.factory());
  try {
    trainer.send_weights({});
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("yielded 1 parameters but metadata() declared 2"));
  }
}

TEST(NcclTrainerSpy, AStridedViewIsBroadcastContiguous) {
  // A 3x2 float32 tensor stored transposed: element (i, j) at offset i + 3 * j.
  struct Transposed : WeightSource {
    float storage[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
    std::vector<ParamMeta> meta{{"t", {kDLFloat, 32, 1}, {3, 2}}};
    bool done = false;
    const std::vector<ParamMeta>& metadata() override { return meta; }
    void begin() override { done = false; }
    bool next(wt_tensor& out) override {
      if (done) return false;
      done = true;
      out.name = "t";
      out.tensor = DLTensor{storage, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 0};
      return true;
    }
    void end() override {}
  } source;
  test::RecordingClient client;
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(), spy.factory());
  trainer.send_weights({});
  ASSERT_EQ(spy.log->size(), 1u);
  const float expected[6] = {0, 3, 1, 4, 2, 5};  // row-major (i, j) = storage[i + 3j]
  ASSERT_EQ((*spy.log)[0].bytes, sizeof expected);
  EXPECT_EQ(std::memcmp((*spy.log)[0].data.data(), expected, sizeof expected), 0);
}

// update_weights blocks for good (an inference side stuck in its collective) while the source
// fails at its second tensor: send_weights fails at once, without waiting for the RPC.
TEST(NcclTrainerSpy, ABlockedRpcIsNeverWaitedForWhenTheSourceFails) {
  struct Stuck : test::RecordingClient {
    std::mutex mu;
    std::condition_variable cv;
    bool released = false;
    void update_weights(std::string_view) override {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return released; });
    }
    void release() {
      std::lock_guard<std::mutex> l(mu);
      released = true;
      cv.notify_all();
    }
    // Answers at once, as wt serve's route does (the default would send an update, which blocks).
    void end_weight_update(std::string_view reason) override {
      std::lock_guard<std::mutex> l(mu);
      ended = std::string(reason);
    }
    std::string ended;
  } client;
  ScriptedSource s;
  s.add("a", {kDLFloat, 32, 1}, {2}, 1);
  s.add("b", {kDLFloat, 32, 1}, {2}, 2);
  s.declared = {s.metadata_of(0), s.metadata_of(1)};
  s.stop_after = 1;
  s.throw_instead = true;
  Spy spy;
  {
    nccl::NcclTrainer trainer(context(client, &s), info(), spy.factory());
    const auto t0 = std::chrono::steady_clock::now();
    try {
      trainer.send_weights({});
      FAIL();
    } catch (const sdk::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("the source failed"));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    {
      std::lock_guard<std::mutex> l(client.mu);
      EXPECT_THAT(client.ended, HasSubstr("the source failed")) << "the round is ended there";
    }
    client.release();  // the parked RPC thread is joined with the engine
  }
}

sdk::WorkerContext worker_context() {
  sdk::WorkerContext c;
  return c;
}

TEST(NcclWorkerSpy, LearnsTheWireParametersFromItsInitInfoOnly) {
  Spy spy;
  nccl::NcclWorker worker(worker_context(),
                          {{"master_address", "10.0.0.1"},
                           {"master_port", 29500},
                           {"rank_offset", 1},
                           {"world_size", 3},
                           {"packed", true},
                           {"packed_buffer_size_bytes", 12345},
                           {"packed_num_buffers", 3}},
                          spy.factory());
  EXPECT_TRUE(worker.packed());
  EXPECT_EQ(worker.buffer_bytes(), 12345);
  EXPECT_EQ(worker.num_buffers(), 3);
  nccl::NcclWorker plain(worker_context(),
                         {{"master_address", "10.0.0.1"},
                          {"master_port", 29500},
                          {"rank_offset", 1},
                          {"world_size", 3}},
                         spy.factory());
  EXPECT_FALSE(plain.packed()) << "vLLM's worker default";
}

TEST(NcclWorkerSpy, ReceiveBeforeStartIsRefused) {
  Spy spy;
  nccl::NcclWorker worker(
      worker_context(),
      {{"master_address", "h"}, {"master_port", 1}, {"rank_offset", 1}, {"world_size", 2}},
      spy.factory());
  try {
    worker.receive(json::parse(R"({"names":[],"dtype_names":[],"shapes":[]})"), sdk::LoaderRef());
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_STATE);
    EXPECT_THAT(e.what(), HasSubstr("start must be called before receive"));
  }
}

TEST(NcclWorkerSpy, RendezvousModesAreExclusiveAndTheUniqueIdIsChecked) {
  Spy spy;
  auto expect_refused = [&](json init, const std::string& message) {
    try {
      nccl::NcclWorker worker(worker_context(), init, spy.factory());
      FAIL() << init.dump();
    } catch (const sdk::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(message)) << init.dump();
    }
  };
  expect_refused({{"master_address", "h"},
                  {"master_port", 1},
                  {"nccl_unique_id_b64", sdk::base64_encode(std::string(128, '\0').data(), 128)},
                  {"rank_offset", 1},
                  {"world_size", 2}},
                 "pass nccl_unique_id_b64 OR master_address/master_port, not both");
  expect_refused({{"nccl_unique_id_b64", "not-base64_"}, {"rank_offset", 1}, {"world_size", 2}},
                 "URL-safe base64 is not accepted");
  expect_refused(
      {{"nccl_unique_id_b64", sdk::base64_encode("abc", 3)}, {"rank_offset", 1}, {"world_size", 2}},
      "an NCCL unique id is 128 bytes, this one decodes to 3");
  expect_refused({{"rank_offset", 1}, {"world_size", 2}}, "field 'master_address'");
}

}  // namespace
}  // namespace wt
