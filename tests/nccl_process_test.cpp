// The nccl backend across real processes on CPU (Gloo): a trainer process (wt_test_trainer
// --backend nccl) and two `wt serve` receivers, world size 3, each receiver its own rank through
// the trainer's fan-out client. A peer killed with SIGKILL mid-transfer makes every other side fail
// within the transfer deadline, naming the phase; nothing is left behind, and a fresh trainer_init
// syncs both receivers again.
#include <wt/services/http_client.hpp>
#ifdef WT_TEST_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>
#endif

#include "subprocess.hpp"
#include "support/free_port.hpp"
#include "support/model.hpp"
#include "support/nccl_processes.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <iostream>

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace wt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTransferS = 3;  // every broadcast's deadline, on every side

using test::Served;

Served serve() {
  return test::serve_receiver("nccl", kTransferS);
}

std::vector<std::string> trainer(const std::vector<Served*>& receivers, int port, int rounds,
                                 std::vector<std::string> extra = {}) {
  return test::nccl_trainer(receivers, port, rounds, kTransferS, std::move(extra));
}

class NcclProcesses : public ::testing::TestWithParam<bool> {};

TEST_P(NcclProcesses, ATrainerAndTwoReceiversSyncByteExact) {
  Served a = serve(), b = serve();
  std::vector<std::string> extra;
  if (GetParam()) extra = {"--packed", "--buffer-bytes", "65536"};
  cli::Child t(trainer({&a, &b}, test::free_port(), 3, extra));
  ASSERT_EQ(t.wait(), 0) << t.output() << a.process->output() << b.process->output();
  const auto expected = test::expected_after(3, 40, 64, 0);
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), expected);
  EXPECT_EQ(HttpClient(b.url).weight_checksums(), expected);
}

INSTANTIATE_TEST_SUITE_P(PackedAndUnpacked, NcclProcesses, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Packed" : "Unpacked"; });

// Round 1 stops for 2 s after 100 tensors were broadcast (the receivers wait for the 101st):
// receiver 2 is killed then. The trainer's next broadcast fails within the deadline naming it,
// receiver 1's update fails too, and it keeps round 0's weights. A fresh trainer and a fresh
// receiver 2 then sync both.
TEST(NcclProcessFaults, AReceiverKilledMidTransferFailsTheTrainerWithinItsDeadline) {
  Served a = serve(), b = serve();
  cli::Child t(trainer({&a, &b}, test::free_port(), 2,
                       {"--pause-at-tensor", "100", "--pause-round", "1", "--pause-ms", "2000"}));
  ASSERT_TRUE(t.wait_for("paused at tensor 100", 60s)) << t.output();
  b.process->kill(SIGKILL);
  b.process->wait();
  const auto killed = Clock::now();
  EXPECT_NE(t.wait(), 0) << t.output();
  // Its update call broke at once: the trainer names it as soon as the pause ends.
  EXPECT_LT(Clock::now() - killed, 2s + 1s) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("receiver 2 of 2 (" + b.url + ")"));
  EXPECT_THAT(t.output(), HasSubstr("closed the connection"));
  EXPECT_THAT(t.output(), HasSubstr("round 0 ok"));
  std::cout << "the trainer, after receiver 2 was killed:\n" << t.output();
  ASSERT_TRUE(
      a.process->wait_for("receive failed: broadcast of '", 4 * std::chrono::seconds(kTransferS)))
      << a.process->output();
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(1, 40, 64, 0))
      << "receiver 1 keeps the last finished round";

  Served c = serve();
  cli::Child again(trainer({&a, &c}, test::free_port(), 1));
  ASSERT_EQ(again.wait(), 0) << again.output() << a.process->output() << c.process->output();
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(1, 40, 64, 0));
  EXPECT_EQ(HttpClient(c.url).weight_checksums(), test::expected_after(1, 40, 64, 0));
}

