// The nccl engines on their own, from the plugin's sources, with a recording client and a spy
// communicator in place of Gloo/NCCL (the reference suite's §10 cases): the exact worker init
// payload, the call order, non-sender ranks, sources rejected before any collective, strided
// views sent contiguous, a blocked RPC never waited for when the source fails, and the wire
// parameters a worker learns from its init info.
#include "broadcast_pipeline.hpp"
#include "nccl_trainer.hpp"
#include "nccl_worker.hpp"
#include "packed_chunks.hpp"
#include "round_digests.hpp"

#include "support/free_port.hpp"
#include "support/model.hpp"
#include "support/recording_client.hpp"
#include "support/spy_communicator.hpp"

#include <wt/error.hpp>
#include <wt/sdk/base64.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <map>
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

TEST(NcclTrainerSpy, TheUpdateInfoFollowsTheMetadataFromRoundToRound) {
  test::RecordingClient client;
  test::VectorSource source;
  test::fill_model(source, 2, 8);
  Spy spy;
  nccl::NcclTrainer trainer(context(client, &source), info(), spy.factory());
  auto names_sent = [&] {
    trainer.send_weights({});
    return json::parse(client.calls()[client.calls().size() - 2].payload)["names"];
  };
  const std::size_t n = source.tensors().size();
  const json before = names_sent();
  EXPECT_EQ(before.size(), n);
  EXPECT_EQ(names_sent(), before) << "the same model: the same text";
  source.add("added", {kDLFloat, 32, 1}, {3}, 9);  // the model grows: a new text, naming it
  const json after = names_sent();
  ASSERT_EQ(after.size(), n + 1);
  EXPECT_EQ(after[n], "added");
  EXPECT_EQ(spy.log->size(), n + n + (n + 1)) << "one broadcast per tensor, every round";
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

// A broadcast that waits for a peer that never takes part, until abort() (as Gloo waits for a
// receiver that died without closing its pairs).
class StalledCommunicator : public plugins::Communicator {
 public:
  void broadcast(void*, std::size_t, DLDataType, int, const std::string& what) override {
    std::unique_lock<std::mutex> l(mu_);
    in_broadcast_ = true;
    cv_.notify_all();
    cv_.wait_for(l, std::chrono::seconds(30), [&] { return aborted_; });
    throw sdk::Error(
        aborted_ ? WT_ERR_ABORTED : WT_ERR_TIMEOUT,
        fmt::format("{}: {}", what, aborted_ ? "aborted" : "a peer did not take part"));
  }
  void abort() override {
    std::lock_guard<std::mutex> l(mu_);
    aborted_ = true;
    cv_.notify_all();
  }
  bool broken() const override { return aborted_; }
  bool wait_in_broadcast() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(10), [&] { return in_broadcast_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool in_broadcast_ = false, aborted_ = false;
};

// The receiver fails its update call while the broadcast waits on it (it refused the update, or
// died and its connection closed): the round bracket stops the broadcast at once, and the round
// reports the receiver's error, not the transfer's time-out.
TEST(NcclTrainerSpy, AReceiverFailingItsUpdateMidBroadcastIsReportedAtOnce) {
  for (bool packed : {false, true}) {
    struct Failing : test::RecordingClient {
      StalledCommunicator* comm = nullptr;
      void update_weights(std::string_view) override {
        comm->wait_in_broadcast();
        throw Error(WT_ERR_REMOTE,
                    "POST http://127.0.0.1:9/update_weights failed: the receiver at "
                    "http://127.0.0.1:9 closed the connection after 0.1 s without an answer");
      }
      void end_weight_update(std::string_view reason) override { ended = std::string(reason); }
      std::string ended;
    } client;
    ScriptedSource s;
    s.add("a", {kDLFloat, 32, 1}, {2}, 1);
    s.add("b", {kDLFloat, 32, 1}, {2}, 2);
    s.declared = {s.metadata_of(0), s.metadata_of(1)};
    StalledCommunicator* stalled = nullptr;
    auto factory = [&](const plugins::CommunicatorOptions&) {
      auto c = std::make_unique<StalledCommunicator>();
      stalled = c.get();
      client.comm = stalled;
      return std::unique_ptr<plugins::Communicator>(std::move(c));
    };
    nccl::NcclTrainer trainer(context(client, &s), info(0, packed, 4), factory);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      trainer.send_weights({});
      FAIL() << "packed " << packed;
    } catch (const sdk::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("the receiver at http://127.0.0.1:9 closed the connection"))
          << "packed " << packed;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2))
        << "packed " << packed;
    EXPECT_THAT(client.ended, HasSubstr("closed the connection")) << "the round is ended there";
  }
}

