// CUDA memory over the ipc backend. Without a GPU (or without a driver) every CUDA path must fail
// with WT_ERR_UNSUPPORTED and a clear reason, never crash; with one, a CUDA trainer process and a
// `wt serve --device cuda:0` receiver sync byte-exact, and a worker whose GPU UUID is missing
// from the handles gets an error listing the UUIDs present.
#include <wt/services/http_client.hpp>
#include <wt/wt.hpp>

#include "subprocess.hpp"
#include "support/model.hpp"
#include "support/recording_client.hpp"

#include <wt/sdk/cuda_driver.hpp>

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

using ::testing::HasSubstr;

namespace wt {
namespace {

// What wt itself finds (the driver API): a GPU, or not.
bool wt_finds_a_gpu() {
  try {
    return sdk::cuda::device_count() > 0;
  } catch (const sdk::Error&) {
    return false;
  }
}

// The GPU tests also need the CUDA runtime their helpers are built with (wt itself does not): a
// driver too old for it skips them, saying so, instead of failing.
bool have_gpu() {
  int n = 0;
  if (!wt_finds_a_gpu()) return false;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::cout << "a GPU is present, but the test helpers' CUDA runtime cannot use this driver\n";
    return false;
  }
  return true;
}

TEST(IpcCudaWithoutGpu, CudaWorkerIsUnsupportedNotACrash) {
  if (wt_finds_a_gpu()) GTEST_SKIP() << "a GPU is present";
  try {
    WorkerEngine::create("ipc", R"({"packed":false})", DLDevice{kDLCUDA, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_UNSUPPORTED) << e.what();
    EXPECT_THAT(e.what(),
                ::testing::ContainsRegex("libcuda.so.1 could not be loaded|no CUDA device"));
  }
}

TEST(IpcCudaWithoutGpu, CudaTensorIsUnsupportedNotACrash) {
  if (wt_finds_a_gpu()) GTEST_SKIP() << "a GPU is present";
  struct OneCudaTensor : WeightSource {
    std::vector<int64_t> shape{4};
    std::vector<ParamMeta> meta{{"w", {kDLFloat, 32, 1}, {4}}};
    int i = 0;
    const std::vector<ParamMeta>& metadata() override { return meta; }
    void begin() override { i = 0; }
    bool next(wt_tensor& out) override {
      if (i++) return false;
      out.name = "w";
      out.tensor = DLTensor{reinterpret_cast<void*>(0x10000),
                            {kDLCUDA, 0},
                            1,
                            {kDLFloat, 32, 1},
                            shape.data(),
                            nullptr,
                            0};
      return true;
    }
    void end() override {}
  } source;
  for (bool packed : {false, true}) {
    test::RecordingClient client;
    auto engine =
        trainer_init(InitInfo::from_object({{"backend", "ipc"}, {"rank", 0}, {"packed", packed}}),
                     client, &source);
    try {
      engine->send_weights();
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_UNSUPPORTED) << e.what();
    }
  }
}

class IpcCudaGpu : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(IpcCudaGpu, TrainerProcessToCudaReceiverIsByteExact) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH, "--url", url, "--cuda", "--rounds", "3"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// Tensors at 2-byte offsets inside one allocation: one handle, many odd offsets (the worker opens
// it once and checks each range against the allocation the driver reports).
TEST_P(IpcCudaGpu, TensorsAtTwoByteOffsetsInOneAllocationAreByteExact) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH,    "--url",    url, "--cuda",
                                "--cuda-one-allocation", "--rounds", "3"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// The producer writes on a non-blocking stream held back 300 ms by a host function, and names that
// stream in SendOptions: the engine must wait for it (packed: before its own copies, which run on
// a stream of wt's; unpacked: before export), or stale bytes arrive.
TEST_P(IpcCudaGpu, AProducerOnAHeldBackNonBlockingStreamIsWaitedFor) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH, "--url",    url, "--cuda",
                                "--cuda-stream",      "--rounds", "3"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// cudaMallocAsync memory cannot travel as a CUDA IPC handle: unpacked, each such tensor is staged
// through a cudaMalloc copy (said once in the log); packed copies it anyway.
TEST_P(IpcCudaGpu, PoolMemoryThatIpcCannotShareIsStagedByteExact) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH, "--url",    url, "--cuda",
                                "--cuda-pool",        "--rounds", "3"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// Finding 1. The receiver (wt serve --device cuda:0's staging) queues its device-to-host copies on
// a stream and does not wait for them until the round's finish; here each copy also runs 20 ms
// after it was queued. The worker must wait for that stream (the v2 worker stream) before it
// answers each update, or the trainer refills one of its 2 small packed buffers while a copy has
// yet to read it. 3 rounds of ~40 updates each.
TEST(IpcCudaGpuOrdering, AConsumerThatCopiesAsynchronouslyIsWaitedForBeforeTheReply) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto [server, url] = cli::start_server(WT_TEST_CUDA_RECEIVER_PATH, {"--hold-stream-ms", "20"});
  cli::Child trainer({WT_TEST_TRAINER_PATH, "--url", url, "--cuda", "--rounds", "3", "--packed",
                      "--buffer-bytes", "65536"});
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// Findings 3 and 9. bfloat16[3] then float32[5] (and two zero-element tensors, null data) lead the
// model: in the load callback every tensor's device address is 256-byte aligned (the receiver
// fails the update naming any that is not), and the bytes arrive exact, packed and unpacked.
TEST_P(IpcCudaGpu, EveryTensorIs256ByteAlignedInTheLoadCallback) {
  auto [server, url] =
      cli::start_server(WT_TEST_CUDA_RECEIVER_PATH, {"--require-alignment", "256"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH, "--url",    url, "--cuda",
                                "--edge-tensors",     "--rounds", "3"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0, true));
}

// Finding 9. Zero-element CUDA tensors (null data) are not exported and arrive empty.
TEST_P(IpcCudaGpu, ZeroElementTensorsArrive) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH, "--url",    url, "--cuda",
                                "--edge-tensors",     "--rounds", "2"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  auto sums = HttpClient(url).weight_checksums();
  EXPECT_EQ(sums, test::expected_after(2, 40, 64, 0, true));
  EXPECT_TRUE(sums.count("edge.empty_f32") && sums.count("edge.empty_bf16"));
}

