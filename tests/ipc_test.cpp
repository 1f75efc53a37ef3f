// The ipc backend in one process: exact control-plane payloads, byte-exact sync through the
// in-process client, strict update_info validation, and shared-memory hygiene.
#include <wt/checksum.hpp>
#include <wt/dtype.hpp>
#include <wt/sdk/parallel_copy.hpp>
#include <wt/services/receiver.hpp>
#include <wt/wt.hpp>

#include "support/model.hpp"
#include "support/recording_client.hpp"
#include "support/shm.hpp"
#include "support/shm_file_source.hpp"
#include "support/vector_source.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <tuple>

using nlohmann::json;
using ::testing::HasSubstr;

namespace wt {
namespace {

constexpr DLDataType kF32{kDLFloat, 32, 1}, kBF16{kDLBfloat, 16, 1}, kF16{kDLFloat, 16, 1},
    kI64{kDLInt, 64, 1};

InitInfo ipc_info(int rank, bool packed, int64_t buffer = 1 << 20, int buffers = 2) {
  return InitInfo::from_object({{"backend", "ipc"},
                                {"rank", rank},
                                {"packed", packed},
                                {"packed_buffer_size_bytes", buffer},
                                {"packed_num_buffers", buffers}});
}

void expect_same_bytes(test::VectorSource& s, const Receiver& r) {
  ASSERT_EQ(r.names().size(), s.tensors().size());
  for (auto& t : s.tensors()) {
    auto got = r.bytes_of(t.name);
    ASSERT_TRUE(got.has_value()) << t.name;
    ASSERT_EQ(*got, t.bytes) << t.name;
  }
}

std::string receiver_error(Receiver& r, const json& update) {
  try {
    r.update_weights(update);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IpcTrainer, RequiresAWeightSource) {
  test::RecordingClient client;
  try {
    trainer_init(ipc_info(0, false), client, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("requires a weight source"));
  }
  EXPECT_TRUE(client.calls().empty());
}

TEST(IpcTrainer, InitInfoRangesAreCheckedAndNamed) {
  test::RecordingClient client;
  test::VectorSource source;
  source.add("w", kF32, {4}, 1);
  for (auto [key, value, part] :
       {std::tuple<const char*, int, const char*>{"copy_threads", -1, "'copy_threads' must be in"},
        {"packed_num_buffers", 0, "'packed_num_buffers' must be in 1..64"},
        {"packed_buffer_size_bytes", 0, "'packed_buffer_size_bytes' must be > 0"}}) {
    json fields = {{"backend", "ipc"}, {"rank", 0}, {"packed", true}, {key, value}};
    try {
      trainer_init(InitInfo::from_object(fields), client, &source);
      ADD_FAILURE() << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  }
  EXPECT_TRUE(client.calls().empty());
}

TEST(IpcTrainer, InitShipsExactlyPackedToTheWorker) {
  for (bool packed : {false, true}) {
    test::RecordingClient client;
    test::VectorSource source;
    auto engine = trainer_init(ipc_info(0, packed), client, &source);
    auto calls = client.calls();
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].method, "init");
    // Packed tensors are 256-byte aligned by default, which the worker must know.
    json expected = {{"packed", packed}};
    if (packed) expected["packed_alignment"] = 256;
    EXPECT_EQ(json::parse(calls[0].payload), expected);
  }
}

TEST(IpcTrainer, PackedAlignmentOneShipsVllmsPayloadExactly) {
  test::RecordingClient client;
  test::VectorSource source;
  auto info = InitInfo::from_object(
      {{"backend", "ipc"}, {"rank", 0}, {"packed", true}, {"packed_alignment", 1}});
  auto engine = trainer_init(info, client, &source);
  EXPECT_EQ(json::parse(client.calls()[0].payload), json({{"packed", true}}));
}

// A client that drives an ipc worker engine in this process with a plain load callback, so the
// test sees the addresses the worker hands out (the reference receiver would take destinations).
struct WorkerClient : Client {
  std::unique_ptr<WorkerEngine> worker;
  std::map<std::string, std::vector<unsigned char>> got;
  std::vector<uintptr_t> addresses;
  void init_weight_transfer_engine(std::string_view j) override {
    worker = WorkerEngine::create("ipc", j);
  }
  void start_weight_update() override { worker->start(); }
  void update_weights(std::string_view j) override {
    worker->receive(j, [&](std::span<const wt_tensor> ts) {
      for (const auto& t : ts) {
        const auto* p = static_cast<const unsigned char*>(t.tensor.data) + t.tensor.byte_offset;
        addresses.push_back(reinterpret_cast<uintptr_t>(p));
        uint64_t n = 0;
        checked_nbytes(t.tensor.shape, t.tensor.ndim, t.tensor.dtype, &n);
        got[t.name].assign(p, p + n);
      }
    });
  }
  void finish_weight_update(const std::optional<std::string>&) override { worker->finish(); }
};

TEST(IpcTrainer, PackedTensorsArriveAlignedAndByteExact) {
  for (int64_t alignment : {256, 1}) {
    WorkerClient client;
    test::VectorSource source;
    source.add("a", kBF16, {3}, 1);  // 6 bytes: the next tensor would sit at +6 back to back
    source.add("b", kF32, {5}, 2);
    source.add("c", kBF16, {7}, 3);
    auto info = InitInfo::from_object({{"backend", "ipc"},
                                       {"rank", 0},
                                       {"packed", true},
                                       {"packed_buffer_size_bytes", 4096},
                                       {"packed_alignment", alignment}});
    auto engine = trainer_init(info, client, &source);
    engine->send_weights();
    for (auto& t : source.tensors()) EXPECT_EQ(client.got[t.name], t.bytes) << t.name;
    ASSERT_EQ(client.addresses.size(), 3u);
    if (alignment == 256)
      for (auto a : client.addresses) EXPECT_EQ(a % 256, 0u);
    else
      EXPECT_EQ(client.addresses[1] - client.addresses[0], 6u) << "vLLM's layout: back to back";
  }
}

TEST(IpcTrainer, PackedAlignmentMustBeAPowerOfTwo) {
  test::RecordingClient client;
  test::VectorSource source;
  auto info = InitInfo::from_object(
      {{"backend", "ipc"}, {"rank", 0}, {"packed", true}, {"packed_alignment", 100}});
  try {
    trainer_init(info, client, &source);
    FAIL();
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "packed_alignment");
    EXPECT_THAT(e.what(), HasSubstr("must be a power of two in 1..4096"));
  }
}

TEST(IpcTrainer, NonSenderMakesNoRpc) {
  test::RecordingClient client;
  test::VectorSource source;
  test::fill_model(source, 2);
  auto engine = trainer_init(ipc_info(1, false), client, &source);
  engine->send_weights();
  EXPECT_TRUE(client.calls().empty());
  EXPECT_EQ(source.passes(), 1) << "non-senders still iterate their source";
}

TEST(IpcTrainer, UnpackedRoundIsStartOneUpdateFinish) {
  test::RecordingClient client;
  test::VectorSource source;
  source.add("a", kF32, {2, 3}, 1);
  source.add("b", kBF16, {4}, 2);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  SendOptions opts;
  opts.weight_version = "step-1";
  engine->send_weights(opts);
  auto calls = client.calls();
  ASSERT_EQ(client.methods(), (std::vector<std::string>{"init", "start", "update", "finish"}));
  auto u = json::parse(calls[2].payload);
  EXPECT_EQ(u["names"], json({"a", "b"}));
  EXPECT_EQ(u["dtype_names"], json({"float32", "bfloat16"}));
  EXPECT_EQ(u["shapes"], json({{2, 3}, {4}}));
  ASSERT_EQ(u["ipc_handles"].size(), 2u);
  auto h = u["ipc_handles"][0]["cpu"];
  EXPECT_EQ(h["kind"], "shm");
  EXPECT_EQ(h["size"], 24);
  EXPECT_EQ(h["offset"], 0);
  EXPECT_THAT(h["name"].get<std::string>(), HasSubstr("/wt-" + std::to_string(getpid()) + "-"));
  EXPECT_FALSE(u.contains("packed"));
  EXPECT_FALSE(u.contains("tensor_sizes"));
  EXPECT_EQ(calls[3].payload, "step-1");
}

TEST(IpcTrainer, PackedRoundIsOneUpdatePerBufferInsideOneBracket) {
  test::RecordingClient client;
  test::VectorSource source;
  for (int i = 0; i < 10; ++i) source.add("t" + std::to_string(i), kF32, {100}, i);  // 400 B each
  auto engine = trainer_init(ipc_info(0, true, 1000), client, &source);              // 2 per buffer
  engine->send_weights();
  EXPECT_EQ(client.methods(), (std::vector<std::string>{"init", "start", "update", "update",
                                                        "update", "update", "update", "finish"}));
  std::set<std::string> segments;
  for (auto& c : client.calls()) {
    if (c.method != "update") continue;
    auto u = json::parse(c.payload);
    EXPECT_EQ(u["tensor_sizes"], json({400, 400}));
    EXPECT_TRUE(u["ipc_handles"].is_object());
    EXPECT_EQ(u["ipc_handles"]["cpu"]["size"], 1000);
    segments.insert(u["ipc_handles"]["cpu"]["name"]);
  }
  EXPECT_EQ(segments.size(), 2u) << "two buffers in rotation";
}

// A model smaller than one buffer gets one buffer of its own packed size (page-rounded), not
// packed_num_buffers of packed_buffer_size_bytes: a 1 MiB model used to map 1 GiB at init.
TEST(IpcTrainer, PackedBuffersAreSizedToAModelSmallerThanOne) {
  test::RecordingClient client;
  test::VectorSource source;
  for (int i = 0; i < 4; ++i) source.add("t" + std::to_string(i), kF32, {65536}, i);  // 256 KiB
  source.add("odd", kF32, {3}, 9);                                                    // 12 B
  auto engine = trainer_init(
      InitInfo::from_object({{"backend", "ipc"}, {"rank", 0}, {"packed", true}}), client, &source);
  for (int round = 0; round < 2; ++round) engine->send_weights();
  int updates = 0;
  for (auto& c : client.calls()) {
    if (c.method != "update") continue;
    ++updates;
    const auto u = json::parse(c.payload);
    EXPECT_EQ(u["ipc_handles"]["cpu"]["size"], (4 << 18) + 4096) << "4 x 256 KiB, then 12 B "
                                                                    "aligned, page-rounded";
  }
  EXPECT_EQ(updates, 2) << "one buffer per round";
}

TEST(IpcTrainer, TensorLargerThanTheBufferNamesItAndBothSizes) {
  Receiver receiver("ipc");
  InProcessClient client(receiver);
  test::VectorSource source;
  source.add("small", kF32, {10}, 1);
  source.add("model.huge.weight", kF32, {1000}, 2);
  auto engine = trainer_init(ipc_info(0, true, 1024), client, &source);
  try {
    engine->send_weights();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("'model.huge.weight' has 4000 bytes"));
    EXPECT_THAT(e.what(), HasSubstr("packed_buffer_size_bytes=1024"));
  }
  EXPECT_FALSE(receiver.session_active()) << "the abandoned round must not leave a session open";
  EXPECT_TRUE(receiver.names().empty()) << "nothing of the failed round may be committed";
  EXPECT_TRUE(test::wt_segments_of().empty());
}