// Teardown tells the workers first: when a round fails after its first collective, a group whose
// closing its peers do not notice (NCCL's) is aborted and kept until the engine goes, after the
// inference side's end_weight_update was answered, so a worker still inside the round is told to
// end it instead of finding its peer gone mid-collective. Before, the group went first.
TEST(NcclTrainerSpy, TeardownTellsTheWorkersBeforeTheCommunicatorGoes) {
  struct Events {
    std::mutex mu;
    std::vector<std::string> seen;
    void add(std::string e) {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(std::move(e));
    }
  } events;
  struct Recorded : plugins::Communicator {
    explicit Recorded(Events& e) : events(e) {}
    ~Recorded() override { events.add("communicator destroyed"); }
    void broadcast(void*, std::size_t, DLDataType, int, const std::string&) override {}
    void abort() override { events.add("communicator aborted"); }
    bool broken() const override { return false; }
    bool peers_see_it_close() const override { return false; }  // as NCCL's
    Events& events;
  };
  struct SlowToEnd : test::RecordingClient {
    Events* events = nullptr;
    void update_weights(std::string_view) override {}
    void end_weight_update(std::string_view) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the bracket's wait
      events->add("workers told");
    }
  } client;
  client.events = &events;
  ScriptedSource s;
  s.add("a", {kDLFloat, 32, 1}, {2}, 1);
  s.add("b", {kDLFloat, 32, 1}, {2}, 2);
  s.declared = {s.metadata_of(0), s.metadata_of(1)};
  s.stop_after = 1;
  s.throw_instead = true;
  auto factory = [&](const plugins::CommunicatorOptions&) {
    return std::unique_ptr<plugins::Communicator>(std::make_unique<Recorded>(events));
  };
  {
    nccl::NcclTrainer trainer(context(client, &s), info(), factory);
    EXPECT_THROW(trainer.send_weights({}), sdk::Error);
  }
  std::lock_guard<std::mutex> l(events.mu);
  const auto told = std::find(events.seen.begin(), events.seen.end(), "workers told");
  const auto gone = std::find(events.seen.begin(), events.seen.end(), "communicator destroyed");
  ASSERT_NE(told, events.seen.end());
  ASSERT_NE(gone, events.seen.end());
  EXPECT_LT(told, gone) << "the workers are told before the communicator goes";
  EXPECT_EQ(events.seen.front(), "communicator aborted") << "the round's group is aborted at once";
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

// A worker waits for the group no longer than its trainer does: the trainer's
// rendezvous_timeout_s bounds the receiver-side one, never raises it, and a value out of range is
// refused naming the field.
TEST(NcclWorkerSpy, WaitsForTheGroupNoLongerThanItsTrainer) {
  Spy spy;
  auto deadline = [&](json backend_options, json trainer_s) {
    json init = {
        {"master_address", "h"}, {"master_port", 1}, {"rank_offset", 1}, {"world_size", 2}};
    if (!trainer_s.is_null()) init["rendezvous_timeout_s"] = trainer_s;
    sdk::WorkerContext c;
    c.backend_options = std::move(backend_options);
    std::chrono::milliseconds seen{0};
    nccl::NcclWorker worker(c, init, [&](const plugins::CommunicatorOptions& o) {
      seen = o.rendezvous_timeout;
      return spy.factory()(o);
    });
    return seen.count();
  };
  EXPECT_EQ(deadline(json::object(), 2), 2000);
  EXPECT_EQ(deadline(json::object(), nullptr), 60000) << "an older trainer's info: the default";
  EXPECT_EQ(deadline({{"rendezvous_timeout_s", 5}}, 30), 5000);
  EXPECT_EQ(deadline({{"rendezvous_timeout_s", 30}}, 5), 5000);
  for (json bad : {json(0), json(86401), json("2")}) {
    try {
      deadline(json::object(), bad);
      ADD_FAILURE() << "took rendezvous_timeout_s " << bad.dump();
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(), HasSubstr("rendezvous_timeout_s")) << bad.dump();
    }
  }
}

