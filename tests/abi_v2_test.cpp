// ABI version 2: version-1 plugins keep working through the host's adapter, growable elements are
// stepped by their own size, short tables are refused naming their slots, the capability bits are
// enforced before a plugin is called, and the loader's destination and patch paths.
#include <wt/wt_plugin_v1.h>
#include <wt/services/receiver.hpp>
#include <wt/wt.hpp>

#include "support/process.hpp"
#include "support/recording_client.hpp"
#include "support/vector_source.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

using ::testing::HasSubstr;
using json = nlohmann::json;

namespace wt {
namespace {

namespace fs = std::filesystem;
constexpr DLDataType kF32{kDLFloat, 32, 1};

void use_abi_plugins() {
  ::setenv("WT_PLUGIN_PATH", (std::string(WT_TEST_ABI_DIR) + ":" + WT_TEST_GOOD_DIR).c_str(), 1);
}

InitInfo info_for(const std::string& backend) {
  return InitInfo::from_json(R"({"backend": ")" + backend + R"(", "rank": 0})");
}

std::vector<float> floats_of(const Receiver& r, const std::string& name) {
  auto b = r.bytes_of(name);
  if (!b) return {};
  std::vector<float> v(b->size() / sizeof(float));
  std::memcpy(v.data(), b->data(), b->size());
  return v;
}

// Runs `f` and returns the wt::Error it throws (or fails the test).
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no wt::Error thrown";
  return Error(WT_OK, "");
}

// ---- version 1 ----------------------------------------------------------------------------------

// A plugin written in C99 against the frozen 0.1.0 header (tests/abi/) completes a verified
// `wt launch` sync, every round: trainer and embedded receiver both run it through the adapter.
TEST(AbiV1Plugin, BuiltFromTheFrozenHeaderSyncsThroughWtLaunch) {
  auto dir = fs::path(WT_BUILD_DIR) / "test-configs";
  fs::create_directories(dir);
  auto cfg = dir / "v1inline.yaml";
  std::ofstream(cfg) << "backend: v1inline\n"
                     << "plugin_dirs: [" << WT_TEST_V1_DIR << "]\n"
                     << "source: {generate: {model: tiny, dtype: bfloat16}}\n"
                     << "rounds: 3\n";
  auto r = test::run_process(std::string("WT_CACHE_DIR=") + WT_BUILD_DIR + "/cache " + WT_CLI_PATH +
                             " launch " + cfg.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = json::parse(r.output.substr(r.output.find('{')));
  EXPECT_TRUE(report["ok"].get<bool>());
  ASSERT_EQ(report["rounds"].size(), 3u);
  for (const auto& round : report["rounds"]) EXPECT_TRUE(round["verified"].get<bool>());
}

TEST(AbiV1Plugin, IsListedWithAbiVersion1) {
  auto r = test::run_process(std::string("WT_PLUGIN_PATH=") + WT_TEST_V1_DIR + " " + WT_CLI_PATH +
                             " plugins --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto list = json::parse(r.output.substr(r.output.find('[')));
  bool found = false;
  for (const auto& p : list)
    if (p["backend"] == "v1inline") {
      found = true;
      EXPECT_EQ(p["abi_version"], 1);
      EXPECT_TRUE(p["usable"].get<bool>());
    }
  EXPECT_TRUE(found) << r.output;
}

TEST(AbiV1Plugin, ReceiverSideBackendOptionsAreRefusedNamingTheVersion) {
  ::setenv("WT_PLUGIN_PATH", WT_TEST_V1_DIR, 1);
  WorkerOptions o;
  o.backend_options = {{"copy_threads", 2}};
  auto e = error_of([&] { WorkerEngine::create("v1inline", "{}", o); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("speaks wt ABI version 1"));
  EXPECT_THAT(e.what(), HasSubstr("copy_threads"));
}

// ---- growable structs ---------------------------------------------------------------------------

// testwide is built as a plugin of a newer ABI whose wt_tensor is 16 bytes larger: the host steps
// the array it loads by that size, and fills the wt_tensor it hands next() without writing past it.
TEST(AbiGrowable, WiderElementsOfANewerPluginAreSteppedByTheirSize) {
  use_abi_plugins();
  Receiver receiver("testwide");
  receiver.init_weight_transfer_engine(json::object());
  receiver.start_weight_update();
  receiver.update_weights(
      {{"inline",
        {{{"name", "a"}, {"values", {1.5, 2.5, 3.5}}}, {{"name", "b"}, {"values", {-4}}}}}});
  receiver.finish_weight_update("v");
  EXPECT_EQ(floats_of(receiver, "a"), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(floats_of(receiver, "b"), (std::vector<float>{-4.0f}));
}

TEST(AbiGrowable, TheHostNeverWritesPastTheWtTensorAPluginSized) {
  use_abi_plugins();
  test::RecordingClient client;
  test::VectorSource source;
  source.add("x", kF32, {4}, 1);
  source.add("y", kF32, {2, 2}, 2);
  auto engine = trainer_init(info_for("testwide"), client, &source);
  engine->send_weights();  // fails if the canary after its wt_tensor changed
  auto calls = client.calls();
  ASSERT_EQ(calls.size(), 4u);  // init, start, update, finish
  EXPECT_EQ(json::parse(calls[2].payload)["names"], json({"x", "y"}));
}

TEST(AbiGrowable, ATableShorterThanItsSlotsIsRefusedNamingThem) {
  use_abi_plugins();
  auto e = error_of([] { Registry::instance().get("shortworker"); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("worker.receive"));
  EXPECT_THAT(e.what(), HasSubstr("worker.destroy"));
}

// ---- the weight source
// ----------------------------------------------------------------------------

// The host checks every pass against metadata() for every plugin, whatever the plugin checks
// itself: a short pass, a long one and a renamed item each fail the round at that item.
TEST(AbiSource, APassThatDisagreesWithItsMetadataFailsTheRoundAtThatItem) {
  use_abi_plugins();
  struct Skewed : test::VectorSource {
    std::vector<ParamMeta> declared;
    const std::vector<ParamMeta>& metadata() override { return declared; }
  };
  auto run = [](auto edit) {
    test::RecordingClient client;
    Skewed source;
    source.add("x", kF32, {4}, 1);
    source.add("y", kF32, {2, 2}, 2);
    source.declared = source.VectorSource::metadata();
    edit(source.declared);
    auto engine = trainer_init(info_for("testgood"), client, &source);
    return error_of([&] { engine->send_weights(); });
  };
  auto longer = run([](auto& d) { d.push_back({"z", kF32, {1}}); });
  EXPECT_EQ(longer.code(), WT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(longer.what(), HasSubstr("ended after 2 tensors, but its metadata declares 3 (the "
                                       "first missing is 'z')"));
  auto shorter = run([](auto& d) { d.pop_back(); });
  EXPECT_THAT(shorter.what(),
              HasSubstr("yields more tensors than the 1 its metadata declares (item 1 is 'y')"));
  auto renamed = run([](auto& d) { d[1].name = "w"; });
  EXPECT_THAT(renamed.what(), HasSubstr("item 1 is 'y' (float32 [2, 2]) but its metadata "
                                        "declares 'w' (float32 [2, 2]) there"));
  auto reshaped = run([](auto& d) { d[0].shape = {2, 2}; });
  EXPECT_THAT(reshaped.what(), HasSubstr("item 0 is 'x' (float32 [4]) but its metadata declares "
                                         "'x' (float32 [2, 2])"));
}

// ---- capabilities -------------------------------------------------------------------------------

TEST(AbiCapabilities, HostTensorsToABackendWithoutHostMemoryAreRefused) {
  use_abi_plugins();
  test::RecordingClient client;
  test::VectorSource source;
  source.add("w", kF32, {2}, 1);
  auto engine = trainer_init(info_for("nohost"), client, &source);
  auto e = error_of([&] { engine->send_weights(); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("WT_CAP_HOST_MEMORY"));
  EXPECT_THAT(e.what(), HasSubstr("tensor 'w'"));
}

TEST(AbiCapabilities, AHostWorkerOfABackendWithoutHostMemoryIsRefused) {
  use_abi_plugins();
  auto e = error_of([] { WorkerEngine::create("nohost", "{}"); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("WT_CAP_HOST_MEMORY"));
}

TEST(AbiCapabilities, ACudaWorkerOfAHostOnlyBackendIsRefused) {
  use_abi_plugins();
  auto e = error_of([] { WorkerEngine::create("testgood", "{}", DLDevice{kDLCUDA, 0}); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("WT_CAP_CUDA_MEMORY"));
}

TEST(AbiCapabilities, PatchesToADenseBackendAreRefusedBeforeAnyCall) {
  use_abi_plugins();
  test::RecordingClient client;
  test::VectorSource source;
  source.add("w", kF32, {4}, 1);
  auto engine = trainer_init(info_for("testgood"), client, &source);
  const auto before = client.calls().size();
  int32_t idx[1] = {0};
  float val[1] = {1};
  int64_t n[1] = {1}, full[1] = {4};
  SendOptions o;
  wt_sparse_patch p{};
  p.name = "w";
  p.indices = DLTensor{idx, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, n, nullptr, 0};
  p.values = DLTensor{val, {kDLCPU, 0}, 1, kF32, n, nullptr, 0};
  p.full_ndim = 1;
  p.full_shape = full;
  o.patches.push_back(p);
  auto e = error_of([&] { engine->send_weights(o); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("WT_CAP_SPARSE"));
  EXPECT_EQ(client.calls().size(), before) << "no RPC after a refused round";
}

TEST(AbiCapabilities, ASourceToADeltaBackendIsRefused) {
  use_abi_plugins();
  test::RecordingClient client;
  test::VectorSource source;
  auto e = error_of([&] { trainer_init(info_for("delta"), client, &source); });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("WT_CAP_SPARSE"));
  EXPECT_TRUE(client.calls().empty()) << "refused before the plugin was called";
}

TEST(AbiCapabilities, PatchesLoadedByADenseBackendAreRefused) {
  use_abi_plugins();
  Receiver receiver("testgood");
  receiver.init_weight_transfer_engine(json::object());
  receiver.start_weight_update();
  auto e = error_of([&] {
    receiver.update_weights(
        {{"patch", {{"name", "a"}, {"indices", {0}}, {"values", {1}}, {"full_shape", {1}}}}});
  });
  EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
  EXPECT_THAT(e.what(), HasSubstr("WT_CAP_SPARSE"));
}

// ---- the loader ---------------------------------------------------------------------------------

TEST(AbiLoader, DestinationWritesLandAtFinishAndAFailedRoundChangesNothing) {
  use_abi_plugins();
  Receiver receiver("testgood");
  receiver.init_weight_transfer_engine(json::object());
  receiver.start_weight_update();
  receiver.update_weights(
      {{"in_place", true}, {"inline", {{{"name", "a"}, {"values", {1, 2, 3}}}}}});
  EXPECT_TRUE(receiver.names().empty()) << "staged, not visible before finish";
  receiver.finish_weight_update("1");
  EXPECT_EQ(floats_of(receiver, "a"), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(receiver.tensors_written_in_place(), 1u);

  receiver.start_weight_update();
  receiver.update_weights(
      {{"in_place", true}, {"inline", {{{"name", "a"}, {"values", {7, 8, 9}}}}}});
  EXPECT_THROW(receiver.update_weights({{"inline", "not a list"}}), Error);
  EXPECT_FALSE(receiver.session_active());
  EXPECT_EQ(floats_of(receiver, "a"), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(receiver.weight_version(), "1");
}

// The trainer ends an update while the worker is blocked in its transfer: the receiver aborts the
// engine at once, outside the lock the blocked update holds, so the update returns ABORTED and the
// end returns promptly instead of waiting for a transfer that never ends. Nothing is committed.
TEST(ReceiverEnd, EndingAnUpdateInterruptsATransferBlockedInTheWorker) {
  use_abi_plugins();
  Receiver receiver("testgood");
  receiver.init_weight_transfer_engine(json::object());
  receiver.start_weight_update();
  std::atomic<wt_status> code{WT_OK};
  std::thread update([&] {
    try {
      receiver.update_weights({{"block_until_abort", true}});
    } catch (const Error& e) {
      code = e.code();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the update is blocked by now
  const auto t0 = std::chrono::steady_clock::now();
  receiver.end_weight_update("the trainer gave up");
  update.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(code.load(), WT_ERR_ABORTED);
  EXPECT_FALSE(receiver.session_active());
  EXPECT_TRUE(receiver.names().empty());
  receiver.start_weight_update();  // a fresh round is accepted
  receiver.update_weights({{"inline", {{{"name", "a"}, {"values", {1, 2}}}}}});
  receiver.finish_weight_update("2");
  EXPECT_EQ(floats_of(receiver, "a"), (std::vector<float>{1, 2}));
}

class DeltaReceiver : public ::testing::Test {
 protected:
  void SetUp() override {
    use_abi_plugins();
    r.init_weight_transfer_engine(json::object());
    r.start_weight_update();
    r.update_weights({{"inline", {{{"name", "a"}, {"values", {1, 2, 3, 4}}}}}});
    r.finish_weight_update("base");
  }
  void patch(std::vector<int> idx, std::vector<float> vals, std::vector<int> full = {4}) {
    r.update_weights(
        {{"patch", {{"name", "a"}, {"indices", idx}, {"values", vals}, {"full_shape", full}}}});
  }
  Receiver r{"delta"};
};

TEST_F(DeltaReceiver, APatchAppliesOnTopOfTheCommittedWeights) {
  r.start_weight_update();
  patch({1, 3}, {9, 8});
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 2, 3, 4})) << "not before finish";
  r.finish_weight_update("step-1");
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 9, 3, 8}));
}

TEST_F(DeltaReceiver, BadPatchesAreRefusedAndChangeNothing) {
  struct Case {
    std::vector<int> idx;
    std::vector<float> vals;
    std::vector<int> full;
    const char* expected;
  };
  for (const auto& c : std::vector<Case>{
           {{1, 7}, {5, 5}, {4}, "index 7 at position 1 is outside [0, 4)"},
           {{2, 2}, {5, 6}, {4}, "index 2 appears more than once in this batch"},
           {{0}, {5}, {2, 2}, "full_shape [2, 2] differs"},
           {{0, 1}, {5}, {4}, "as many elements as indices"},
           {{0, 1, 2, 3, 0}, {5, 5, 5, 5, 5}, {4}, "5 indices for a parameter of 4"}}) {
    r.start_weight_update();
    auto e = error_of([&] { patch(c.idx, c.vals, c.full); });
    EXPECT_THAT(e.what(), HasSubstr(c.expected));
    EXPECT_FALSE(r.session_active()) << "a refused update ends the session";
    EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 2, 3, 4}));
  }
}

TEST_F(DeltaReceiver, TheSameIndexInTwoPatchesOfABatchIsRefused) {
  r.start_weight_update();
  json p1 = {{"name", "a"}, {"indices", {0, 1}}, {"values", {5, 6}}, {"full_shape", {4}}};
  json p2 = {{"name", "a"}, {"indices", {1}}, {"values", {7}}, {"full_shape", {4}}};
  auto e = error_of([&] { r.update_weights({{"patch", {p1, p2}}}); });
  EXPECT_THAT(e.what(), HasSubstr("index 1 appears more than once in this batch"));
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 2, 3, 4}));
  r.start_weight_update();
  p2["indices"] = {3};
  r.update_weights({{"patch", {p1, p2}}});
  r.finish_weight_update("two-patches");
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{5, 6, 3, 7}));
}

TEST_F(DeltaReceiver, MoreIndicesThanElementsAcrossABatchAreRefusedBeforeAnyCopy) {
  r.start_weight_update();
  json p1 = {{"name", "a"}, {"indices", {0, 1, 2}}, {"values", {5, 6, 7}}, {"full_shape", {4}}};
  json p2 = {{"name", "a"}, {"indices", {2, 3}}, {"values", {8, 9}}, {"full_shape", {4}}};
  auto e = error_of([&] { r.update_weights({{"patch", {p1, p2}}}); });
  EXPECT_THAT(e.what(), HasSubstr("5 indices for a parameter of 4 elements (across the batch)"));
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 2, 3, 4}));
}