class IpcSync : public ::testing::TestWithParam<bool> {};

TEST_P(IpcSync, ByteExactOverSeveralRoundsAndNoSegmentLeft) {
  const bool packed = GetParam();
  Receiver receiver("ipc");
  InProcessClient client(receiver);
  test::VectorSource source;
  test::fill_model(source);
  ASSERT_GE(source.tensors().size(), 200u);
  auto engine = trainer_init(ipc_info(0, packed, 64 << 10, 2), client, &source);
  for (int round = 0; round < 4; ++round) {
    SendOptions opts;
    opts.weight_version = "step-" + std::to_string(round);
    engine->send_weights(opts);
    expect_same_bytes(source, receiver);
    EXPECT_EQ(receiver.weight_version(), "step-" + std::to_string(round));
    EXPECT_TRUE(test::wt_segments_of().empty()) << "segments stay linked after round " << round;
    source.perturb(round);
  }
  EXPECT_EQ(source.ends(), 4);
  // Every tensor of every round went through the loader's destination path: the worker copied it
  // out of shared memory straight into the receiver's staging memory.
  EXPECT_EQ(receiver.tensors_written_in_place(), 4 * source.tensors().size());
}

// Receiver-side backend options (wt serve --weight-transfer-config's keys besides "backend")
// reach the ipc worker, which reads them as strictly as an init info.
TEST(IpcWorkerOptions, BackendOptionsAreReadStrictly) {
  Receiver::Options o;
  o.backend = "ipc";
  o.backend_options = {{"copy_threads", 3}};
  Receiver receiver(o);
  InProcessClient client(receiver);
  test::VectorSource source;
  test::fill_model(source, 2);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  engine->send_weights();
  expect_same_bytes(source, receiver);

  o.backend_options = {{"copy_thread", 3}};
  Receiver strict(o);
  try {
    strict.init_weight_transfer_engine(json::object());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("unknown field 'copy_thread'"));
  }
}