// The same with a real group: a worker that cannot reach its trainer's store (nothing listens
// there) gives up at the trainer's 1 s, not at its own 60 s, so its init call answers while the
// trainer is still there to report it.
TEST(NcclWorker, ThatCannotReachTheStoreGivesUpAtTheTrainersDeadline) {
  json init = {{"master_address", "127.0.0.1"},
               {"master_port", test::free_port()},
               {"rank_offset", 1},
               {"world_size", 2},
               {"rank_keys", {{"1", std::string(64, 'd')}}},
               {"rendezvous_timeout_s", 1}};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    nccl::NcclWorker worker(worker_context(), init);
    FAIL() << "a worker joined a group nobody hosts";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("rendezvous of 2 ranks at 127.0.0.1:"));
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  std::cout << "a worker with no store to reach gave up after "
            << std::chrono::duration<double>(took).count() << " s (trainer's deadline 1 s)\n";
  EXPECT_LT(took, std::chrono::seconds(10));
}

// A host-memory worker takes its own rank key from rank_keys, and refuses an init info that holds
// another rank's key (whoever delivered it did not split it: every receiver could act as every
// other), holds none of its own, or holds one that is not a key; each error names the field.
TEST(NcclWorkerSpy, TakesItsOwnRankKeyAndRefusesOthersKeys) {
  Spy spy;
  const std::string mine(64, 'd'), theirs(64, 'e');
  json base = {{"master_address", "h"}, {"master_port", 1}, {"rank_offset", 2}, {"world_size", 4}};
  plugins::CommunicatorOptions seen;
  {
    json init = base;
    init["rank_keys"] = {{"2", mine}};
    nccl::NcclWorker worker(worker_context(), init, [&](const plugins::CommunicatorOptions& o) {
      seen = o;
      return spy.factory()(o);
    });
  }
  EXPECT_EQ(seen.rank_key, mine);
  EXPECT_EQ(seen.session_secret, "");
  auto refusal = [&](json keys) {
    json init = base;
    init["rank_keys"] = std::move(keys);
    try {
      nccl::NcclWorker worker(worker_context(), init, spy.factory());
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(refusal({{"2", mine}, {"3", theirs}}),
              HasSubstr("field 'rank_keys' holds the keys of 2 ranks, not only rank_offset 2's: "
                        "whatever delivered it did not split it per rank"));
  EXPECT_THAT(refusal({{"3", theirs}}),
              HasSubstr("field 'rank_keys' holds no key for rank_offset 2"));
  EXPECT_THAT(refusal({{"2", "short"}}), HasSubstr("field 'rank_keys' must be"));
  EXPECT_THAT(refusal(json::array()), HasSubstr("field 'rank_keys' must be an object"));
}

// A host's loader as a packed worker meets it: destinations for the first `offered` tensors,
// either back to back in one block (as the reference receiver stages them) or each apart; the
// rest arrive through load(). Records every call.
struct OfferingLoader {
  enum class Layout { back_to_back, apart };
  OfferingLoader(Layout layout, std::size_t offered, const std::vector<uint64_t>& sizes)
      : layout(layout), offered(offered) {
    uint64_t total = 0;
    for (auto n : sizes) total += n;
    block.resize(total + 64 * sizes.size());
  }
  Layout layout;
  std::size_t offered;
  std::vector<unsigned char> block;
  uint64_t used = 0;
  std::map<std::string, std::vector<unsigned char>> loaded;           // through load()
  std::map<std::string, std::pair<unsigned char*, uint64_t>> handed;  // destinations
  std::vector<std::string> written;
  std::vector<int64_t> shape_of_last;

  wt_loader c() {
    wt_loader l{};
    l.struct_size = sizeof(wt_loader);
    l.abi_version = WT_ABI_VERSION;
    l.ctx = this;
    l.load = [](void* ctx, const wt_tensor* t, size_t n, char*, size_t) {
      auto* self = static_cast<OfferingLoader*>(ctx);
      for (std::size_t i = 0; i < n; ++i) {
        uint64_t bytes = 0;
        checked_nbytes(t[i].tensor.shape, t[i].tensor.ndim, t[i].tensor.dtype, &bytes);
        const auto* p = static_cast<const unsigned char*>(t[i].tensor.data);
        self->loaded[t[i].name].assign(p, p + bytes);
      }
      return WT_OK;
    };
    l.destination = [](void* ctx, const wt_param_meta* m, DLTensor* out, int32_t* found, char*,
                       size_t) {
      auto* self = static_cast<OfferingLoader*>(ctx);
      *found = 0;
      if (self->handed.size() >= self->offered) return WT_OK;
      uint64_t bytes = 0;
      checked_nbytes(m->shape, m->ndim, m->dtype, &bytes);
      // Apart: a gap of 64 bytes after each, so that no two are adjacent.
      unsigned char* p = self->block.data() + self->used;
      self->used += bytes + (self->layout == Layout::apart ? 64 : 0);
      self->handed[m->name] = {p, bytes};
      *out =
          DLTensor{p, {kDLCPU, 0}, m->ndim, m->dtype, const_cast<int64_t*>(m->shape), nullptr, 0};
      *found = 1;
      return WT_OK;
    };
    l.written = [](void* ctx, const char* name, char*, size_t) {
      static_cast<OfferingLoader*>(ctx)->written.push_back(name);
      return WT_OK;
    };
    return l;
  }
  std::vector<unsigned char> bytes_of(const std::string& name) const {
    if (auto it = loaded.find(name); it != loaded.end()) return it->second;
    auto [p, n] = handed.at(name);
    return {p, p + n};
  }
};

// Five tensors of 40, 24, 100, 8 and 60 bytes in chunks of 64 bytes: [0,1] (64, not more: goes
// on), so [0,1,2] = 164, then [3,4] = 68.
struct PackedRound {
  std::vector<std::string> names{"a", "b", "c", "d", "e"};
  std::vector<uint64_t> sizes{40, 24, 100, 8, 60};
  std::vector<unsigned char> stream;
  json update;
  PackedRound() {
    json shapes = json::array();
    for (auto n : sizes) shapes.push_back({static_cast<int64_t>(n / 4)});
    update = {{"names", names},
              {"dtype_names", std::vector<std::string>(names.size(), "float32")},
              {"shapes", shapes}};
    for (std::size_t i = 0; i < 232; ++i) stream.push_back(static_cast<unsigned char>(i * 7 + 3));
  }
  std::vector<unsigned char> expected(std::size_t i) const {
    uint64_t off = 0;
    for (std::size_t k = 0; k < i; ++k) off += sizes[k];
    return {stream.begin() + static_cast<std::ptrdiff_t>(off),
            stream.begin() + static_cast<std::ptrdiff_t>(off + sizes[i])};
  }
};

// Every tensor of the round holds the bytes the sender sent for it, however it arrived.
void expect_every_tensor_as_sent(const OfferingLoader& loader, const PackedRound& round) {
  for (std::size_t i = 0; i < round.names.size(); ++i)
    EXPECT_EQ(loader.bytes_of(round.names[i]), round.expected(i)) << round.names[i];
}

std::unique_ptr<nccl::NcclWorker> packed_worker(const PackedRound& round,
                                                std::vector<const void*>& into) {
  auto w = std::make_unique<nccl::NcclWorker>(worker_context(),
                                              json{{"master_address", "h"},
                                                   {"master_port", 1},
                                                   {"rank_offset", 1},
                                                   {"world_size", 2},
                                                   {"packed", true},
                                                   {"packed_buffer_size_bytes", 64},
                                                   {"packed_num_buffers", 2}},
                                              [&](const plugins::CommunicatorOptions&) {
                                                return std::make_unique<test::FeedingCommunicator>(
                                                    round.stream, into);
                                              });
  w->start();
  return w;
}

TEST(NcclWorkerSpy, APackedChunkIsReceivedInPlaceWhenItsDestinationsLieBackToBack) {
  PackedRound round;
  std::vector<const void*> into;
  auto worker = packed_worker(round, into);
  OfferingLoader loader(OfferingLoader::Layout::back_to_back, 5, round.sizes);
  wt_loader c = loader.c();
  worker->receive(round.update, sdk::LoaderRef(&c));
  ASSERT_EQ(into.size(), 2u) << "two chunks, one broadcast each";
  EXPECT_EQ(into[0], loader.handed.at("a").first) << "chunk 1 lands on its first tensor";
  EXPECT_EQ(into[1], loader.handed.at("d").first) << "chunk 2 lands on its first tensor";
  EXPECT_EQ(worker->in_place_chunks(), 2u);
  EXPECT_THAT(loader.written, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_TRUE(loader.loaded.empty());
  expect_every_tensor_as_sent(loader, round);
}

TEST(NcclWorkerSpy, DestinationsApartAreFilledFromThePackedBuffer) {
  PackedRound round;
  std::vector<const void*> into;
  auto worker = packed_worker(round, into);
  OfferingLoader loader(OfferingLoader::Layout::apart, 5, round.sizes);
  wt_loader c = loader.c();
  worker->receive(round.update, sdk::LoaderRef(&c));
  ASSERT_EQ(into.size(), 2u);
  for (const void* p : into)
    for (const auto& [name, where] : loader.handed)
      EXPECT_NE(p, static_cast<const void*>(where.first)) << "no broadcast into " << name;
  EXPECT_EQ(worker->in_place_chunks(), 0u);
  EXPECT_THAT(loader.written, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_TRUE(loader.loaded.empty());
  expect_every_tensor_as_sent(loader, round);
}

TEST(NcclWorkerSpy, TensorsWithoutADestinationGoThroughLoad) {
  PackedRound round;
  std::vector<const void*> into;
  auto worker = packed_worker(round, into);
  // a and b get destinations (back to back), c does not: chunk 1 is received into the buffer;
  // chunk 2 asks again (d, e) and is offered nothing.
  OfferingLoader loader(OfferingLoader::Layout::back_to_back, 2, round.sizes);
  wt_loader c = loader.c();
  worker->receive(round.update, sdk::LoaderRef(&c));
  EXPECT_EQ(worker->in_place_chunks(), 0u);
  EXPECT_THAT(loader.written, ElementsAre("a", "b"));
  EXPECT_EQ(loader.loaded.size(), 3u);
  expect_every_tensor_as_sent(loader, round);
}

TEST(NcclWorkerSpy, AnUpdateTextSeenLastRoundIsReusedAndAChangedOneIsReadAgain) {
  PackedRound round;
  const std::string all = round.update.dump();
  json first_two = round.update;
  first_two["names"] = {"a", "b"};
  first_two["dtype_names"] = {"float32", "float32"};
  first_two["shapes"] = {{10}, {6}};
  // On the wire: the five tensors twice, then a and b alone (the first 64 bytes again).
  const std::vector<unsigned char> once = round.stream;
  round.stream.insert(round.stream.end(), once.begin(), once.end());
  round.stream.insert(round.stream.end(), once.begin(), once.begin() + 64);
  std::vector<const void*> into;
  auto worker = packed_worker(round, into);
  auto receive = [&](const std::string& text, std::size_t tensors) {
    OfferingLoader loader(OfferingLoader::Layout::back_to_back, 5, round.sizes);
    wt_loader c = loader.c();
    worker->receive_text(text.c_str(), sdk::LoaderRef(&c));
    worker->finish();
    worker->start();
    EXPECT_EQ(loader.written.size(), tensors);
    for (std::size_t i = 0; i < tensors; ++i)
      EXPECT_EQ(loader.bytes_of(round.names[i]), round.expected(i)) << round.names[i];
  };
  receive(all, 5);
  receive(all, 5);  // the same text: the list read last round
  receive(first_two.dump(), 2);
  // A malformed text after good ones is still parsed, and refused.
  OfferingLoader loader(OfferingLoader::Layout::back_to_back, 5, round.sizes);
  wt_loader c = loader.c();
  try {
    worker->receive_text(R"({"names": ["a"])", sdk::LoaderRef(&c));
    FAIL() << "a malformed update info was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("invalid update_info"));
  }
  EXPECT_TRUE(loader.written.empty());
}

// Round digests, on a worker fed a packed round of two chunks (164 and 68 bytes). The sender's
// digests are computed here with xxHash directly (XXH3-128, canonical byte order, the seed both
// ends derive from the session secret) over what the sender sent; the worker compares them with
// what it received, and finishes only a verified round.
struct DigestedRound {
  PackedRound round;
  std::vector<const void*> into;
  std::string secret = std::string(64, 'b');
  uint64_t seed = plugins::digest_seed(secret);
  std::unique_ptr<nccl::NcclWorker> worker;
  OfferingLoader loader{OfferingLoader::Layout::apart, 5, round.sizes};
  wt_loader c = loader.c();

  DigestedRound() {
    worker = std::make_unique<nccl::NcclWorker>(
        worker_context(),
        json{{"master_address", "h"},
             {"master_port", 1},
             {"rank_offset", 1},
             {"world_size", 2},
             {"packed", true},
             {"packed_buffer_size_bytes", 64},
             {"packed_num_buffers", 2},
             {"rank_keys", {{"1", std::string(64, 'c')}}},
             {"round_digests", "xxh3-128"},
             {"round_digests_seed", plugins::seed_hex(seed)}},
        [&](const plugins::CommunicatorOptions&) {
          return std::make_unique<test::FeedingCommunicator>(round.stream, into);
        });
    worker->start();
    worker->receive(round.update, sdk::LoaderRef(&c));
  }
  // The payload a sender of `sent` delivers, its broadcasts cut at `cuts` bytes.
  json payload(const std::vector<unsigned char>& sent, const std::vector<std::size_t>& cuts) {
    std::string bytes;
    std::size_t at = 0;
    for (std::size_t n : cuts) {
      XXH128_canonical_t c;
      XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(sent.data() + at, n, seed));
      bytes.append(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
      at += n;
    }
    return {{"round_digests", sdk::base64_encode(bytes.data(), bytes.size())}};
  }
  std::string refusal(const json& digests) {
    try {
      worker->receive(digests, sdk::LoaderRef(&c));
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_REMOTE);
      return e.what();
    }
    return "";
  }
};

TEST(NcclWorkerDigests, ARoundThatArrivedAsSentIsVerifiedAndFinishes) {
  DigestedRound r;
  EXPECT_EQ(r.refusal(r.payload(r.round.stream, {164, 68})), "");
  EXPECT_NO_THROW(r.worker->finish());
  expect_every_tensor_as_sent(r.loader, r.round);
}

TEST(NcclWorkerDigests, BytesAlteredOnTheWayAreRefusedNamingTheChunkAndItsTensors) {
  DigestedRound r;
  std::vector<unsigned char> sent = r.round.stream;
  sent[200] ^= 1;  // what the sender sent for 'e'; the relay passed on something else
  EXPECT_THAT(r.refusal(r.payload(sent, {164, 68})),
              HasSubstr("the bytes of the broadcast of packed chunk 2 of 2 ('d' to 'e') differ "
                        "from what the trainer sent (digest 2 of 2 does not match)"));
  EXPECT_THROW(r.worker->finish(), sdk::Error) << "a refused round never finishes";
}

TEST(NcclWorkerDigests, ABroadcastTheSenderNeverMadeIsRefused) {
  DigestedRound r;
  EXPECT_THAT(r.refusal(r.payload(r.round.stream, {164})),
              HasSubstr("the trainer sent 1 broadcast(s) this round, 2 arrived here (the first "
                        "extra: the broadcast of packed chunk 2 of 2 ('d' to 'e'))"));
}

TEST(NcclWorkerDigests, ARoundWhoseDigestsNeverCameDoesNotFinish) {
  DigestedRound r;
  try {
    r.worker->finish();
    FAIL() << "finished without digests";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("the round's digests never arrived"));
  }
  // The session ended all the same: the next round starts.
  EXPECT_NO_THROW(r.worker->start());
}

TEST(NcclWorkerDigests, MalformedOrRepeatedDigestsAreRefused) {
  DigestedRound r;
  try {
    r.worker->receive(json{{"round_digests", "AAAA"}}, sdk::LoaderRef(&r.c));
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("3 bytes is not a whole number of 16-byte digests"));
  }
  try {
    r.worker->receive(json{{"round_digests", ""}, {"extra", 1}}, sdk::LoaderRef(&r.c));
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("extra"));
  }
  EXPECT_EQ(r.refusal(r.payload(r.round.stream, {164, 68})), "");
  try {
    r.worker->receive(r.payload(r.round.stream, {164, 68}), sdk::LoaderRef(&r.c));
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_STATE);
    EXPECT_THAT(e.what(), HasSubstr("the round's digests arrived twice"));
  }
}