TEST(DeltaReceiverGrowing, PatchesKeptFromEarlierUpdatesOfARoundSurviveTheBufferGrowing) {
  // A model of a small and a large tensor, committed; then a round whose first update keeps a
  // small patch and whose second keeps one large enough that the receiver's patch buffer grows
  // under the first.
  use_abi_plugins();
  Receiver r{"delta"};
  r.init_weight_transfer_engine(json::object());
  std::vector<float> big(20000, 0.5f);
  r.start_weight_update();
  r.update_weights(
      {{"inline",
        {{{"name", "a"}, {"values", {1, 2, 3, 4}}}, {{"name", "big"}, {"values", big}}}}});
  r.finish_weight_update("base");
  r.start_weight_update();
  r.update_weights(
      {{"patch", {{"name", "a"}, {"indices", {1}}, {"values", {9}}, {"full_shape", {4}}}}});
  std::vector<int> idx;
  std::vector<float> vals;
  for (int i = 0; i < 20000; i += 2) {
    idx.push_back(i);
    vals.push_back(static_cast<float>(i));
    big[static_cast<std::size_t>(i)] = static_cast<float>(i);
  }
  r.update_weights(
      {{"patch", {{"name", "big"}, {"indices", idx}, {"values", vals}, {"full_shape", {20000}}}}});
  r.finish_weight_update("both");
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 9, 3, 4}));
  EXPECT_EQ(floats_of(r, "big"), big);
}