INSTANTIATE_TEST_SUITE_P(PackedAndUnpacked, IpcSync, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Packed" : "Unpacked"; });

// Batches above 32 MiB are copied by several threads on both sides; odd tensor sizes put the
// threads' boundaries inside tensors.
TEST(IpcSync, ManyThreadCopiesOnBothSidesAreByteExact) {
  Receiver::Options ro;
  ro.backend = "ipc";
  ro.load_threads = 3;
  Receiver receiver(ro);
  InProcessClient client(receiver);
  test::VectorSource source;
  for (int i = 0; i < 6; ++i) source.add("w" + std::to_string(i), kBF16, {1531, 1999 + i}, i);
  for (bool packed : {false, true}) {
    json fields = {{"backend", "ipc"},
                   {"rank", 0},
                   {"packed", packed},
                   {"packed_buffer_size_bytes", 48 << 20},
                   {"copy_threads", 3}};
    auto engine = trainer_init(InitInfo::from_object(fields), client, &source);
    for (int round = 0; round < 2; ++round) {
      engine->send_weights();
      expect_same_bytes(source, receiver);
      source.perturb(static_cast<uint32_t>(round + (packed ? 10 : 0)));
    }
  }
}

TEST(IpcSync, StridedHostTensorArrivesContiguous) {
  Receiver receiver("ipc");
  InProcessClient client(receiver);
  struct Transposed : test::VectorSource {
    std::vector<float> data{1, 2, 3, 4, 5, 6};  // 2x3 row-major; sent as its 3x2 transpose
    std::vector<int64_t> shape{3, 2}, strides{1, 3};
    std::vector<ParamMeta> meta{{"t", kF32, {3, 2}}};
    const std::vector<ParamMeta>& metadata() override { return meta; }
    int i = 0;
    void begin() override { i = 0; }
    bool next(wt_tensor& out) override {
      if (i++) return false;
      out.name = "t";
      out.tensor = DLTensor{data.data(), {kDLCPU, 0}, 2, kF32, shape.data(), strides.data(), 0};
      return true;
    }
  } source;
  for (bool packed : {false, true}) {
    auto engine = trainer_init(ipc_info(0, packed), client, &source);
    engine->send_weights();
    auto got = receiver.bytes_of("t");
    ASSERT_TRUE(got);
    std::vector<float> f(6);
    std::memcpy(f.data(), got->data(), 24);
    EXPECT_EQ(f, (std::vector<float>{1, 4, 2, 5, 3, 6}));
    // The trainer-side checksum of the strided view matches what the receiver holds.
    wt_tensor view{};
    source.begin();
    ASSERT_TRUE(source.next(view));
    EXPECT_EQ(checksum_tensor(view.tensor), receiver.checksums().at("t"));
  }
}

// ---- the worker's strict parsing: every malformed update is rejected and changes nothing ----

class IpcMalformed : public ::testing::Test {
 protected:
  void SetUp() override {
    source_.add("w", kF32, {4}, 1);
    source_.add("b", kBF16, {2, 2}, 2);
    // The first round goes through for real, so the worker holds the trainer's segments.
    engine_ = trainer_init(ipc_info(0, false), recorder_, &source_);
    SendOptions v1;
    v1.weight_version = "v1";
    engine_->send_weights(v1);
    good_ = json::parse(recorder_.calls()[2].payload);
    before_ = receiver_.checksums();
    ASSERT_EQ(before_.size(), 2u);
  }
  // Sends `bad` in a fresh session and expects it refused with `part`, weights unchanged.
  void expect_rejected(const json& bad, const std::string& part) {
    receiver_.start_weight_update();
    std::string err = receiver_error(receiver_, bad);
    EXPECT_THAT(err, HasSubstr(part)) << bad.dump();
    EXPECT_FALSE(receiver_.session_active()) << "a failed update ends the session";
    EXPECT_EQ(receiver_.checksums(), before_);
    EXPECT_EQ(receiver_.weight_version(), "v1");
  }
  Receiver receiver_{"ipc"};
  InProcessClient inproc_{receiver_};
  test::RecordingClient recorder_{&inproc_};
  test::VectorSource source_;
  std::unique_ptr<TrainerEngine> engine_;
  json good_;
  std::map<std::string, std::string> before_;
};

TEST_F(IpcMalformed, MismatchedListLengths) {
  auto u = good_;
  u["dtype_names"].push_back("float32");
  expect_rejected(u, "'dtype_names' has 3 entries but 'names' has 2");
  u = good_;
  u["shapes"].erase(1);
  expect_rejected(u, "'shapes' has 1 entries but 'names' has 2");
  u = good_;
  u["ipc_handles"].erase(0);
  expect_rejected(u, "'ipc_handles' has 1 entries but 'names' has 2");
}

TEST_F(IpcMalformed, UnknownKey) {
  auto u = good_;
  u["packed"] = false;
  expect_rejected(u, "unknown field 'packed'");
}

TEST_F(IpcMalformed, MissingHandles) {
  auto u = good_;
  u.erase("ipc_handles");
  expect_rejected(u, "missing field 'ipc_handles'");
}

TEST_F(IpcMalformed, PickledHandlesAreRefused) {
  auto u = good_;
  u.erase("ipc_handles");
  u["ipc_handles_pickled"] = "gASVAAAAAAAAAAB9lC4=";
  expect_rejected(u, "'ipc_handles_pickled' is refused");
}

TEST_F(IpcMalformed, SizeThatDoesNotMatchTheShape) {
  auto u = good_;
  u["shapes"][0] = json({4, 4});  // 64 bytes claimed from a 16-byte segment
  expect_rejected(u, "64 bytes at offset 0 do not fit in a 16-byte shm allocation");
}

TEST_F(IpcMalformed, UnknownDtype) {
  auto u = good_;
  u["dtype_names"][1] = "float8_e4m3";
  expect_rejected(u, "'dtype_names[1]' is 'float8_e4m3'");
}

TEST_F(IpcMalformed, WrongTypes) {
  auto u = good_;
  u["shapes"][0] = json({"4"});
  expect_rejected(u, "'shapes[0][0]' must be an integer");
  u = good_;
  u["names"] = "w";
  expect_rejected(u, "field 'names' must be a list of strings");
}

TEST_F(IpcMalformed, DuplicateName) {
  auto u = good_;
  u["names"][1] = "w";
  expect_rejected(u, "lists 'w' twice");
}

TEST_F(IpcMalformed, HandleForAnotherDeviceListsTheKeysPresent) {
  auto u = good_;
  u["ipc_handles"][1] =
      json{{"GPU-00000000-0000-0000-0000-000000000000", u["ipc_handles"][1]["cpu"]}};
  expect_rejected(u,
                  "IPC handle not found for cpu in ipc_handles[1] ('b'). Available: "
                  "[GPU-00000000-0000-0000-0000-000000000000]");
}

TEST_F(IpcMalformed, PackedFormWhenTheTrainerSaidUnpacked) {
  auto u = good_;
  u["ipc_handles"] = u["ipc_handles"][0];
  expect_rejected(
      u, "must be a list with one object per tensor because the trainer initialised packed=false");
  u = good_;
  u["tensor_sizes"] = json({16, 8});
  expect_rejected(u, "'tensor_sizes' is only for packed updates");
}

TEST_F(IpcMalformed, SegmentThatDoesNotExist) {
  auto u = good_;
  u["ipc_handles"][1]["cpu"]["name"] = "/wt-1-1-00000000000000000000000000000000";
  expect_rejected(u, "does not exist");
}

TEST_F(IpcMalformed, NotAWtSegmentName) {
  auto u = good_;
  u["ipc_handles"][0]["cpu"]["name"] = "/../etc/passwd";
  expect_rejected(u, "is not a shared-memory segment name");
}

TEST_F(IpcMalformed, BadHandleFields) {
  auto u = good_;
  u["ipc_handles"][0]["cpu"]["kind"] = "tcp";
  expect_rejected(u, "field 'kind' is 'tcp'");
  u = good_;
  u["ipc_handles"][0]["cpu"]["offset"] = 8;
  expect_rejected(u, "16 bytes at offset 8 do not fit");
  u = good_;
  u["ipc_handles"][0]["cpu"]["extra"] = 1;
  expect_rejected(u, "unknown field 'extra'");
}

TEST_F(IpcMalformed, ValidUpdateStillWorksAfterRejections) {
  expect_rejected(json{{"names", json::array()}}, "missing field 'dtype_names'");
  receiver_.start_weight_update();
  receiver_.update_weights(good_);
  receiver_.finish_weight_update(std::string("v2"));
  EXPECT_EQ(receiver_.checksums(), before_);
  EXPECT_EQ(receiver_.weight_version(), "v2");
}

TEST(IpcPackedMalformed, TensorSizesMustMatchShapes) {
  Receiver receiver("ipc");
  InProcessClient inproc(receiver);
  test::RecordingClient recorder(&inproc);
  test::VectorSource source;
  source.add("w", kF32, {4}, 1);
  auto engine = trainer_init(ipc_info(0, true), recorder, &source);
  engine->send_weights();
  auto good = json::parse(recorder.calls()[2].payload);
  auto before = receiver.checksums();
  for (auto [field, value, part] : std::vector<std::tuple<std::string, json, std::string>>{
           {"tensor_sizes", json({15}),
            "'tensor_sizes[0]' is 15 bytes, but 'w' is float32 [4] = 16 bytes"},
           {"tensor_sizes", json(nullptr), "missing field 'tensor_sizes' (required when packed)"},
           {"ipc_handles", json::array(), "must be one object (the buffer's handles)"}}) {
    auto u = good;
    u[field] = value;
    receiver.start_weight_update();
    EXPECT_THAT(receiver_error(receiver, u), HasSubstr(part));
  }
  EXPECT_EQ(receiver.checksums(), before);
}

TEST(IpcSession, SecondStartBeforeFinishIsRefused) {
  Receiver receiver("ipc");
  receiver.init_weight_transfer_engine(json{{"packed", false}});
  receiver.start_weight_update();
  try {
    receiver.start_weight_update();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_STATE);
    EXPECT_THAT(e.what(), HasSubstr("already active. Call finish_weight_update first."));
  }
}