// The trainer is killed while both receivers wait inside round 0's broadcasts: each receiver's
// update fails within the deadline naming the broadcast, each stays up with no weights committed,
// and a fresh trainer syncs both.
TEST(NcclProcessFaults, ATrainerKilledMidTransferFailsBothReceiversWithinTheDeadline) {
  Served a = serve(), b = serve();
  cli::Child t(trainer({&a, &b}, test::free_port(), 1, {"--pause-at-tensor", "100"}));
  ASSERT_TRUE(t.wait_for("paused at tensor 100", 60s)) << t.output();
  t.kill(SIGKILL);
  t.wait();
  for (auto* r : {&a, &b}) {
    ASSERT_TRUE(r->process->wait_for("receive failed: broadcast of '",
                                     4 * std::chrono::seconds(kTransferS)))
        << r->process->output();
    EXPECT_TRUE(HttpClient(r->url).weight_checksums().empty());
  }
  cli::Child again(trainer({&a, &b}, test::free_port(), 2));
  ASSERT_EQ(again.wait(), 0) << again.output() << a.process->output() << b.process->output();
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(2, 40, 64, 0));
  EXPECT_EQ(HttpClient(b.url).weight_checksums(), test::expected_after(2, 40, 64, 0));
}

// An engine is never held by a dead trainer: with a transfer deadline of a minute, the
// receivers' receive fails within a second of the trainer's SIGKILL (its sockets close), and a
// new trainer syncs at once.
TEST(NcclProcessFaults, ATrainerKilledMidRoundReleasesItsReceiversWithinASecond) {
  constexpr int kLongS = 60;
  Served a = test::serve_receiver("nccl", kLongS), b = test::serve_receiver("nccl", kLongS);
  cli::Child t(
      test::nccl_trainer({&a, &b}, test::free_port(), 1, kLongS, {"--pause-at-tensor", "100"}));
  ASSERT_TRUE(t.wait_for("paused at tensor 100", 60s)) << t.output();
  const auto killed = Clock::now();
  t.kill(SIGKILL);
  t.wait();
  for (auto* r : {&a, &b})
    ASSERT_TRUE(r->process->wait_for("receive failed: broadcast of '", 30s))
        << r->process->output();
  const auto released_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  std::cout << "nccl: both receivers released " << released_ms << " ms after the trainer's kill\n";
  EXPECT_LT(released_ms, 1000);
  const auto again_at = Clock::now();
  cli::Child again(test::nccl_trainer({&a, &b}, test::free_port(), 2, kLongS));
  ASSERT_EQ(again.wait(), 0) << again.output() << a.process->output() << b.process->output();
  std::cout
      << "nccl: a new trainer's 2 rounds took "
      << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - again_at).count()
      << " ms\n";
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(2, 40, 64, 0));
}

// The CUDA path resolves libnccl at run time: without it the plugin still loads (its host path
// works, as every test above shows) and a CUDA trainer is refused with the reason, naming the
// library and how to point at it, before any call reaches the receiver.
TEST(NcclCuda, WithoutLibncclACudaTrainerIsRefusedSayingWhy) {
  const json init = {{"device", "cuda:0"}, {"world_size", 2}, {"rendezvous_timeout_s", 5}};
  cli::Child t({WT_TEST_TRAINER_PATH, "--backend", "nccl", "--init-info", init.dump(), "--url",
                "http://127.0.0.1:9", "--rounds", "1"},
               {"WT_NCCL_LIBRARY=/nonexistent/libnccl.so.2"});
  EXPECT_NE(t.wait(), 0);
  EXPECT_THAT(t.output(), HasSubstr("NCCL is not available here: /nonexistent/libnccl.so.2 could "
                                    "not be loaded"));
  EXPECT_THAT(t.output(), HasSubstr("set WT_NCCL_LIBRARY"));
}

// The CUDA path end to end: configs/nccl_cuda.yaml (trainer on cuda:0, receiver on cuda:1; NCCL
// takes one GPU per rank). Skips unless two GPUs are present.
TEST(NcclCuda, TwoGpusSyncVerifiedThroughWtLaunch) {
  int gpus = 0;
#ifdef WT_TEST_WITH_CUDA
  try {
    gpus = sdk::cuda::device_count();
  } catch (const sdk::Error&) {
  }
#endif
  if (gpus < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << gpus;
  cli::Child launch({WT_CLI_PATH, "launch", std::string(WT_SOURCE_DIR) + "/configs/nccl_cuda.yaml"},
                    {"WT_CACHE_DIR=" + std::string(WT_BUILD_DIR) + "/cache"});
  ASSERT_EQ(launch.wait(), 0) << launch.output();
  std::cout << launch.output();
  EXPECT_THAT(launch.output(), HasSubstr("OK: every round verified"));
}

}  // namespace
}  // namespace wt
