// ABI version 2: version-1 plugins keep working through the host's adapter, growable elements are
// stepped by their own size, short tables are refused naming their slots, the capability bits are
// enforced before a plugin is called, and the loader's destination and patch paths.
#include <wt/receiver.hpp>
#include <wt/wt.hpp>

#include "support/process.hpp"
#include "support/recording_client.hpp"
#include "support/vector_source.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

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
  auto r = test::run_process(std::string("WT_CACHE_DIR=") + WT_BUILD_DIR + "/cache " +
                             WT_CLI_PATH + " launch " + cfg.string() + " --json");
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
      {{"inline", {{{"name", "a"}, {"values", {1.5, 2.5, 3.5}}}, {{"name", "b"}, {"values", {-4}}}}}});
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
    receiver.update_weights({{"patch",
                              {{"name", "a"}, {"indices", {0}}, {"values", {1}}, {"full_shape", {1}}}}});
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
    r.update_weights({{"patch",
                       {{"name", "a"}, {"indices", idx}, {"values", vals}, {"full_shape", full}}}});
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
  for (const auto& c : std::vector<Case>{{{1, 7}, {5, 5}, {4}, "index 7 at position 1 is outside [0, 4)"},
                                         {{2, 2}, {5, 6}, {4}, "index 2 appears more than once"},
                                         {{0}, {5}, {2, 2}, "full_shape [2, 2] differs"},
                                         {{0, 1}, {5}, {4}, "as many elements as indices"}}) {
    r.start_weight_update();
    auto e = error_of([&] { patch(c.idx, c.vals, c.full); });
    EXPECT_THAT(e.what(), HasSubstr(c.expected));
    EXPECT_FALSE(r.session_active()) << "a refused update ends the session";
    EXPECT_EQ(floats_of(r, "a"), (std::vector<float>{1, 2, 3, 4}));
  }
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