TEST(IpcSession, FailedRoundLeavesTheCommittedWeightsAndVersion) {
  Receiver receiver("ipc");
  InProcessClient client(receiver);
  test::VectorSource source;
  test::fill_model(source, 3);
  auto engine = trainer_init(ipc_info(0, true, 128 << 10), client, &source);
  SendOptions v1;
  v1.weight_version = "v1";
  engine->send_weights(v1);
  auto before = receiver.checksums();
  // The next round fails in the middle: the source throws after some buffers went out.
  struct Failing : WeightSource {
    test::VectorSource& inner;
    int n = 0;
    explicit Failing(test::VectorSource& s) : inner(s) {}
    const std::vector<ParamMeta>& metadata() override { return inner.metadata(); }
    void begin() override { n = 0, inner.begin(); }
    bool next(wt_tensor& out) override {
      if (++n == 12) throw Error(WT_ERR_SYSTEM, "disk read failed");
      return inner.next(out);
    }
    void end() override { inner.end(); }
  } failing(source);
  source.perturb(9);
  auto engine2 = trainer_init(ipc_info(0, true, 128 << 10), client, &failing);
  SendOptions v2;
  v2.weight_version = "v2";
  EXPECT_THROW(engine2->send_weights(v2), Error);
  EXPECT_FALSE(receiver.session_active());
  EXPECT_EQ(receiver.checksums(), before);
  EXPECT_EQ(receiver.weight_version(), "v1");
  EXPECT_TRUE(test::wt_segments_of().empty());
  engine->send_weights(v2);  // and the next good round goes through
  expect_same_bytes(source, receiver);
}

