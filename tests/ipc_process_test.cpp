// The ipc backend across real processes: `wt serve` receives, wt_test_trainer processes send over
// HTTP. Byte-exact results are checked through the server's checksums; /dev/shm is checked after
// success, after a SIGKILLed trainer and after a SIGKILLed server.
#include <wt/services/http_client.hpp>

#include "subprocess.hpp"
#include "support/model.hpp"
#include "support/process.hpp"
#include "support/shm.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <random>
#include <thread>

using ::testing::HasSubstr;

namespace wt {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> trainer_args(const std::string& url, std::vector<std::string> extra) {
  std::vector<std::string> a{WT_TEST_TRAINER_PATH, "--url", url};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

class IpcProcess : public ::testing::TestWithParam<bool> {};

TEST_P(IpcProcess, TwoProcessesSyncByteExactOverSeveralRounds) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  std::vector<std::string> extra{"--rounds", "4"};
  if (GetParam()) extra.insert(extra.end(), {"--packed", "--buffer-bytes", "65536"});
  cli::Child trainer(trainer_args(url, extra));
  int rc = trainer.wait();
  ASSERT_EQ(rc, 0) << trainer.output();
  EXPECT_THAT(trainer.output(), HasSubstr("round 3 ok"));

  HttpClient client(url);
  auto got = client.weight_checksums();
  auto want = test::expected_after(4, 40, 64, 0);
  ASSERT_EQ(got.size(), 202u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(client.get("/weight_info")["weight_version"], "step-3");
  EXPECT_TRUE(test::wt_segments_of(trainer.pid()).empty());
}

INSTANTIATE_TEST_SUITE_P(PackedAndUnpacked, IpcProcess, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Packed" : "Unpacked"; });

TEST(IpcProcess, WeightsInADevShmFileAreExportedInPlaceByteExact) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  // Only the trainer logs at debug level (its log counts in-place tensors): a server whose output
  // nobody reads must not fill its pipe, nor may later tests in this process inherit the level.
  setenv("WT_LOG_LEVEL", "debug", 1);
  cli::Child trainer(trainer_args(url, {"--rounds", "4", "--weights-in-shm"}));
  unsetenv("WT_LOG_LEVEL");
  ASSERT_EQ(trainer.wait(), 0) << trainer.output();
  EXPECT_THAT(trainer.output(), HasSubstr("1 update(s), 202 tensor(s) exported in place"));
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(4, 40, 64, 0));
  EXPECT_EQ(HttpClient(url).get("/weight_info")["weight_version"], "step-3");
}

// unshare(1), if this host lets this user make a PID namespace with it.
std::optional<std::string> unshare_program() {
  for (const char* p : {"/usr/bin/unshare", "/bin/unshare"})
    if (access(p, X_OK) == 0 &&
        test::run_process(std::string(p) + " --pid --fork --kill-child true").exit_code == 0)
      return p;
  return std::nullopt;
}

// Finding 5 end to end: a trainer in another PID namespace that shares /dev/shm (a container).
// Its pid is 1 there and means another process here (or none): the receiver's sweeps, which run
// at every round's start and after every update, used to take its live segments for a dead
// process's and unlink them, failing the round. Every variant syncs byte-exact.
TEST(IpcProcessNamespaces, ATrainerInAnotherPidNamespaceSyncs) {
  auto unshare = unshare_program();
  if (!unshare) GTEST_SKIP() << "cannot create a PID namespace here (unshare --pid --fork)";
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  for (auto extra : std::vector<std::vector<std::string>>{
           {}, {"--packed", "--buffer-bytes", "65536"}, {"--weights-in-shm"}}) {
    std::vector<std::string> argv{
        *unshare, "--pid",    "--fork", "--kill-child", WT_TEST_TRAINER_PATH, "--url",
        url,      "--rounds", "3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    cli::Child trainer(argv);
    ASSERT_EQ(trainer.wait(), 0) << trainer.output();
    EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(3, 40, 64, 0))
        << (extra.empty() ? "unpacked" : extra[0]);
    EXPECT_TRUE(test::wt_segments_of(1).empty()) << "its pid there is 1";
    EXPECT_TRUE(test::liveness_files_of(1).empty());
  }
}

TEST(IpcProcessGroup, HandlesMergeAtTheInitInfoSenderNotAtGroupRankZero) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  auto dir = std::filesystem::temp_directory_path() / ("wt-rdv-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  for (bool packed : {false, true}) {
    auto sub = (dir / (packed ? "packed" : "unpacked")).string();
    std::vector<std::string> common{"--rounds", "2", "--group-size", "2", "--rendezvous-dir", sub};
    if (packed) common.insert(common.end(), {"--packed", "--buffer-bytes", "65536"});
    // Group rank 0 is a non-sender and starts first; the sender (init-info rank 0) is group rank 1
    // and starts later.
    auto a = common;
    a.insert(a.end(), {"--rank", "1", "--group-rank", "0"});
    cli::Child first(trainer_args(url, a));
    std::this_thread::sleep_for(300ms);
    auto b = common;
    b.insert(b.end(), {"--rank", "0", "--group-rank", "1"});
    cli::Child sender(trainer_args(url, b));
    ASSERT_EQ(sender.wait(), 0) << sender.output();
    ASSERT_EQ(first.wait(), 0) << first.output();
    EXPECT_THAT(first.output(), HasSubstr("rpc_calls=0"));
    EXPECT_THAT(sender.output(), ::testing::Not(HasSubstr("rpc_calls=0")));
    EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(2, 40, 64, 0));
    EXPECT_TRUE(test::wt_segments_of(first.pid()).empty());
    EXPECT_TRUE(test::wt_segments_of(sender.pid()).empty());
  }
  std::filesystem::remove_all(dir);
}

