// `wt launch` as a user runs it: every CPU config in configs/ goes green, and bad configs get an
// error naming the file, the line and the key.
#include "support/free_port.hpp"
#include "support/process.hpp"
#include "support/test_configs.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include <unistd.h>

using ::testing::HasSubstr;
using ::testing::Not;

namespace wt {
namespace {

namespace fs = std::filesystem;

std::string cache_env() {
  return std::string("WT_CACHE_DIR=") + WT_BUILD_DIR + "/cache";
}

test::ProcessResult launch(const std::string& config, const std::string& flags = "--json") {
  return test::run_process(cache_env() + " " + WT_CLI_PATH + " launch " + config + " " + flags);
}

using test::write_config;

// The CPU configs (those with an embedded receiver and no CUDA device) shipped in configs/.
std::vector<std::string> cpu_configs() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(WT_SOURCE_DIR) / "configs")) {
    if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;  // layouts/: `wt plan`
    std::ifstream f(e.path());
    std::string text((std::istreambuf_iterator<char>(f)), {});
    if (text.find("embedded: false") == std::string::npos &&
        text.find("device: cuda") == std::string::npos)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The config to run: the quickstart as shipped (the first thing a user runs, on the 1 GB model),
// every other config on the tiny layout: what they test is the config (backend, receivers, rounds,
// verification), and five more syncs of 1 GB cost the suite half a minute. Under a sanitizer the
// quickstart too runs tiny: a sanitizer's shadow memory makes a trainer and two receivers each
// holding a 1 GB model (twice, staged and served) exceed the machine.
std::string as_run(const std::string& config) {
#ifndef WT_TEST_SANITIZED
  if (fs::path(config).filename() == "quickstart.yaml") return config;
#endif
  std::ifstream f(config);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  for (const char* big : {"model: qwen2.5-0.5b", "model: llama-3.2-1b"})
    for (auto p = text.find(big); p != std::string::npos; p = text.find(big))
      text.replace(p, std::strlen(big), "model: tiny");
  // A shipped config names a fixed rendezvous port ("must be free"); beside the suite's other
  // processes it may not be, so the run takes one that was free a moment ago.
  text = std::regex_replace(text, std::regex("master_port: [0-9]+"),
                            "master_port: " + std::to_string(test::free_port()));
  // A file of its own: the tests of this binary run as processes side by side, each rewriting the
  // same shipped configs.
  static int made = 0;
  return write_config(
      fmt::format("tiny-{}-{}-{}", ::getpid(), made++, fs::path(config).filename().string()), text);
}

TEST(Launch, EveryCpuConfigRunsGreen) {
  auto configs = cpu_configs();
  ASSERT_GE(configs.size(), 2u);
  for (const auto& c : configs) {
    auto r = launch(as_run(c));
    ASSERT_EQ(r.exit_code, 0) << c << "\n" << r.output;
    auto report = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_TRUE(report["ok"].get<bool>()) << c;
    ASSERT_FALSE(report["rounds"].empty());
    for (const auto& round : report["rounds"]) EXPECT_TRUE(round["verified"].get<bool>()) << c;
    // Rounds count from 1, as the progress lines and the table count them.
    for (std::size_t i = 0; i < report["rounds"].size(); ++i)
      EXPECT_EQ(report["rounds"][i]["round"].get<int>(), static_cast<int>(i) + 1) << c;
    EXPECT_GT(report["mean_gb_per_s"].get<double>(), 0.0);
  }
}

TEST(Launch, HumanOutputHasRoundsAndASummary) {
  auto cfg = write_config("small.yaml", R"(backend: ipc
init_info: {packed: true, packed_buffer_size_bytes: 1048576}
source: {generate: {model: tiny, dtype: bfloat16}}
rounds: 2
)");
  auto r = launch(cfg, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("round 1/2"));
  EXPECT_THAT(r.output, HasSubstr("round 2/2"));
  // The table numbers its rows as the progress lines do: 1 and 2, no round 0.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\n  1 +[0-9.]+ +[0-9.]+ +[0-9.]+  yes\n"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\n  2 +[0-9.]+ +[0-9.]+ +[0-9.]+  yes\n"));
  EXPECT_THAT(r.output, ::testing::Not(::testing::ContainsRegex("\n  0 +[0-9.]+ ")));
  EXPECT_THAT(r.output, HasSubstr("verified"));
  EXPECT_THAT(r.output, HasSubstr("OK: every round verified"));
}

// At debug level every process logs a line or more per round: the logs reach stderr tagged with
// their process, are not mistaken for errors, and no process stalls on a pipe nobody reads.
TEST(Launch, DebugLogsPassThroughAndDoNotFailTheRun) {
  auto cfg = write_config("chatty.yaml", R"(backend: ipc
init_info: {packed: false}
trainer: {ranks: 2}
source: {generate: {model: tiny, dtype: bfloat16}}
rounds: 400
training_step: {perturb_fraction: 0.001}
)");
  auto r =
      test::run_process("WT_LOG_LEVEL=debug " + cache_env() + " " + WT_CLI_PATH + " launch " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(r.output.size() > 4000 ? r.output.size() - 4000 : 0);
  EXPECT_THAT(r.output, HasSubstr("OK: every round verified"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] "));
  EXPECT_THAT(r.output, HasSubstr("[receiver] "));
  EXPECT_GT(r.output.size(), std::size_t{128} << 10) << "enough output to fill a pipe";
}

// Every log line at the most verbose level, from the trainer ranks and the receivers, for each
// backend that mints a session secret: the init info is logged (redacted), the secret never is
// (it is 64 hex digits; nothing else wt logs is).
TEST(Launch, NoSecretReachesTheLogsAtTraceLevel) {
  for (const char* name : {"nccl_host.yaml", "sparse_delta.yaml", "m2n_host.yaml"}) {
    const std::string cfg = as_run((fs::path(WT_SOURCE_DIR) / "configs" / name).string());
    auto r = test::run_process("WT_LOG_LEVEL=trace " + cache_env() + " " + WT_CLI_PATH +
                               " launch " + cfg);
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("initialised with {")) << name;
    if (std::string(name) != "m2n_host.yaml") {  // m2n's line ends in its plan, before the secret
      EXPECT_THAT(r.output, HasSubstr(R"("rank_keys":"<redacted>")")) << name;
    }
    std::smatch m;
    EXPECT_FALSE(std::regex_search(r.output, m, std::regex("[0-9a-f]{64}")))
        << name << ": " << m.str();
  }
}

struct BadConfig {
  std::string name, text, expected;
};

void PrintTo(const BadConfig& c, std::ostream* os) {
  *os << c.name;
}

class LaunchRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(LaunchRejects, NamingFileLineAndKey) {
  const auto& c = GetParam();
  auto path = write_config(c.name + ".yaml", c.text);
  auto r = launch(path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(path + c.expected)) << r.output;
}

const char* kGood = "backend: ipc\nsource: {generate: {model: tiny}}\n";

INSTANTIATE_TEST_SUITE_P(
    Configs, LaunchRejects,
    ::testing::Values(
        BadConfig{"unknown_key", std::string(kGood) + "rounds_: 3\n",
                  ":3:1: unknown key 'rounds_'"},
        BadConfig{"wrong_type", std::string(kGood) + "rounds: three\n",
                  ":3:9: 'rounds' must be an integer, got 'three'"},
        BadConfig{"shared_memory_type",
                  std::string(kGood) + "trainer:\n  weights_in_shared_memory: maybe\n",
                  ":4:29: 'trainer.weights_in_shared_memory' must be true or false, got 'maybe'"},
        BadConfig{"nested_unknown", std::string(kGood) + "receiver:\n  embeded: true\n",
                  ":4:3: unknown key 'receiver.embeded'"},
        BadConfig{
            "init_info_key",
            "backend: ipc\ninit_info:\n  packed: true\n  pakced: false\nsource: {generate: {model: "
            "tiny}}\n",
            ":4:3: init_info.pakced: invalid init_info for backend 'ipc': unknown field 'pakced'"},
        BadConfig{
            "init_info_type",
            "backend: ipc\ninit_info:\n  packed: \"yes\"\nsource: {generate: {model: tiny}}\n",
            ":3:3: init_info.packed: invalid init_info for backend 'ipc': field 'packed' must be a "
            "boolean, got a string"},
        BadConfig{"rank_set",
                  "backend: ipc\ninit_info:\n  rank: 0\nsource: {generate: {model: tiny}}\n",
                  ":3:9: 'init_info.rank' is set by wt launch"},
        BadConfig{"syntax", "backend: ipc\nsource: [unclosed\n", ":3:1: not valid YAML"},
        BadConfig{"no_source", "backend: ipc\n", ":1:1: missing key 'source'"},
        BadConfig{"unknown_model", "backend: ipc\nsource: {generate: {model: gpt5}}\n",
                  ": unknown model layout 'gpt5'"},
        BadConfig{"missing_backend_plugin", "backend: nosuch\nsource: {generate: {model: tiny}}\n",
                  ": no plugin for backend 'nosuch'"}),
    [](const auto& p) { return p.param.name; });

TEST(Launch, ReceiverGoneIsAnErrorNotAHang) {
  auto cfg = write_config(
      "gone.yaml", std::string(kGood) +
                       "receiver: {embedded: false, url: \"http://127.0.0.1:1\", timeout_s: 5}\n");
  auto r = launch(cfg, "");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("POST http://127.0.0.1:1/init_weight_transfer_engine failed"));
  EXPECT_THAT(r.output, HasSubstr("FAILED"));
}

TEST(Launch, AReceiverRefusingItsInitIsNamedAndTheRunEndsAtOnce) {
  // world_size 2 leaves no rank for the second receiver: it refuses init, which the run reports
  // naming it, without waiting for any deadline.
  auto cfg = write_config("refused-init.yaml",
                          "backend: nccl\ninit_info: {master_address: 127.0.0.1, master_port: " +
                              std::to_string(test::free_port()) +
                              ", world_size: 2, rendezvous_timeout_s: 60}\n"
                              "source: {generate: {model: tiny}}\nreceiver: {count: 2}\n"
                              "rounds: 1\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = launch(cfg, "");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("receiver 2 of 2 (http://127.0.0.1:"));
  EXPECT_THAT(r.output, HasSubstr("rank_offset 2 is not in 1..1"));
  EXPECT_LT(s, 15) << r.output;
}

// Ranks on one host meet with the secret and port the coordinator wrote into its rendezvous
// directory: a rank takes them only from a regular file of its user's that nobody else can read
// (one others could read, or a link, could be a stranger's), and says which file it refused.
TEST(Launch, ATrainerRankTakesTheGroupSecretOnlyFromAFileNobodyElseCanRead) {
  char tmpl[] = "/tmp/wt-test-group-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const fs::path file = dir / "trainer-group.json";
  const std::string config = std::string(WT_SOURCE_DIR) + "/configs/ipc_two_ranks.yaml";
  ASSERT_EQ(
      test::run_process(std::string(WT_CLI_PATH) + " gen-checkpoint --model tiny " + dir.string())
          .exit_code,
      0);
  const std::string rank1 = std::string(WT_CLI_PATH) + " launch " + config +
                            " --trainer-rank 1 --receiver-url http://127.0.0.1:9 --checkpoint " +
                            (dir / "model.safetensors").string() + " --rendezvous-dir " +
                            dir.string();
  std::ofstream(file) << nlohmann::json{{"port", 29999}, {"secret", std::string(64, 'a')}}.dump();
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  auto readable = test::run_process(rank1);
  EXPECT_NE(readable.exit_code, 0) << readable.output;
  EXPECT_THAT(readable.output, HasSubstr("trainer group: " + file.string() +
                                         ": not a file of this user's that only it can read"));
  fs::rename(file, dir / "elsewhere.json");
  fs::create_symlink(dir / "elsewhere.json", file);
  auto link = test::run_process(rank1);
  EXPECT_NE(link.exit_code, 0) << link.output;
  EXPECT_THAT(link.output, HasSubstr("trainer group: " + file.string() + ": "));
  fs::remove_all(dir);
}

TEST(Launch, DryRunSaysWhereThisProcessSitsUnderEachLauncherAndStartsNothing) {
  const std::string config = std::string(WT_SOURCE_DIR) + "/configs/ipc_two_ranks.yaml";
  // Whatever launcher runs this suite, its variables are not the ones under test.
  const std::string clean =
      "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT -u SLURM_PROCID "
      "-u SLURM_NTASKS -u SLURM_LOCALID -u SLURM_STEP_NODELIST -u SLURM_JOB_NODELIST "
      "-u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u LOCAL_WORLD_SIZE ";
  auto plain = test::run_process(clean + WT_CLI_PATH + " launch " + config + " --dry-run");
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("trainer ranks: 2"));
  EXPECT_THAT(plain.output, HasSubstr("launcher: none found"));
  // A sharded source says so (each rank sends only its slice).
  auto sharded = test::run_process(clean + WT_CLI_PATH + " launch " + WT_SOURCE_DIR +
                                   "/configs/m2n_host.yaml --dry-run");
  EXPECT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_THAT(sharded.output, HasSubstr("  source.shard: each trainer rank sends only its slice "
                                        "along dim 0 (torch.chunk's split over the 2 rank(s))"));
  auto torchrun = test::run_process(
      "env -u SLURM_PROCID RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 "
      "MASTER_ADDR=10.1.2.3 MASTER_PORT=29500 WT_TRAINER_SECRET=" +
      std::string(64, '7') + " " + std::string(WT_CLI_PATH) + " launch " + config + " --dry-run");
  EXPECT_EQ(torchrun.exit_code, 0) << torchrun.output;
  EXPECT_THAT(torchrun.output,
              HasSubstr("launcher: torchrun (from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
                        "MASTER_ADDR, MASTER_PORT)"));
  EXPECT_THAT(torchrun.output, HasSubstr("this process: trainer rank 1 of 2, local rank 0, the "
                                         "job on 2 host(s)"));
  EXPECT_THAT(torchrun.output, HasSubstr("launcher's store: 10.1.2.3:29500 (MASTER_PORT, which wt "
                                         "does not bind)"));
  EXPECT_THAT(torchrun.output,
              HasSubstr("trainer group: rank 0 hosts its rendezvous at 10.1.2.3:29510 "
                        "(MASTER_ADDR, trainer.group_port), proven with the secret from "
                        "WT_TRAINER_SECRET"));
  EXPECT_THAT(torchrun.output, HasSubstr("this rank's pairs: on "));
  EXPECT_THAT(torchrun.output, Not(HasSubstr("this rank's pairs: on none")));
  // Without the secret, the dry run says why the run would refuse.
  auto no_secret = test::run_process(
      "env -u WT_TRAINER_SECRET -u SLURM_PROCID RANK=1 WORLD_SIZE=2 "
      "MASTER_ADDR=10.1.2.3 " +
      std::string(WT_CLI_PATH) + " launch " + config + " --dry-run");
  EXPECT_NE(no_secret.exit_code, 0);
  EXPECT_THAT(no_secret.output, HasSubstr("none was given: export WT_TRAINER_SECRET="));
  auto slurm =
      test::run_process(clean + "SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_JOB_NODELIST='gpu[07-10]' " +
                        std::string(WT_CLI_PATH) + " launch " + config + " --dry-run");
  EXPECT_NE(slurm.exit_code, 0);
  EXPECT_THAT(slurm.output,
              HasSubstr("trainer.ranks is 2, but the launcher says the world size is 4: SLURM "
                        "(SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST)"));
  // Everything it resolved comes first, then every problem: here hosts that do not resolve and
  // no secret, both named.
  auto unresolved = test::run_process(
      clean + "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_JOB_NODELIST='wt-no-such-host[3-4].invalid' " +
      std::string(WT_CLI_PATH) + " launch " + config + " --dry-run");
  EXPECT_NE(unresolved.exit_code, 0);
  EXPECT_THAT(unresolved.output, HasSubstr("this process: trainer rank 1 of 2, local rank 0, the "
                                           "job on 2 host(s)"));
  EXPECT_THAT(unresolved.output, HasSubstr("hosts (SLURM_JOB_NODELIST): "
                                           "wt-no-such-host3.invalid, wt-no-such-host4.invalid"));
  EXPECT_THAT(unresolved.output, HasSubstr("2 problem(s) a run would stop at:\n"
                                           "  - SLURM_JOB_NODELIST 'wt-no-such-host3.invalid' "
                                           "(trainer rank 0's host) does not resolve\n"
                                           "  - the 2 trainer ranks meet over TCP"));
}

}  // namespace
}  // namespace wt