TEST(IpcTrainer, AbortMakesTheNextRoundFailWithAborted) {
  test::RecordingClient client;
  test::VectorSource source;
  source.add("w", kF32, {4}, 1);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  engine->abort();
  try {
    engine->send_weights();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_ABORTED);
  }
}

// ---- host tensors that already live in /dev/shm are exported in place ----

TEST(IpcInPlace, TensorsInADevShmFileAreNamedByThatFileAndNotCopied) {
  Receiver receiver("ipc");
  InProcessClient inproc(receiver);
  test::RecordingClient client(&inproc);
  test::VectorSource host;
  test::fill_model(host);
  test::ShmFileSource source(host);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  for (int round = 0; round < 3; ++round) {
    engine->send_weights();
    expect_same_bytes(host, receiver);
    EXPECT_THAT(test::wt_segments_of(), ::testing::ElementsAre(source.name().substr(1)))
        << "no segment but the source's own";
    host.perturb(static_cast<uint32_t>(round));
  }
  auto u = json::parse(client.calls()[2].payload);
  ASSERT_EQ(u["ipc_handles"].size(), host.tensors().size());
  for (std::size_t i = 0; i < host.tensors().size(); ++i) {
    const auto& h = u["ipc_handles"][i]["cpu"];
    EXPECT_EQ(h["name"], source.name()) << i;
    EXPECT_EQ(h["offset"], source.offset_of(i)) << i;
    EXPECT_EQ(h["size"], source.file_size()) << i;
  }
}

TEST(IpcInPlace, AFileReplacedUnderTheSameNameIsMappedAfresh) {
  Receiver receiver("ipc");
  InProcessClient client(receiver);
  test::VectorSource host;
  host.add("w", kF32, {1024}, 1);
  test::ShmFileSource source(host);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  engine->send_weights();
  expect_same_bytes(host, receiver);
  // The worker still maps the old file; the name now means a new one with other bytes.
  source.replace_file();
  host.perturb(7);
  engine->send_weights();
  expect_same_bytes(host, receiver);
}