// A broadcast above 4 MiB is digested as the digest of its blocks' digests (so that both ends hash
// on several threads); computed here by hand with xxHash for a 9 MiB + 1 buffer, on 1 and 3
// threads alike, and one changed byte in the last block changes it.
TEST(RoundDigests, ALargeBroadcastIsTheDigestOfItsBlocksDigests) {
  const std::size_t block = std::size_t{4} << 20, n = 9 * (std::size_t{1} << 20) + 1;
  std::vector<unsigned char> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  const uint64_t seed = 0x1234;
  std::string parts;
  for (std::size_t at = 0; at < n; at += block) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(
        &c, XXH3_128bits_withSeed(data.data() + at, std::min(block, n - at), seed));
    parts.append(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
  }
  XXH128_canonical_t whole;
  XXH128_canonicalFromHash(&whole, XXH3_128bits_withSeed(parts.data(), parts.size(), seed + n));
  plugins::Digest expected;
  std::memcpy(expected.data(), whole.digest, expected.size());
  EXPECT_EQ(plugins::digest_of(data.data(), n, seed, 1), expected);
  EXPECT_EQ(plugins::digest_of(data.data(), n, seed, 3), expected);
  data[n - 1] ^= 0x80;
  EXPECT_NE(plugins::digest_of(data.data(), n, seed, 3), expected);
}