// Finding 5. Memory from cuMemCreate (PyTorch's expandable segments) cannot travel as a CUDA IPC
// handle: unpacked, it is staged through a cudaMalloc copy; packed copies it anyway.
TEST_P(IpcCudaGpu, VmmMemoryThatIpcCannotShareIsStagedByteExact) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH, "--url",    url, "--cuda",
                                "--cuda-vmm",         "--rounds", "3"};
  if (GetParam()) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "262144"});
  cli::Child trainer(argv);
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// Finding 7. The trainer ends the update while the receiver's load is still reading mapped device
// memory (its first copy held up 3 s): the end returns once the load has, the update fails as
// aborted, nothing is committed, and the mappings are released then, not under the load: the next
// trainer syncs byte-exact through the same receiver.
TEST(IpcCudaGpuAbort, AbortDuringASlowLoadFailsTheUpdateAndLosesNothing) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto [server, url] = cli::start_server(WT_TEST_CUDA_RECEIVER_PATH, {"--slow-copy-ms", "3000"});
  cli::Child first({WT_TEST_TRAINER_PATH, "--url", url, "--cuda", "--rounds", "1"});
  ASSERT_TRUE(server->wait_for("copy started", std::chrono::seconds(60))) << server->output();
  const auto t0 = std::chrono::steady_clock::now();
  HttpClient(url).end_weight_update("the test ends this update");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(first.wait(), 0) << first.output();
  EXPECT_THAT(first.output(), ::testing::ContainsRegex("[Aa]bort"));
  EXPECT_TRUE(HttpClient(url).weight_checksums().empty());
  cli::Child second({WT_TEST_TRAINER_PATH, "--url", url, "--cuda", "--rounds", "2"});
  ASSERT_EQ(second.wait(), 0) << second.output() << server->output();
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(2, 40, 64, 0));
}