TEST(IpcInPlace, StridedOrPackedTensorsInDevShmAreStillCopied) {
  test::VectorSource host;
  host.add("w", kF32, {4, 4}, 1);
  test::ShmFileSource shm(host);
  struct Transposed : WeightSource {
    explicit Transposed(WeightSource& s) : inner(s) {}
    WeightSource& inner;
    std::vector<int64_t> strides{1, 4};
    const std::vector<ParamMeta>& metadata() override { return inner.metadata(); }
    void begin() override { inner.begin(); }
    bool next(wt_tensor& out) override {
      if (!inner.next(out)) return false;
      out.tensor.strides = strides.data();
      return true;
    }
    void end() override { inner.end(); }
  } strided(shm);
  for (auto [source, packed] : {std::pair<WeightSource*, bool>{&strided, false}, {&shm, true}}) {
    test::RecordingClient client;
    auto engine = trainer_init(ipc_info(0, packed), client, source);
    engine->send_weights();
    auto u = json::parse(client.calls()[2].payload);
    const auto& h = packed ? u["ipc_handles"]["cpu"] : u["ipc_handles"][0]["cpu"];
    EXPECT_THAT(h["name"].get<std::string>(), HasSubstr("/wt-" + std::to_string(getpid()) + "-"))
        << (packed ? "packed" : "strided");
    EXPECT_NE(h["name"], shm.name()) << (packed ? "packed" : "strided");
  }
}

// The worker maps only wt segments, so a tensor in any other /dev/shm file (another program's
// shared memory) is copied into a wt segment, not exported in place.
TEST(IpcInPlace, TensorsInAFileThatIsNotAWtSegmentAreCopied) {
  Receiver receiver("ipc");
  InProcessClient inproc(receiver);
  test::RecordingClient client(&inproc);
  test::VectorSource host;
  test::fill_model(host, 2);
  test::ShmFileSource source(host, test::ShmFileSource::File::foreign);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  for (int round = 0; round < 2; ++round) {
    engine->send_weights();
    expect_same_bytes(host, receiver);
    host.perturb(static_cast<uint32_t>(round));
  }
  auto u = json::parse(client.calls()[2].payload);
  ASSERT_EQ(u["ipc_handles"].size(), host.tensors().size());
  for (std::size_t i = 0; i < host.tensors().size(); ++i) {
    auto name = u["ipc_handles"][i]["cpu"]["name"].get<std::string>();
    EXPECT_NE(name, source.name()) << i;
    EXPECT_TRUE(shm::is_segment_name(name)) << name;
  }
  EXPECT_TRUE(test::wt_segments_of().empty());
}

TEST(IpcInPlace, AnUpdateNamingBytesPastTheEndOfAShrunkFileIsRefusedNotFaulted) {
  Receiver receiver("ipc");
  InProcessClient inproc(receiver);
  test::RecordingClient client(&inproc);
  test::VectorSource host;
  host.add("a", kF32, {1024}, 1);
  host.add("b", kF32, {65536}, 2);
  test::ShmFileSource source(host);
  auto engine = trainer_init(ipc_info(0, false), client, &source);
  engine->send_weights();  // the worker now maps the whole file
  auto stale = json::parse(client.calls()[2].payload);
  auto before = receiver.checksums();
  // The owner shrinks its file; an update still naming 'b' past the new end must not make the
  // worker touch those bytes (which would raise SIGBUS).
  int fd = shm_open(source.name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  receiver.start_weight_update();
  EXPECT_THAT(receiver_error(receiver, stale), HasSubstr("holds 4096 bytes, but the handle says"));
  EXPECT_EQ(receiver.checksums(), before);
}

// ---- hostile updates: what a worker maps, and when it lets go of it ----

// A wt segment of this process, filled with a byte pattern.
struct TestSegment {
  explicit TestSegment(std::size_t size, uint32_t seed = 1) : n(size) {
    auto c = shm::create_segment(size);
    if (c.addr == nullptr) throw std::runtime_error("cannot create a test segment");
    name = c.name;
    p = static_cast<unsigned char*>(c.addr);
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng());
  }
  ~TestSegment() {
    munmap(p, n);
    shm_unlink(name.c_str());
  }
  std::vector<unsigned char> bytes(std::size_t offset, std::size_t count) const {
    return {p + offset, p + offset + count};
  }
  std::string name;
  unsigned char* p = nullptr;
  std::size_t n = 0;
};

struct Piece {
  std::string tensor, segment;
  uint64_t nbytes, size, offset;
};

// An unpacked update of uint8 tensors, each read from the segment its handle names.
json host_update(const std::vector<Piece>& pieces) {
  json names = json::array(), dtypes = json::array(), shapes = json::array(),
       handles = json::array();
  for (const auto& p : pieces) {
    names.push_back(p.tensor);
    dtypes.push_back("uint8");
    shapes.push_back(json::array({p.nbytes}));
    handles.push_back(
        {{"cpu", {{"kind", "shm"}, {"name", p.segment}, {"size", p.size}, {"offset", p.offset}}}});
  }
  return {{"names", names}, {"dtype_names", dtypes}, {"shapes", shapes}, {"ipc_handles", handles}};
}

// A wt segment name of this process that nothing uses yet.
std::string unused_segment_name() {
  auto name = shm::new_segment_name();
  shm_unlink(name.c_str());
  return name;
}

// The read-only mappings of /dev/shm<name> in this process (the worker's; the test's are rw).
int worker_mappings_of(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line))
    if (line.find(" r--s ") != std::string::npos && line.size() >= name.size() &&
        line.compare(line.size() - name.size(), name.size(), name) == 0)
      ++n;
  return n;
}