// A receiver hashes what arrived while its next chunk arrives (DigestedDomain::broadcast_then), so
// the pipeline hands a slot back only once its digest is computed: 12 chunks of 16 MiB through two
// slots, each chunk's bytes its own, give each chunk's digest, in broadcast order. A slot handed
// back early would be written by the next broadcast while its digest was computed.
TEST(RoundDigests, AReceiversDigestsFollowItsBroadcastsWhileTheSlotsAreReused) {
  // Writes chunk k's bytes (every byte k + 1) into the slot it is given.
  class Writing final : public plugins::Communicator {
   public:
    void broadcast(void* data, std::size_t bytes, DLDataType, int, const std::string&) override {
      std::memset(data, static_cast<int>(++k_), bytes);
    }
    void abort() override {}
    bool broken() const override { return false; }

   private:
    unsigned k_ = 0;
  };
  const std::size_t n = std::size_t{16} << 20, chunks = 12;
  const uint64_t seed = 99;
  plugins::DigestedDomain domain(std::make_unique<Writing>(), false, seed);
  std::vector<unsigned char> slots[2] = {std::vector<unsigned char>(n),
                                         std::vector<unsigned char>(n)};
  {
    plugins::BroadcastPipeline pipeline(domain, 2);
    for (std::size_t c = 0; c < chunks; ++c) {
      if (c >= 2) pipeline.wait(c % 2);
      pipeline.submit(c % 2, slots[c % 2].data(), n, {kDLUInt, 8, 1}, "chunk " + std::to_string(c));
    }
    pipeline.drain();
  }
  const auto got = domain.take_digests();
  ASSERT_EQ(got.size(), chunks);
  std::vector<unsigned char> expected(n);
  for (std::size_t c = 0; c < chunks; ++c) {
    std::memset(expected.data(), static_cast<int>(c + 1), n);
    EXPECT_EQ(got[c].what, "chunk " + std::to_string(c));
    EXPECT_EQ(got[c].digest, plugins::digest_of(expected.data(), n, seed, 1)) << c;
  }
}

}  // namespace
}  // namespace wt
