// Faults across real processes (ipc backend, `wt serve` + wt_test_trainer): a trainer or the
// receiver killed at rendezvous, mid-transfer and before finish. The survivors fail within their
// deadline naming the phase, the receiver keeps its last complete version and never serves a mix
// as complete, and nothing is left in /dev/shm. (The coordinator's death is in hardening_test.)
#include <wt/services/http_client.hpp>

#include "subprocess.hpp"
#include "support/model.hpp"
#include "support/shm.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

using ::testing::HasSubstr;

namespace wt {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr int kLayers = 8, kWidth = 64;

std::vector<std::string> trainer(const std::string& url, std::vector<std::string> extra) {
  std::vector<std::string> a{
      WT_TEST_TRAINER_PATH,  "--url", url, "--layers", std::to_string(kLayers), "--width",
      std::to_string(kWidth)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> wire(bool packed) {
  // Packed with small buffers: several updates per round, so "update 1" is mid-transfer.
  if (packed) return {"--packed", "--buffer-bytes", "65536"};
  return {};
}

nlohmann::json weight_version(const std::string& url) {
  return HttpClient(url).get("/weight_info")["weight_version"];
}

// A complete round 0 of the model with `seed`, checked.
void sync(const std::string& url, bool packed, uint32_t seed) {
  auto args = trainer(url, wire(packed));
  args.insert(args.end(), {"--rounds", "1", "--seed", std::to_string(seed)});
  cli::Child t(args);
  ASSERT_EQ(t.wait(), 0) << t.output();
  ASSERT_EQ(HttpClient(url).weight_checksums(), test::expected_after(1, kLayers, kWidth, seed));
}

// phase: the call before which the trainer is killed; update index for "update".
using Phase = std::tuple<std::string, int, bool>;

std::string phase_name(const ::testing::TestParamInfo<Phase>& p) {
  auto [call, update, packed] = p.param;
  return call + (call == "update" ? std::to_string(update) : "") +
         (packed ? "_packed" : "_unpacked");
}

class TrainerKilled : public ::testing::TestWithParam<Phase> {};

TEST_P(TrainerKilled, ReceiverKeepsItsLastCompleteVersionAndServesTheNextTrainer) {
  auto [call, update, packed] = GetParam();
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  sync(url, packed, 1);
  const auto complete = HttpClient(url).weight_checksums();
  ASSERT_EQ(weight_version(url), "step-0");

  auto args = trainer(url, wire(packed));
  args.insert(args.end(), {"--rounds", "1", "--seed", "2", "--pause-before", call, "--pause-update",
                           std::to_string(update)});
  cli::Child victim(args);
  ASSERT_TRUE(victim.wait_for("paused before " + call, 30s)) << victim.output();
  victim.kill(SIGKILL);
  victim.wait();

  // Neither the half-sent round nor a mix: exactly the last complete version.
  EXPECT_EQ(HttpClient(url).weight_checksums(), complete);
  EXPECT_EQ(weight_version(url), "step-0");
  // A new trainer syncs, and what the dead one staged never reaches its finish.
  sync(url, packed, 3);
  EXPECT_TRUE(test::wt_segments_of(victim.pid()).empty()) << "the dead trainer's segments";
  EXPECT_EQ(server->wait_for("never printed", 0ms), std::nullopt) << "the server is still up";
}

INSTANTIATE_TEST_SUITE_P(Phases, TrainerKilled,
                         ::testing::Values(Phase{"init", 0, false}, Phase{"start", 0, false},
                                           Phase{"update", 0, false}, Phase{"finish", 0, false},
                                           Phase{"update", 1, true}, Phase{"update", 3, true},
                                           Phase{"finish", 0, true}),
                         phase_name);

class ReceiverKilled : public ::testing::TestWithParam<Phase> {};

TEST_P(ReceiverKilled, TrainerFailsWithinItsDeadlineNamingTheCallAndLeavesNoSegment) {
  auto [call, update, packed] = GetParam();
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  auto args = trainer(url, wire(packed));
  args.insert(args.end(),
              {"--rounds", "2", "--pause-round", "1", "--pause-before", call, "--pause-update",
               std::to_string(update), "--pause-ms", "1500", "--http-timeout-s", "10"});
  cli::Child t(args);
  ASSERT_TRUE(t.wait_for("paused before " + call, 30s)) << t.output();
  server->kill(SIGKILL);
  server->wait();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(t.wait(), 1) << t.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
  const std::string route = call == "start"    ? "/start_weight_update"
                            : call == "update" ? "/update_weights"
                                               : "/finish_weight_update";
  // The first failure names the call that broke (a retry may add its own).
  const auto first = t.output().find("failed: POST ");
  ASSERT_NE(first, std::string::npos) << t.output();
  EXPECT_EQ(t.output().substr(first + 13, url.size() + route.size() + 7), url + route + " failed")
      << t.output();
  EXPECT_TRUE(test::wt_segments_of(t.pid()).empty());
}

INSTANTIATE_TEST_SUITE_P(Phases, ReceiverKilled,
                         ::testing::Values(Phase{"start", 0, false}, Phase{"update", 0, false},
                                           Phase{"finish", 0, false}, Phase{"update", 2, true},
                                           Phase{"finish", 0, true}),
                         phase_name);

TEST(TrainerKilledAtRendezvous, TheOtherRankFailsWithinTheGroupDeadline) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "ipc"});
  sync(url, false, 1);
  const auto complete = HttpClient(url).weight_checksums();
  char tmpl[] = "/tmp/wt-fault-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  auto group = [&](int rank) {
    return trainer(
        url, {"--rounds", "1", "--group-size", "2", "--group-rank", std::to_string(rank), "--rank",
              std::to_string(rank), "--rendezvous-dir", tmpl, "--group-timeout-s", "3"});
  };
  cli::Child peer(group(1));
  peer.kill(SIGKILL);  // dies before (or while) joining the group
  peer.wait();
  const auto t0 = std::chrono::steady_clock::now();
  cli::Child survivor(group(0));
  EXPECT_EQ(survivor.wait(), 1) << survivor.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_THAT(survivor.output(), HasSubstr("trainer group rendezvous (rank 0 of 2"));
  EXPECT_EQ(HttpClient(url).weight_checksums(), complete);
  EXPECT_TRUE(test::wt_segments_of(survivor.pid()).empty());
  fs::remove_all(tmpl);
}

}  // namespace
}  // namespace wt