// Once a receiver holds a model, a round naming a tensor it does not hold, or another dtype or
// shape, is refused naming it (a drifted trainer), and the model stays as it was.
TEST_F(DeltaReceiver, ARoundNamingATensorTheModelDoesNotHoldOrReshapingOneIsRefused) {
  r.start_weight_update();
  auto e = error_of([&] { r.update_weights({{"inline", {{{"name", "b"}, {"values", {1, 2}}}}}}); });
  EXPECT_THAT(e.what(), HasSubstr("the update names tensor 'b', which the model this receiver "
                                  "holds does not have"));
  r.start_weight_update();
  e = error_of([&] { r.update_weights({{"inline", {{{"name", "a"}, {"values", {1, 2, 3}}}}}}); });
  EXPECT_THAT(e.what(), HasSubstr("tensor 'a' arrives as float32 3, but the model this receiver "
                                  "holds has it as float32 4"));
  EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 2, 3, 4}));
}

// ---- the SDK serving versions 1 and 2 -----------------------------------------------------------

TEST(AbiSdkRange, TheCurrentHostGetsVersion2) {
  use_abi_plugins();
  EXPECT_EQ(Registry::instance().get("sdkrange")->abi_version(), 2u);
  Receiver receiver("sdkrange");
  InProcessClient client(receiver);
  test::VectorSource source;
  source.add("w", kF32, {3}, 7);
  auto engine = trainer_init(info_for("sdkrange"), client, &source);
  engine->send_weights();
  EXPECT_EQ(receiver.bytes_of("w"), std::optional(source.tensors()[0].bytes));
}

