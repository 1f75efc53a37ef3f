// m2n on CUDA memory (NCCL send/recv) where it cannot run: a machine without a usable NVIDIA
// driver or GPU gets a clear error from the trainer and the worker engines, at once, instead of
// a crash or a wait. On a machine with GPUs these checks step aside: the CUDA path then needs a
// GPU per rank (M trainer ranks + N worker ranks; NCCL refuses two ranks on one GPU).
#include <wt/wt.hpp>

#ifdef WT_TEST_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>
#endif

#include "subprocess.hpp"
#include "support/free_port.hpp"
#include "support/recording_client.hpp"
#include "support/test_configs.hpp"
#include "support/vector_source.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

using ::testing::AnyOf;
using ::testing::HasSubstr;

namespace wt {
namespace {

bool have_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) dlclose(lib);
  return lib != nullptr;
}

void expect_clear_refusal(const Error& e) {
  EXPECT_THAT(e.code(), AnyOf(WT_ERR_UNSUPPORTED, WT_ERR_DEVICE)) << e.what();
  EXPECT_THAT(std::string(e.what()), AnyOf(HasSubstr("NVIDIA driver"), HasSubstr("NCCL"),
                                           HasSubstr("CUDA")))
      << e.what();
}

TEST(M2nCuda, WithoutAGpuTheTrainerRefusesAtInitSayingWhy) {
  if (have_driver()) GTEST_SKIP() << "this machine has an NVIDIA driver";
  test::RecordingClient client;
  test::VectorSource source;
  source.add("w", {kDLFloat, 32, 1}, {8, 4}, 1);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    trainer_init(InitInfo::from_json(
                     R"({"backend": "m2n", "device": "cuda:0", "world_size": 2, "rank": 0})"),
                 client, &source);
    FAIL() << "a CUDA m2n trainer was made without a GPU";
  } catch (const Error& e) {
    expect_clear_refusal(e);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(client.calls().empty()) << "no worker was told to meet a trainer that cannot come";
}

TEST(M2nCuda, WithoutAGpuTheWorkerRefusesAtInitSayingWhy) {
  if (have_driver()) GTEST_SKIP() << "this machine has an NVIDIA driver";
  // A well-formed worker init info of a CUDA round: 1 trainer rank, 1 worker rank, tensor "w".
  const std::string id = std::string(171, 'A') + "=";  // 128 zero bytes, base64
  const std::string plan =
      R"({"version": 1, "trainer_ranks": 1, "replicas": 1, "tensor_parallel": 1, "groups": [)"
      R"({"names": ["w"], "dtype": "float32", "shape": [8, 4], "tp_dim": -1, "pieces": [)"
      R"({"tp": 0, "lo": [0, 0], "hi": [8, 4], "holders": [0], "first": 0}]}]})";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto parsed = nlohmann::json::parse(plan);
    // The digest is checked before the device is touched; compute it as the trainer would by
    // asking the worker: a wrong one names the digest it expected.
    nlohmann::json info = {{"rank_offset", 1},       {"world_size", 2},
                           {"trainer_ranks", 1},     {"wire", 2},
                           {"plan", parsed},         {"plan_digest", "0"},
                           {"nccl_unique_id_b64", id}};
    std::string digest;
    try {
      WorkerEngine::create("m2n", info.dump(), DLDevice{kDLCUDA, 0});
    } catch (const Error& e) {
      const std::string m = e.what();
      const auto at = m.find("the plan's digest is ");
      ASSERT_NE(at, std::string::npos) << m;
      digest = m.substr(at + 21, m.find(',', at) - at - 21);
    }
    info["plan_digest"] = digest;
    WorkerEngine::create("m2n", info.dump(), DLDevice{kDLCUDA, 0});
    FAIL() << "a CUDA m2n worker was made without a GPU";
  } catch (const Error& e) {
    expect_clear_refusal(e);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// The CUDA path end to end where GPUs allow: one trainer rank on cuda:0 into a receiver on
// cuda:1 (NCCL takes one GPU per rank), every round verified. Skips unless two GPUs are present.
TEST(M2nCuda, TwoGpusSyncVerifiedThroughWtLaunch) {
  int gpus = 0;
#ifdef WT_TEST_WITH_CUDA
  try {
    gpus = sdk::cuda::device_count();
  } catch (const sdk::Error&) {
  }
#endif
  if (gpus < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << gpus;
  const std::string config = test::write_config("m2n-cuda.yaml", fmt::format(R"(backend: m2n
init_info:
  device: cuda:0
source:
  generate: {{model: qwen2.5-0.5b, dtype: bfloat16}}
receiver:
  embedded: true
  device: cuda:1
rounds: 3
verify: true
)"));
  cli::Child launch({WT_CLI_PATH, "launch", config},
                    {"WT_CACHE_DIR=" + std::string(WT_BUILD_DIR) + "/cache"});
  ASSERT_EQ(launch.wait(), 0) << launch.output();
  std::cout << launch.output();
  EXPECT_THAT(launch.output(), HasSubstr("OK: every round verified"));
}

}  // namespace
}  // namespace wt