// Finding 9's device copy: wt serve --device cuda:0 receiving a 2.3 GB model (32 layers of width
// 2048) into pinned memory with asynchronous copies, one synchronisation per round. Prints the
// trainer's end-to-end GB/s per round; a figure, not a pass criterion.
TEST(IpcCudaGpuThroughput, WtServeOnCuda0SyncsATwoGigabyteModel) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc", "--device", "cuda:0"});
  for (bool packed : {false, true}) {
    std::vector<std::string> argv{
        WT_TEST_TRAINER_PATH, "--url", url,       "--cuda", "--rounds", "2",
        "--layers",           "32",    "--width", "2048"};
    if (packed) argv.insert(argv.end(), {"--packed", "--buffer-bytes", "268435456"});
    cli::Child trainer(argv);
    ASSERT_EQ(trainer.wait(), 0) << trainer.output();
    std::cout << "wt serve --device cuda:0, 2.3 GB model, " << (packed ? "packed" : "unpacked")
              << ":\n"
              << trainer.output();
  }
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(2, 32, 2048, 0));
}

// Every CUDA call runs under a device guard: a thread that had no current context has none
// afterwards (no stray context made current on it), and one that had a context keeps it.
TEST(IpcCudaGpuDevice, ACudaWorkerLeavesTheThreadsContextAsItWas) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto& d = sdk::cuda::driver();
  std::thread fresh([&] {
    CUcontext before = reinterpret_cast<CUcontext>(1), after = reinterpret_cast<CUcontext>(2);
    ASSERT_EQ(d.CtxGetCurrent(&before), CUDA_SUCCESS);
    ASSERT_EQ(before, nullptr) << "a fresh thread has no current context";
    auto worker = WorkerEngine::create("ipc", R"({"packed":false})", DLDevice{kDLCUDA, 0});
    worker->start();
    worker->abort();
    ASSERT_EQ(d.CtxGetCurrent(&after), CUDA_SUCCESS);
    EXPECT_EQ(after, nullptr);
  });
  fresh.join();
  std::thread used([&] {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the runtime's context for device 0
    CUcontext before = nullptr, after = nullptr;
    ASSERT_EQ(d.CtxGetCurrent(&before), CUDA_SUCCESS);
    auto worker = WorkerEngine::create("ipc", R"({"packed":false})", DLDevice{kDLCUDA, 0});
    worker->start();
    worker->abort();
    ASSERT_EQ(d.CtxGetCurrent(&after), CUDA_SUCCESS);
    EXPECT_EQ(before, after);
  });
  used.join();
}

INSTANTIATE_TEST_SUITE_P(PackedAndUnpacked, IpcCudaGpu, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Packed" : "Unpacked"; });

TEST(IpcCudaGpuUuid, MissingUuidListsThePresentOnes) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto worker = WorkerEngine::create("ipc", R"({"packed":false})", DLDevice{kDLCUDA, 0});
  worker->start();
  try {
    worker->receive(R"({"names":["w"],"dtype_names":["float32"],"shapes":[[1]],
      "ipc_handles":[{"GPU-00000000-1111-2222-3333-444444444444":{"kind":"cuda","handle":"AA==","size":4,"offset":0}}]})",
                    [](std::span<const wt_tensor>) {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_NOT_FOUND);
    EXPECT_THAT(e.what(), HasSubstr("IPC handle not found for GPU-"));
    EXPECT_THAT(e.what(), HasSubstr("Available: [GPU-00000000-1111-2222-3333-444444444444]"));
  }
}

}  // namespace
}  // namespace wt
