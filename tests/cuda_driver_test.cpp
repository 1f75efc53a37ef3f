// The driver requirement as a tested fact: wt reaches the CUDA driver at run time
// (wt/sdk/cuda_driver.hpp) and needs one that serves CUDA 12.0, whatever toolkit built it. A fake
// libcuda.so.1 (tests/fake_cuda) plays drivers of chosen versions, without a GPU, so each verdict
// is checked here on any machine, across real processes: `wt serve --device cuda:0` and the ipc
// plugin's CUDA worker.
#include <wt/wt.hpp>

#include "subprocess.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

using ::testing::HasSubstr;

namespace wt {
namespace {

std::vector<std::string> fake_driver(int version) {
  return {"LD_LIBRARY_PATH=" WT_FAKE_CUDA_DIR, "WT_FAKE_CUDA_VERSION=" + std::to_string(version)};
}

// `wt serve --device cuda:0` with the given environment: it must refuse to start, at once.
std::string serve_refusal(const std::vector<std::string>& env) {
  cli::Child serve({WT_CLI_PATH, "serve", "--backend", "ipc", "--device", "cuda:0", "--port", "0"},
                   env);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = serve.wait();
  EXPECT_NE(rc, 0) << serve.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  return serve.output();
}

TEST(CudaDriver, ADriverOlderThanCuda12IsRefusedNamingBothVersions) {
  EXPECT_THAT(serve_refusal(fake_driver(11080)),
              HasSubstr("the NVIDIA driver serves CUDA 11.8; wt needs a driver that serves CUDA "
                        "12.0 or newer (r525+)"));
}

// An r535 driver serves CUDA 12.2, older than the toolkit this wt was built with (13.0 here): the
// version check passes and wt gets as far as looking for a device (the fake has none).
TEST(CudaDriver, AnR535DriverIsServedWhateverToolkitBuiltWt) {
  const std::string out = serve_refusal(fake_driver(12020));
  EXPECT_THAT(out, HasSubstr("no CUDA device: the NVIDIA driver found none"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("serves CUDA")));
}

TEST(CudaDriver, NoDriverAtAllIsSaidPlainly) {
  if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
      lib != nullptr || (lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) != nullptr) {
    dlclose(lib);
    GTEST_SKIP() << "this machine has an NVIDIA driver";
  }
  EXPECT_THAT(serve_refusal({}),
              HasSubstr("no NVIDIA driver here: libcuda.so.1 could not be loaded"));
}

// Run in a child with a fake driver (the parent test below): the ipc plugin's CUDA worker says
// what the driver lacks, as WT_ERR_UNSUPPORTED, and nothing crashes.
TEST(CudaDriverChild, IpcCudaWorkerReportsTheDriver) {
  const char* expected = std::getenv("WT_FAKE_EXPECTED");
  if (expected == nullptr) GTEST_SKIP() << "run by CudaDriver.IpcPluginReportsTheDriverItFinds";
  try {
    WorkerEngine::create("ipc", R"({"packed":false})", DLDevice{kDLCUDA, 0});
    FAIL() << "a CUDA worker was created without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_UNSUPPORTED) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(expected));
  }
}

TEST(CudaDriver, IpcPluginReportsTheDriverItFinds) {
  for (auto [version, expected] : {std::pair{11040, "the NVIDIA driver serves CUDA 11.4"},
                                   std::pair{12020, "no CUDA device"}}) {
    auto env = fake_driver(version);
    env.push_back(std::string("WT_FAKE_EXPECTED=") + expected);
    cli::Child child({"/proc/self/exe", "--gtest_filter=CudaDriverChild.*"}, env);
    EXPECT_EQ(child.wait(), 0) << child.output();
    EXPECT_THAT(child.output(), HasSubstr("[  PASSED  ] 1 test"));
  }
}

}  // namespace
}  // namespace wt