TEST(IpcProcessFaults, SigkilledTrainerLeavesNoSegmentOnceTheHostMovesOn) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  std::mt19937 rng(static_cast<uint32_t>(getpid()));
  for (int attempt = 0; attempt < 3; ++attempt) {
    cli::Child trainer(
        trainer_args(url, {"--rounds", "1000000", "--packed", "--buffer-bytes", "65536"}));
    ASSERT_TRUE(trainer.wait_for("round 0 ok", 30s)) << trainer.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 200));
    trainer.kill(SIGKILL);
    EXPECT_EQ(trainer.wait(), 128 + SIGKILL);
    // A new trainer re-initialises the worker, which ends the dead trainer's session; the next
    // engine on the host removes what the dead one could not.
    cli::Child next(trainer_args(url, {"--rounds", "1"}));
    ASSERT_EQ(next.wait(), 0) << next.output();
    EXPECT_TRUE(test::wt_segments_of(trainer.pid()).empty()) << "attempt " << attempt;
    EXPECT_TRUE(test::liveness_files_of(trainer.pid()).empty())
        << "the dead trainer's liveness file, attempt " << attempt;
    EXPECT_TRUE(test::wt_segments_of(next.pid()).empty());
    EXPECT_TRUE(test::liveness_files_of(next.pid()).empty()) << "removed at its normal exit";
  }
  EXPECT_EQ(HttpClient(url).weight_checksums(), test::expected_after(1, 40, 64, 0));
}

TEST(IpcProcessFaults, SigkilledServerFailsTheTrainerCleanly) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  cli::Child trainer(trainer_args(url, {"--rounds", "1000", "--packed", "--buffer-bytes", "262144",
                                        "--layers", "60", "--width", "128"}));
  ASSERT_TRUE(trainer.wait_for("round 1 ok", 30s)) << trainer.output();
  server->kill(SIGKILL);
  EXPECT_EQ(server->wait(), 128 + SIGKILL);
  int rc = trainer.wait();
  EXPECT_EQ(rc, 1) << trainer.output();
  EXPECT_THAT(trainer.output(), HasSubstr("error: ipc send_weights failed"));
  EXPECT_TRUE(test::wt_segments_of(trainer.pid()).empty());
  EXPECT_TRUE(test::wt_segments_of(server->pid()).empty());
}

}  // namespace
}  // namespace wt