// Finding 1: one update naming the same segment again with a growing size made the worker re-map
// it and unmap the first mapping while an earlier tensor still pointed into it (SIGSEGV, or wrong
// bytes committed). Every mapping handed out in an update stays until its load returned.
TEST(IpcHostile, ASegmentNamedAgainWithAGrowingSizeKeepsEveryMappingUntilTheLoadReturned) {
  TestSegment seg(std::size_t{1} << 20);
  auto update = host_update({{"a", seg.name, 4096, 8192, 4096},
                             {"b", seg.name, 65536, 131072, 65536},
                             {"c", seg.name, 262144, std::size_t{1} << 20, 524288}});
  auto worker = WorkerEngine::create("ipc", R"({"packed": false})");
  const long page = sysconf(_SC_PAGESIZE);
  for (int round = 0; round < 3; ++round) {
    worker->start();
    int loads = 0;
    worker->receive(update.dump(), [&](std::span<const wt_tensor> ts) {
      ++loads;
      ASSERT_EQ(ts.size(), 3u);
      for (std::size_t i = 0; i < ts.size(); ++i) {
        const auto& piece = update["ipc_handles"][i]["cpu"];
        const auto n = update["shapes"][i][0].get<std::size_t>();
        auto* data = static_cast<const unsigned char*>(ts[i].tensor.data);
        // Still mapped (mincore fails with ENOMEM on an unmapped page)...
        auto first = reinterpret_cast<uintptr_t>(data) / page * page;
        std::size_t span = reinterpret_cast<uintptr_t>(data) + n - first;
        std::vector<unsigned char> residency((span + page - 1) / page);
        if (mincore(reinterpret_cast<void*>(first), span, residency.data()) != 0) {
          ADD_FAILURE() << ts[i].name
                        << " points into memory unmapped before its load: " << std::strerror(errno);
          continue;  // reading it would fault
        }
        // ... and holding the bytes the handle names.
        EXPECT_EQ(std::vector<unsigned char>(data, data + n),
                  seg.bytes(piece["offset"].get<std::size_t>(), n))
            << ts[i].name;
      }
    });
    EXPECT_EQ(loads, 1);
    worker->finish();
    EXPECT_EQ(worker_mappings_of(seg.name), 1)
        << "the replaced mappings are released after the load";
  }
  // The same through the receiver: byte-exact.
  Receiver receiver("ipc");
  receiver.init_weight_transfer_engine(json{{"packed", false}});
  receiver.start_weight_update();
  receiver.update_weights(update);
  receiver.finish_weight_update(std::string("v1"));
  EXPECT_EQ(receiver.bytes_of("a"), seg.bytes(4096, 4096));
  EXPECT_EQ(receiver.bytes_of("b"), seg.bytes(65536, 65536));
  EXPECT_EQ(receiver.bytes_of("c"), seg.bytes(524288, 262144));
}

class IpcRefused : public ::testing::Test {
 protected:
  void SetUp() override {
    receiver_.init_weight_transfer_engine(json{{"packed", false}});
    receiver_.start_weight_update();
    receiver_.update_weights(host_update({{"w", good_.name, 4096, 4096, 0}}));
    receiver_.finish_weight_update(std::string("v1"));
    before_ = receiver_.checksums();
  }
  // Sends an update reading `nbytes` from `segment`; expects it refused with `part`.
  void expect_refused(const std::string& segment, uint64_t nbytes, const std::string& part) {
    receiver_.start_weight_update();
    std::string err =
        receiver_error(receiver_, host_update({{"stolen", segment, nbytes, nbytes, 0}}));
    EXPECT_THAT(err, HasSubstr(part)) << segment;
    EXPECT_THAT(err, HasSubstr(segment));
    EXPECT_FALSE(receiver_.session_active());
    EXPECT_EQ(receiver_.checksums(), before_) << "nothing of a refused update is served";
  }
  TestSegment good_{4096};
  Receiver receiver_{"ipc"};
  std::map<std::string, std::string> before_;
};

// Finding 4: any readable file in /dev/shm could be named, and its checksum was then served (a
// read oracle). Only wt segments are mapped.
TEST_F(IpcRefused, AFileThatIsNotAWtSegmentIsNeverRead) {
  const std::string name = "/wt_test_secret-" + std::to_string(getpid());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
  close(fd);
  expect_refused(name, 32, "is not a wt segment");
  shm_unlink(name.c_str());
}

TEST_F(IpcRefused, ALivenessFileIsNotASegment) {
  std::string token = shm::process_token();
  ASSERT_FALSE(token.empty());
  expect_refused(shm::liveness_name(std::to_string(getpid()), token), 0, "is not a wt segment");
}

TEST_F(IpcRefused, AWtSegmentOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can give a file to another user";
  TestSegment theirs(32);
  ASSERT_EQ(chown(("/dev/shm" + theirs.name).c_str(), 65534, 65534), 0);
  expect_refused(theirs.name, 32, "belongs to uid 65534, not to this process's user (uid 0)");
}