// What a wt 0.1.0 host does with the same file: ask for version 1 and drive the v1 tables.
TEST(AbiSdkRange, AVersion1HostGetsVersion1TablesThatWork) {
  void* lib =
      dlopen((std::string(WT_TEST_ABI_DIR) + "/libwt_sdkrange.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto entry = reinterpret_cast<wt_plugin_get_fn>(dlsym(lib, WT_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  uint32_t abi = 0;
  const wt_plugin_api* raw = nullptr;
  ASSERT_EQ(entry(1, &abi, &raw), WT_OK);
  ASSERT_EQ(abi, 1u);
  const auto* api = reinterpret_cast<const wt_plugin_api_v1*>(raw);
  EXPECT_EQ(api->abi_version, 1u);
  EXPECT_EQ(api->struct_size, sizeof(wt_plugin_api_v1));
  wt_host_api host{sizeof(wt_host_api), 1, nullptr, WT_LOG_OFF, nullptr};
  char err[512] = {0};

  // Worker: a v1 load callback receives v1 tensors.
  wt_worker* w = nullptr;
  wt_worker_options_v1 opts{sizeof opts, 1, {kDLCPU, 0}};
  ASSERT_EQ(api->worker->create(&host, "{}", &opts, &w, err, sizeof err), WT_OK) << err;
  ASSERT_EQ(api->worker->start(w), WT_OK);
  std::vector<std::pair<std::string, std::vector<float>>> got;
  auto load = [](void* ctx, const wt_tensor_v1* ts, size_t n, char*, size_t) -> wt_status {
    auto* out = static_cast<std::vector<std::pair<std::string, std::vector<float>>>*>(ctx);
    for (size_t i = 0; i < n; ++i) {
      const auto* f = static_cast<const float*>(ts[i].tensor.data);
      out->push_back({ts[i].name, std::vector<float>(f, f + ts[i].tensor.shape[0])});
    }
    return WT_OK;
  };
  ASSERT_EQ(api->worker->receive(w, R"({"inline":[{"name":"a","values":[1.5,-2]}]})", load, &got),
            WT_OK)
      << api->worker->last_error(w);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "a");
  EXPECT_EQ(got[0].second, (std::vector<float>{1.5f, -2.0f}));
  api->worker->destroy(w);

  // Init info: version 1's to_json status for a short buffer.
  wt_init_info* info = nullptr;
  ASSERT_EQ(api->init_info->parse_json(&host, R"({"rank":0})", &info, err, sizeof err), WT_OK);
  size_t needed = 0;
  char tiny[2];
  EXPECT_EQ(api->init_info->to_json(info, tiny, sizeof tiny, &needed), WT_ERR_INVALID_ARGUMENT);
  EXPECT_GT(needed, sizeof tiny);

  // Trainer: a v1 client and a v1 source (fixed-size wt_tensor_v1).
  struct Host {
    std::vector<std::string> updates;
    float data[2] = {3.0f, 4.0f};
    int64_t shape[1] = {2};
    int given = 0;
  } h;
  wt_client_v1 client{};
  client.struct_size = sizeof client;
  client.abi_version = 1;
  client.ctx = &h;
  client.init_weight_transfer_engine = [](void*, const char*, char*, size_t) { return WT_OK; };
  client.start_weight_update = [](void*, char*, size_t) { return WT_OK; };
  client.update_weights = [](void* ctx, const char* j, char*, size_t) {
    static_cast<Host*>(ctx)->updates.push_back(j);
    return WT_OK;
  };
  client.finish_weight_update = [](void*, const char*, char*, size_t) { return WT_OK; };
  wt_weight_source_v1 source{};
  source.struct_size = sizeof source;
  source.abi_version = 1;
  source.ctx = &h;
  source.begin = [](void* ctx, char*, size_t) {
    static_cast<Host*>(ctx)->given = 0;
    return WT_OK;
  };
  source.next = [](void* ctx, wt_tensor_v1* out, int32_t* done, char*, size_t) {
    auto* self = static_cast<Host*>(ctx);
    *done = self->given++ > 0;
    if (!*done)
      *out = {"v",
              DLTensor{self->data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, self->shape, nullptr, 0}};
    return WT_OK;
  };
  source.end = [](void*) {};
  wt_trainer* t = nullptr;
  ASSERT_EQ(api->trainer->create(&host, info, &client, &source, nullptr, &t, err, sizeof err),
            WT_OK)
      << err;
  wt_send_args_v1 args{sizeof args, 1, "step-1", nullptr, 0};
  ASSERT_EQ(api->trainer->send_weights(t, &args), WT_OK) << api->trainer->last_error(t);
  ASSERT_EQ(h.updates.size(), 1u);
  EXPECT_EQ(json::parse(h.updates[0]),
            json::parse(R"({"inline":[{"name":"v","values":[3.0,4.0]}]})"));
  api->trainer->destroy(t);
  api->init_info->destroy(info);
}

// ---- init info fields as data -------------------------------------------------------------------

TEST(AbiFields, AFieldErrorCarriesTheFieldName) {
  use_abi_plugins();
  auto info = InitInfo::from_json(R"({"backend": "testgood", "rank": 0, "bogus": 1})");
  try {
    info.rank();
    FAIL();
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "bogus");
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
  }
}

}  // namespace
}  // namespace wt