// Finding 2: a FIFO named by an update blocked the worker in open (and the receiver's lock with
// it). Refused at once; a thread opens the FIFO's other end after a while, so a regression shows
// as a slow refusal here instead of a hang.
TEST_F(IpcRefused, AFifoIsRefusedWithoutBlocking) {
  const std::string name = unused_segment_name();
  const std::string path = "/dev/shm" + name;
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread unblocker([&] {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    while (!done) {
      int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  expect_refused(name, 16, "is a FIFO: refused (only regular files are mapped)");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  done = true;
  unblocker.join();
  unlink(path.c_str());
}

TEST_F(IpcRefused, ASymbolicLinkIsRefused) {
  const std::string name = unused_segment_name();
  const std::string path = "/dev/shm" + name;
  ASSERT_EQ(symlink(("/dev/shm" + good_.name).c_str(), path.c_str()), 0);
  expect_refused(name, 16, "is a symbolic link: refused");
  unlink(path.c_str());
}

// Finding 3, at the receiver: a segment truncated while the receiver copies out of it raised
// SIGBUS and killed the process (8 of 8 trials). The update must fail naming the tensor, and the
// process stay up and serve the next round. The truncation is deterministic: as a trainer does,
// the segment's name is removed after the first round and both sides keep their mappings; then
// the file is cut to 0 bytes, and the worker's cached mapping points past its end.
//
// Runs in a child process (a death test), so that a receiver that still copies unguarded fails
// this test (killed by SIGBUS) instead of the whole test program. The copy is
// Receiver::load's: it must use wt::guarded_parallel_copy.
void truncated_during_the_load() {
  Receiver::Options ro;
  ro.backend = "ipc";
  ro.load_threads = 4;  // 40 MiB: several threads copy; 'b' faults in one of them
  Receiver receiver(ro);
  receiver.init_weight_transfer_engine(json{{"packed", false}});
  TestSegment a(std::size_t{24} << 20, 1), b(std::size_t{16} << 20, 2);
  auto update = host_update({{"a", a.name, a.n, a.n, 0}, {"b", b.name, b.n, b.n, 0}});
  receiver.start_weight_update();
  receiver.update_weights(update);
  receiver.finish_weight_update(std::string("v1"));
  ASSERT_EQ(receiver.bytes_of("b"), b.bytes(0, b.n));
  const auto before = receiver.checksums();

  int fd = shm_open(b.name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  shm_unlink(b.name.c_str());
  ASSERT_EQ(ftruncate(fd, 0), 0);
  close(fd);

  receiver.start_weight_update();
  std::string err = receiver_error(receiver, update);
  EXPECT_THAT(err, HasSubstr("the source memory of tensor 'b' vanished during the copy "
                             "(shared-memory file truncated?)"));
  EXPECT_FALSE(receiver.session_active());
  EXPECT_EQ(receiver.checksums(), before);
  EXPECT_EQ(receiver.weight_version(), "v1");

  // Alive, and the next round (from a fresh segment) goes through.
  TestSegment b2(std::size_t{16} << 20, 3);
  receiver.start_weight_update();
  receiver.update_weights(host_update({{"a", a.name, a.n, a.n, 0}, {"b", b2.name, b2.n, b2.n, 0}}));
  receiver.finish_weight_update(std::string("v2"));
  EXPECT_EQ(receiver.bytes_of("a"), a.bytes(0, a.n));
  EXPECT_EQ(receiver.bytes_of("b"), b2.bytes(0, b2.n));
}

// The same at the worker engine, with a load that copies as the receiver's must: the guarded copy
// turns the fault into the load's error, which fails the update.
TEST(IpcHostile, AGuardedLoadOfATruncatedSegmentFailsTheUpdate) {
  TestSegment a(std::size_t{1} << 20, 1), b(std::size_t{1} << 20, 2);
  auto update = host_update({{"a", a.name, a.n, a.n, 0}, {"b", b.name, b.n, b.n, 0}});
  auto worker = WorkerEngine::create("ipc", R"({"packed": false})");
  std::vector<std::vector<unsigned char>> dst;
  auto guarded_load = [&](std::span<const wt_tensor> ts) {
    dst.assign(ts.size(), {});
    std::vector<CopyJob> jobs;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      dst[i].resize(ts[i].tensor.shape[0]);
      jobs.push_back({dst[i].data(), ts[i].tensor.data, dst[i].size()});
    }
    if (auto fault = guarded_parallel_copy(jobs, 2)) throw Error(WT_ERR_SYSTEM, fault->message(ts));
  };
  worker->start();
  worker->receive(update.dump(), guarded_load);
  worker->finish();
  EXPECT_EQ(dst[1], b.bytes(0, b.n));
  int fd = shm_open(b.name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  shm_unlink(b.name.c_str());  // the name goes, the worker's cached mapping stays in use
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  worker->start();
  try {
    worker->receive(update.dump(), guarded_load);
    ADD_FAILURE() << "the update went through";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_SYSTEM);
    EXPECT_THAT(e.what(), HasSubstr("the loader's load failed: the source memory of tensor 'b' "
                                    "vanished during the copy (shared-memory file truncated?)"));
  }
  worker->abort();
}

// abort() from another thread while a load is reading the mappings: it only flags; the load reads
// valid memory to its end, the update then fails as aborted, and the engine stays usable.
TEST(IpcWorkerAbort, AbortDuringASlowLoadIsSafeAndFailsTheUpdate) {
  TestSegment a(std::size_t{1} << 20, 7);
  auto update = host_update({{"a", a.name, a.n, a.n, 0}});
  auto worker = WorkerEngine::create("ipc", R"({"packed": false})");
  std::vector<unsigned char> copied;
  std::atomic<bool> loading{false};
  auto slow_load = [&](std::span<const wt_tensor> ts) {
    loading = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto* p = static_cast<const unsigned char*>(ts[0].tensor.data);
    copied.assign(p, p + a.n);
  };
  worker->start();
  std::thread aborter([&] {
    while (!loading) std::this_thread::yield();
    worker->abort();
  });
  try {
    worker->receive(update.dump(), slow_load);
    ADD_FAILURE() << "an update aborted midway went through";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_ABORTED) << e.what();
  }
  aborter.join();
  EXPECT_EQ(copied, a.bytes(0, a.n)) << "the load read the mapping to its end";
  worker->start();  // usable again
  worker->receive(update.dump(), slow_load);
  worker->finish();
}

TEST(IpcHostile, ASegmentTruncatedDuringTheLoadFailsTheUpdateAndTheProcessStaysUp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        truncated_during_the_load();
        std::exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "")
      << "a child killed by SIGBUS (signal 7) means Receiver::load copies out of shared memory "
         "without wt::guarded_parallel_copy";
}

}  // namespace
}  // namespace wt
