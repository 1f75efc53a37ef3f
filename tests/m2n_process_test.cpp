// The m2n backend across real processes, as `wt launch` runs it: trainer ranks that each hold a
// slice of every tensor send their pieces straight to the receivers, byte-exact on every worker
// rank (rank 0 checks every tensor's checksum on every receiver, TP slices included); a plan that
// cannot be made, or a source a backend cannot take, is refused at init naming what is wrong; a
// trainer rank killed mid-round fails the round within the transfer deadline.
#include "subprocess.hpp"
#include "support/free_port.hpp"

#include <wt/services/http_client.hpp>
#include "support/process.hpp"
#include "support/test_configs.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

using ::testing::HasSubstr;

namespace wt {
namespace {

namespace fs = std::filesystem;

using test::write_config;

test::ProcessResult launch(const std::string& config) {
  return test::run_process(std::string("WT_CACHE_DIR=") + WT_BUILD_DIR + "/cache " + WT_CLI_PATH +
                           " launch " + config + " 2>&1");
}

// A script that ends by printing "exit RC after MS ms" (the run it timed): its output and both.
struct TimedRun {
  std::string output;
  int exit_code = -1, ms = -1;
};
TimedRun run_timed(const std::string& script) {
  TimedRun t;
  t.output = test::run_process("bash " + script + " 2>&1").output;
  const auto at = t.output.rfind("exit ");
  if (at == std::string::npos ||
      std::sscanf(t.output.c_str() + at, "exit %d after %d ms", &t.exit_code, &t.ms) != 2)
    ADD_FAILURE() << "the script did not report its run:\n" << t.output;
  return t;
}

// `wt launch config` in the background; once its output shows `after`, trainer rank `rank` is
// SIGKILLed. The time from the kill to the run's end is what the caller measures.
TimedRun kill_trainer_rank_mid_run(const std::string& config, const std::string& after, int rank) {
  const std::string script =
      write_config(fs::path(config).filename().string() + ".kill.sh",
                   fmt::format(R"(
WT_CACHE_DIR={0}/cache {1} launch {2} > {2}.log 2>&1 &
pid=$!
for i in $(seq 1200); do grep -q '{3}' {2}.log && break; sleep 0.05; done
pkill -9 -f -- '{2} --trainer-rank {4}'
start=$(date +%s%N)
wait $pid
rc=$?
end=$(date +%s%N)
cat {2}.log
echo "exit $rc after $(( (end - start) / 1000000 )) ms"
)",
                               WT_BUILD_DIR, WT_CLI_PATH, config, after, rank));
  return run_timed(script);
}

struct RunSetup {
  int trainer_ranks = 2;
  int shard_dim = 0;
  std::string dtype = "bfloat16";
  int receivers = 2;
  std::string extra_init_info;  // more init_info lines
  std::string model = "tiny";
  int rounds = 2;
  std::string backend = "m2n";
  int receiver_tp = 1;  // worker ranks of each embedded receiver (wt serve --tensor-parallel-size)
  int engine_tensors = 0;  // the tensors each worker rank holds under an engine_layout (0: none)
};

std::string config_text(const RunSetup& s) {
  return fmt::format(R"(backend: {}
init_info:
  master_address: 127.0.0.1
  master_port: {}
{}
trainer:
  ranks: {}
source:
  generate: {{model: {}, dtype: {}}}
  shard: {{rank_of: trainer, dim: {}}}
receiver:
  embedded: true
  count: {}{}
rounds: {}
verify: true
)",
                     s.backend, test::free_port(), s.extra_init_info, s.trainer_ranks, s.model,
                     s.dtype, s.shard_dim, s.receivers,
                     s.receiver_tp > 1 ? fmt::format("\n  tensor_parallel_size: {}", s.receiver_tp)
                                       : std::string(),
                     s.rounds);
}

struct Case {
  const char* name;
  RunSetup setup;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class M2nSyncs : public ::testing::TestWithParam<Case> {};

TEST_P(M2nSyncs, EveryRoundVerifiedOnEveryWorkerRank) {
  const Case& c = GetParam();
  auto r = launch(write_config(std::string("m2n-") + c.name + ".yaml", config_text(c.setup)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("OK: every round verified"));
  // Every tensor of the layout (tiny: 51, qwen2.5-0.5b: 290) on every worker rank, each round.
  const int workers = c.setup.receivers * c.setup.receiver_tp;
  const int tensors = c.setup.engine_tensors > 0 ? c.setup.engine_tensors
                      : c.setup.model == "tiny"  ? 51
                                                 : 290;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("verified {}/{} tensors", tensors * workers,
                                              tensors * workers)))
      << r.output;
}

constexpr const char* kTpRules =
    "  tensor_parallel: 2\n"
    "  tp_rules: [{match: \"*.o_proj.weight\", dim: 1}, {match: \"*.down_proj.weight\", dim: 1},\n"
    "             {match: \"*_proj.weight\", dim: 0}, {match: \"*embed_tokens*\", dim: 0}]";

// The engine's own tensors: q, k and v fused (each TP-sliced first), the four layers' down
// projections (split along dim 1) stacked as experts are: 51 tensors held as 40.
constexpr const char* kEngineLayout =
    "  tensor_parallel: 2\n"
    "  tp_rules: [{match: \"*.o_proj.weight\", dim: 1}, {match: \"*.down_proj.weight\", dim: 1},\n"
    "             {match: \"*_proj.weight\", dim: 0}, {match: \"*embed_tokens*\", dim: 0}]\n"
    "  engine_layout:\n"
    "    - {fuse: \"*.qkv_proj.weight\", parts: [\"*.q_proj.weight\", \"*.k_proj.weight\",\n"
    "                                        \"*.v_proj.weight\"]}\n"
    "    - {stack: model.layers.down_proj_stacked, experts: 4,\n"
    "       parts: [\"model.layers.#.mlp.down_proj.weight\"]}";

// Block FP8 on the wire, into the engine's fused gate_up_proj (and its scales).
constexpr const char* kBlockFp8 =
    "  tensor_parallel: 2\n"
    "  wire_dtype: float8_e4m3fn\n"
    "  tp_rules: [{match: \"*.o_proj.weight\", dim: 1}, {match: \"*.down_proj.weight\", dim: 1},\n"
    "             {match: \"*_proj.weight\", dim: 0}, {match: \"*embed_tokens*\", dim: 0}]\n"
    "  engine_layout:\n"
    "    - {fuse: \"*.gate_up_proj.weight\", parts: [\"*.gate_proj.weight\", "
    "\"*.up_proj.weight\"]}";

INSTANTIATE_TEST_SUITE_P(
    Layouts, M2nSyncs,
    ::testing::Values(
        Case{"two_ranks_rows_bf16_two_replicas", {2, 0, "bfloat16", 2, "", "tiny", 2, "m2n"}},
        Case{"three_ranks_columns_fp32_two_replicas", {3, 1, "float32", 2, "", "tiny", 2, "m2n"}},
        Case{"two_ranks_rows_one_replica_of_tp2",
             {2, 0, "bfloat16", 2, kTpRules, "tiny", 2, "m2n"}},
        Case{"three_ranks_columns_two_replicas_of_tp2",
             {3, 1, "float32", 4, kTpRules, "tiny", 2, "m2n"}},
        // One `wt serve --tensor-parallel-size 2` per replica.
        Case{"two_ranks_rows_one_server_of_tp2",
             {2, 0, "bfloat16", 1, kTpRules, "tiny", 2, "m2n", 2}},
        Case{"three_ranks_columns_two_servers_of_tp2",
             {3, 1, "float32", 2, kTpRules, "tiny", 3, "m2n", 2}},
        // Into the engine's own fused and stacked tensors, each rank's composed slices verified.
        Case{"three_ranks_columns_engine_layout_one_server_of_tp2",
             {3, 1, "bfloat16", 1, kEngineLayout, "tiny", 2, "m2n", 2, 40}},
        // Block FP8 from three ranks whose 86-row (gate, up) and 22-row (down) shards cut
        // blocks, into a fused gate_up_proj and its fused scales; attention kept bf16 (its TP
        // slices cut blocks): 51 tensors held as 55 (gate_up and three scales per layer).
        Case{"three_ranks_rows_block_fp8_one_server_of_tp2",
             {3, 0, "bfloat16", 1, kBlockFp8, "tiny", 3, "m2n", 2, 55}},
        // Eight trainer ranks (a process each) into four `wt serve --tensor-parallel-size 2`.
        Case{"eight_ranks_rows_four_servers_of_tp2",
             {8, 0, "bfloat16", 4, kTpRules, "tiny", 2, "m2n", 2}},
        // 1 GB of column shards, every piece packed: more
        // than the bytes in flight either side may hold.
        Case{"two_ranks_columns_1gb_past_the_inflight_bound",
             {2, 1, "bfloat16", 2, "", "qwen2.5-0.5b", 2, "m2n"}}),
    [](const auto& info) { return std::string(info.param.name); });

// The config with its one embedded receiver replaced by `wt serve` at 127.0.0.1:port.
std::string with_receiver_at(std::string text, int port, int timeout_s) {
  const std::string embedded = "  embedded: true\n  count: 1\n";
  text.replace(text.find(embedded), embedded.size(),
               fmt::format("  embedded: false\n  url: http://127.0.0.1:{}\n  timeout_s: {}\n", port,
                           timeout_s));
  return text;
}

// `wt launch config` against one `wt serve` (its backend options `serve_config`) behind
// tests/helpers/refusing_proxy.py at proxy_port, which refuses or holds the `nth` `call` (see the
// proxy). The run is timed from that moment ("refused-at") to the launch's end.
TimedRun launch_behind_refusing_proxy(const std::string& config, const std::string& serve_config,
                                      int serve_port, int proxy_port, int nth,
                                      const std::string& call) {
  const std::string script =
      write_config(fs::path(config).filename().string() + ".proxy.sh",
                   fmt::format(R"(
{1} serve --host 127.0.0.1 --port {3} --weight-transfer-config '{6}' > {2}.serve.log 2>&1 &
serve=$!
/usr/bin/python3 {5}/tests/helpers/refusing_proxy.py {4} {3} {7} {8} > {2}.proxy.log 2>&1 &
proxy=$!
trap 'kill -9 $serve $proxy' EXIT
for i in $(seq 100); do grep -q 'listening on' {2}.serve.log && break; sleep 0.1; done
grep -q 'listening on' {2}.serve.log || {{ cat {2}.serve.log; echo "the receiver did not start"; exit 3; }}
for i in $(seq 100); do grep -q 'listening on' {2}.proxy.log && break; sleep 0.1; done
grep -q 'listening on' {2}.proxy.log || {{ cat {2}.proxy.log; echo "the proxy did not start"; exit 3; }}
WT_CACHE_DIR={0}/cache {1} launch {2} > {2}.log 2>&1
rc=$?
end=$(date +%s%N)
cat {2}.log {2}.proxy.log
start=$(sed -n 's/^refused-at //p' {2}.proxy.log)
echo "exit $rc after $(( (end - ${{start:-$end}}) / 1000000 )) ms"
)",
                               WT_BUILD_DIR, WT_CLI_PATH, config, serve_port, proxy_port,
                               WT_SOURCE_DIR, serve_config, nth, call));
  return run_timed(script);
}

// A receiver that stops answering at the init (a proxy holds the call, unanswered): every trainer
// rank fails at the rendezvous deadline (2 s), not at the HTTP client's (60 s), since rank 0
// interrupts the init call it gives up on (the host's abandon_calls).
TEST(M2nRefuses, AReceiverHoldingTheInitDoesNotHoldAFailedInitPastTheRendezvousDeadline) {
  RunSetup s;
  s.receivers = 1;
  s.extra_init_info = "  rendezvous_timeout_s: 2";
  const int serve_port = test::free_port(), proxy_port = test::free_port();
  const std::string config =
      write_config("m2n-held-init.yaml", with_receiver_at(config_text(s), proxy_port, 60));
  const TimedRun r = launch_behind_refusing_proxy(config, R"({"backend": "m2n"})", serve_port,
                                                  proxy_port, 1, "init_weight_transfer_engine");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("refused-at ")) << r.output;
  for (int k = 0; k < 2; ++k)  // two trainer ranks and one worker rank: a mesh of 3
    EXPECT_THAT(r.output, HasSubstr(fmt::format("rank {}: m2n trainer_init failed: rendezvous of 3 "
                                                "ranks at 127.0.0.1:",
                                                k)))
        << r.output;
  EXPECT_LT(r.ms, 10000) << r.output;  // from the held call: 2 s, and the launch's teardown
  std::printf("a receiver holding the init: the m2n launch failed %d ms after the call\n", r.ms);
}

TEST(M2nRefuses, WorkerRanksThatDoNotFormReplicasOfTheTensorParallelSize) {
  RunSetup s;
  s.receivers = 3;
  s.extra_init_info = "  tensor_parallel: 2";
  auto r = launch(write_config("m2n-tp-odd.yaml", config_text(s)));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("3 worker rank(s) (world_size 4 - 1) do not form replicas of "
                                  "tensor_parallel 2"));
}

TEST(M2nRefuses, ATpRuleOnADimensionTheParameterLacks) {
  RunSetup s;
  s.extra_init_info = "  tensor_parallel: 2\n  tp_rules: [{match: \"*norm*\", dim: 1}]";
  auto r = launch(write_config("m2n-tp-dim.yaml", config_text(s)));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("the tp_rules split 'model.layers.0.input_layernorm.weight' "
                                  "along dimension 1, but it has 1 dimension(s)"));
}

TEST(M2nRefuses, ASourceOfSlicesGoesOnlyToABackendThatMovesSlices) {
  RunSetup s;
  s.backend = "nccl";
  auto r = launch(write_config("nccl-sharded.yaml", config_text(s)));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("does not take sharded sources (no WT_CAP_SHARDED_SOURCE), but "
                                  "the weight source holds only a slice of "
                                  "'model.embed_tokens.weight'"));
}

TEST(M2nRefuses, AWorkerWhoseModelDisagreesWithThePlanIsRefusedAtInitAndEveryRankStopsAtOnce) {
  // The receiver holds the tiny model in float32; the trainer ranks send it in bfloat16.
  const std::string dir = std::string(WT_BUILD_DIR) + "/test-configs/m2n-f32-model";
  fs::remove_all(dir);
  ASSERT_EQ(test::run_process(std::string(WT_CLI_PATH) +
                              " gen-checkpoint --model tiny --dtype "
                              "float32 " +
                              dir)
                .exit_code,
            0);
  RunSetup s;
  s.extra_init_info = "  rendezvous_timeout_s: 5";
  const int port = test::free_port();
  std::string text = config_text(s);
  text.replace(
      text.find("  embedded: true\n  count: 2\n"),
      std::string("  embedded: true\n  count: 2\n").size(),
      fmt::format("  embedded: false\n  url: http://127.0.0.1:{}\n  timeout_s: 20\n", port));
  const std::string config = write_config("m2n-disagree.yaml", text);
  const std::string script =
      write_config("m2n-disagree.sh", fmt::format(R"(
{1} serve --host 127.0.0.1 --port {3} --load-checkpoint {4} --weight-transfer-config '{{"backend": "m2n"}}' > {2}.serve.log 2>&1 &
serve=$!
for i in $(seq 100); do grep -q 'listening on' {2}.serve.log && break; sleep 0.1; done
grep -q 'listening on' {2}.serve.log || {{ cat {2}.serve.log; echo "the receiver did not start"; exit 3; }}
checksums() {{ /usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' http://127.0.0.1:{3}/weight_checksums; }}
before=$(checksums)
start=$(date +%s%N)
WT_CACHE_DIR={0}/cache {1} launch {2} 2>&1
rc=$?
end=$(date +%s%N)
after=$(checksums)
kill $serve
[ -n "$before" ] && [ "$before" = "$after" ] && echo "weights unchanged"
echo "exit $rc after $(( (end - start) / 1000000 )) ms"
)",
                                                  WT_BUILD_DIR, WT_CLI_PATH, config, port, dir));
  const TimedRun r = run_timed(script);
  const int rc = r.exit_code, ms = r.ms;
  EXPECT_NE(rc, 0) << r.output;
  // Refused at init, from the plan, before any rank waits in the mesh.
  EXPECT_THAT(r.output, HasSubstr("m2n worker init failed: the m2n plan does not fit worker rank "
                                  "0: parameter 'model.embed_tokens.weight' is planned as "
                                  "bfloat16 [1024, 64] for tensor-parallel rank 0, but this "
                                  "worker holds it as float32 [1024, 64]"));
  EXPECT_THAT(r.output, HasSubstr("weights unchanged"));
  // Rank 0 stops at the refusal (it waited out the rendezvous deadline before); rank 1 at once
  // when rank 0's store closes under it, or, when rank 0 went away while rank 1 was connecting
  // its pair to it (Gloo would wait for that pair forever), at its own rendezvous deadline.
  EXPECT_LT(ms, 5000 + 3000) << r.output;
  std::printf("refused at init; the run ended %d ms after it started\n", ms);
}

TEST(M2nFaults, ATrainerRankKilledMidRoundFailsTheRunWithinTheTransferDeadline) {
  RunSetup s;
  s.model = "qwen2.5-0.5b";
  s.rounds = 40;
  s.receivers = 1;
  // A killed peer closes its sockets: the run ends at once. The round's own bound is far off (a
  // loaded machine's 1 GB round may take it); the stall deadline is what bounds the test.
  s.extra_init_info = "  transfer_timeout_s: 120\n  stall_timeout_s: 5";
  const std::string config = write_config("m2n-kill.yaml", config_text(s));
  // Once two rounds are done, trainer rank 1 is killed.
  const TimedRun r = kill_trainer_rank_mid_run(config, "round 2/40", 1);
  const int rc = r.exit_code, ms = r.ms;
  EXPECT_NE(rc, 0) << r.output;
  EXPECT_LT(ms, 5000 + 4000) << r.output;  // the transfer deadline, and the run's teardown
  EXPECT_THAT(r.output, HasSubstr("trainer rank 1")) << r.output;
}

// Two trainer ranks of the 0.5 B model, sharded, into a `wt serve` at `url`, verified when short.
std::string external_receiver_config(const std::string& name, const std::string& url, int rounds) {
  return write_config(name, fmt::format(R"(backend: m2n
init_info:
  master_address: 127.0.0.1
  master_port: {}
trainer:
  ranks: 2
source:
  generate: {{model: qwen2.5-0.5b, dtype: bfloat16}}
  shard: {{rank_of: trainer, dim: 0}}
receiver:
  embedded: false
  url: {}
rounds: {}
verify: {}
)",
                                        test::free_port(), url, rounds, rounds < 10));
}

// An engine is never held by a dead trainer: `wt serve --backend m2n` (its transfer and stall
// deadlines the defaults, 300 s and 60 s) whose whole trainer job, coordinator and both ranks, is
// SIGKILLed while the receiver is in a round (/health: update_active) is out of that round within
// a second (the trainers' pairs closed), and a new trainer job syncs at once.
TEST(M2nFaults, ATrainerJobKilledMidRoundReleasesItsReceiverWithinASecond) {
#ifdef WT_TEST_SANITIZED
  // A sanitized 1 GB round takes minutes, and the bound is a fraction of a second.
  GTEST_SKIP() << "timed against real scheduling: not under a sanitizer";
#endif
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "m2n"});
  const auto config = [&](const std::string& name, int rounds) {
    return external_receiver_config(name, url, rounds);
  };
  const std::string doomed = config("m2n-doomed.yaml", 40);
  cli::Child job({WT_CLI_PATH, "launch", doomed},
                 {std::string("WT_CACHE_DIR=") + WT_BUILD_DIR + "/cache"});
  ASSERT_TRUE(job.wait_for("round 1/40", std::chrono::seconds(120))) << job.output();
  HttpClient health(url);
  const auto looking = std::chrono::steady_clock::now();
  while (!health.get("/health")["update_active"].get<bool>() &&
         std::chrono::steady_clock::now() - looking < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  // The coordinator's ranks, then the coordinator: the whole job, at once.
  const std::string pid = std::to_string(job.pid());
  const auto out = test::run_process("pkill -9 -P " + pid + "; kill -9 " + pid + "; echo killed");
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_THAT(out.output, HasSubstr("killed")) << out.output;
  job.wait();
  while (health.get("/health")["update_active"].get<bool>() &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto released_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - killed)
                               .count();
  std::cout << "m2n: the receiver out of its round " << released_ms
            << " ms after the trainer job's kill\n";
  // 0.35-0.53 s here (the stall watch's poll, a fifth of a second's grace, the HTTP answer); the
  // bound leaves room for a machine slow to schedule, and is still far below the 60 s stall
  // deadline the receiver used to wait out.
  EXPECT_LT(released_ms, 3000) << server->output();
  const auto next = std::chrono::steady_clock::now();
  const auto again = launch(config("m2n-again.yaml", 2));
  EXPECT_EQ(again.exit_code, 0) << again.output << server->output();
  std::cout << "m2n: then a new trainer job's 2 verified rounds took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - next)
                   .count()
            << " ms\n";
}

// A job whose trainer rank is killed ends the round on every receiver it was given, and says so:
// the receiver is out of its round once the job has exited.
TEST(M2nFaults, AKilledTrainerRankMakesItsJobEndTheRoundOnItsReceivers) {
  auto [server, url] = cli::start_server(WT_CLI_PATH, {"--backend", "m2n"});
  const TimedRun r = kill_trainer_rank_mid_run(
      external_receiver_config("m2n-rank-killed.yaml", url, 40), "round 2/40", 1);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wt launch: ended the round on receiver " + url +
                                  " (wt launch: trainer rank 1 was killed by signal 9"));
  EXPECT_FALSE(HttpClient(url).get("/health")["update_active"].get<bool>());
}

TEST(M2nFaults, AWorkerRankKilledMidRoundFailsEveryTrainerRankWithinTheTransferDeadline) {
  for (int ranks : {2, 3}) {
    RunSetup s;
    s.trainer_ranks = ranks;
    s.model = "qwen2.5-0.5b";
    s.rounds = 40;
    s.receivers = 1;
    // A killed peer closes its sockets: the run ends at once. The round's own bound is far off (a
    // loaded machine's 1 GB round may take it); the stall deadline is what bounds the test.
    s.extra_init_info = "  transfer_timeout_s: 120\n  stall_timeout_s: 5";
    const int port = test::free_port();
    // The control plane's deadline only bounds the rounds before the kill (rank 0 verifying each
    // on the receiver, which a loaded machine faulting in its memory has kept past 20 s).
    const std::string text = with_receiver_at(config_text(s), port, 60);
    const std::string config = write_config(fmt::format("m2n-kill-worker-{}.yaml", ranks), text);
    // A receiver of its own, killed once two rounds are done.
    const std::string script = write_config(fmt::format("m2n-kill-worker-{}.sh", ranks),
                                            fmt::format(R"(
{1} serve --host 127.0.0.1 --port {3} --weight-transfer-config '{{"backend": "m2n", "transfer_timeout_s": 120, "stall_timeout_s": 5}}' > {2}.serve.log 2>&1 &
serve=$!
for i in $(seq 100); do grep -q 'listening on' {2}.serve.log && break; sleep 0.1; done
grep -q 'listening on' {2}.serve.log || {{ cat {2}.serve.log; echo "the receiver did not start"; exit 3; }}
WT_CACHE_DIR={0}/cache {1} launch {2} > {2}.log 2>&1 &
pid=$!
for i in $(seq 1200); do grep -q 'round 2/40' {2}.log && break; sleep 0.05; done
kill -9 $serve
start=$(date +%s%N)
wait $pid
rc=$?
end=$(date +%s%N)
cat {2}.log
echo "exit $rc after $(( (end - start) / 1000000 )) ms"
)",
                                                        WT_BUILD_DIR, WT_CLI_PATH, config, port));
    const TimedRun r = run_timed(script);
    const int rc = r.exit_code, ms = r.ms;
    EXPECT_NE(rc, 0) << r.output;
    // Under the stall deadline (5 s): what ended it was the killed peer's sockets closing (0.4-0.5
    // s here, teardown included), not a deadline.
    EXPECT_LT(ms, 5000) << r.output;
    // Rank 0 hears it from the control plane; rank 1 from its pair to the worker, or, when its
    // part of the round was done already, from rank 0 leaving the barrier between rounds.
    EXPECT_THAT(r.output, HasSubstr("rank 0: m2n send_weights failed")) << r.output;
    for (int k = 1; k < ranks; ++k)
      EXPECT_TRUE(r.output.find(fmt::format("rank {}: m2n send_weights failed", k)) !=
                      std::string::npos ||
                  r.output.find(fmt::format("rank {}: after round", k)) != std::string::npos)
          << r.output;
    std::printf("%d trainer ranks: a worker killed mid-round ended the run %d ms after the kill\n",
                ranks, ms);
  }
}

// A receiver that stops (SIGSTOP: alive, its sockets open, nothing moving) is told from a slow
// round by the stall deadline: every trainer rank fails within stall_timeout_s although the
// round's own bound (transfer_timeout_s) is far off. The receiver faults in its staging before
// it listens (--expect-model-bytes, as `wt launch` starts its own): a first round spent faulting
// in 1 GB, on a loaded machine, would otherwise keep pairs idle for longer than this deadline.
TEST(M2nFaults, AStoppedWorkerFailsEveryTrainerRankWithinTheStallDeadline) {
  RunSetup s;
  s.model = "qwen2.5-0.5b";
  s.rounds = 40;
  s.receivers = 1;
  s.extra_init_info = "  transfer_timeout_s: 300\n  stall_timeout_s: 3";
  const int port = test::free_port();
  const std::string text = with_receiver_at(config_text(s), port, 60);
  const std::string config = write_config("m2n-stop-worker.yaml", text);
  const std::string script =
      write_config("m2n-stop-worker.sh", fmt::format(R"(
{1} serve --host 127.0.0.1 --port {3} --expect-model-bytes 1000000000 --weight-transfer-config '{{"backend": "m2n", "transfer_timeout_s": 300, "stall_timeout_s": 3}}' > {2}.serve.log 2>&1 &
serve=$!
trap 'kill -CONT $serve; kill -9 $serve' EXIT
for i in $(seq 1200); do grep -q 'listening on' {2}.serve.log && break; sleep 0.1; done
grep -q 'listening on' {2}.serve.log || {{ cat {2}.serve.log; echo "the receiver did not start"; exit 3; }}
WT_CACHE_DIR={0}/cache {1} launch {2} > {2}.log 2>&1 &
pid=$!
# Stopped inside a round's transfer: the round after the second has begun moving bytes.
for i in $(seq 1200); do grep -q 'round 2/40' {2}.log && break; sleep 0.05; done
sleep 0.2
kill -STOP $serve
start=$(date +%s%N)
wait $pid
rc=$?
end=$(date +%s%N)
cat {2}.log
echo "exit $rc after $(( (end - start) / 1000000 )) ms"
)",
                                                     WT_BUILD_DIR, WT_CLI_PATH, config, port));
  const TimedRun r = run_timed(script);
  EXPECT_NE(r.exit_code, 0) << r.output;
  ASSERT_THAT(r.output, HasSubstr("round 2/40")) << "the run failed before the worker stopped";
  // The stall deadline (3 s), then rank 0's waits on the stopped receiver as it ends the round
  // (0.5 s for its update call to say why, 1 s for end_weight_update), and the run's teardown,
  // which on a loaded machine has taken 3.4 s. When the stop caught rank 0 in its round's
  // start_weight_update, it gives the round up once rank 1 stalls, and its parked call that ends
  // the round on the stopped receiver holds its exit for that call's own deadline (3 s). Far
  // from the transfer deadline (300 s) either way, which is what a stall deadline is for.
  const bool in_start =
      r.output.find("rank 0: m2n send_weights failed: start_weight_update") != std::string::npos;
  EXPECT_LT(r.ms, 3000 + 1500 + (in_start ? 3000 : 0) + 6000) << r.output;
  EXPECT_THAT(r.output, HasSubstr("for 3000 ms (stall_timeout_s)")) << r.output;
  std::printf("a stopped worker failed the run %d ms after it stopped\n", r.ms);
}

// A worker that refuses a round at update (here: a proxy in front of `wt serve` drops a tensor
// from the third round's update_info, which the worker refuses before it posts a receive) closes
// its pairs: every trainer rank fails at once, not at its transfer or stall deadline (120 s and
// 60 s here). With 2 and 3 trainer ranks; the time from the refusal to the run's end is measured.
// The same when rank 0's start_weight_update fails (the receiver answers 503): no byte was
// posted anywhere, and every rank hears it within the same bound.
TEST(M2nFaults, AWorkerRefusingARoundAtUpdateOrStartFailsEveryTrainerRankAtOnce) {
  for (auto [ranks, call] :
       {std::pair{2, "update_weights"}, std::pair{3, "update_weights"},
        std::pair{2, "start_weight_update"}, std::pair{3, "start_weight_update"}}) {
    const bool at_update = std::string(call) == "update_weights";
    RunSetup s;
    s.trainer_ranks = ranks;
    s.rounds = 6;
    s.receivers = 1;
    s.extra_init_info = "  transfer_timeout_s: 120\n  stall_timeout_s: 60";
    const int serve_port = test::free_port(), proxy_port = test::free_port();
    std::string text = with_receiver_at(config_text(s), proxy_port, 60);
    text.replace(text.find("verify: true"), std::string("verify: true").size(), "verify: false");
    const std::string config =
        write_config(fmt::format("m2n-refuse-{}-{}.yaml", call, ranks), text);
    const TimedRun r = launch_behind_refusing_proxy(
        config, R"({"backend": "m2n", "transfer_timeout_s": 120, "stall_timeout_s": 60})",
        serve_port, proxy_port, 3, call);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("refused-at ")) << r.output;
    if (at_update)
      EXPECT_THAT(r.output, HasSubstr("the update names 50 tensor(s), the m2n plan 51: every round "
                                      "sends every planned parameter; nothing was received"))
          << r.output;
    else
      EXPECT_THAT(r.output, HasSubstr("this receiver cannot start an update now")) << r.output;
    // Every rank but 0 hears it from its pairs closing (rank 0 from the control plane too).
    for (int k = 1; k < ranks; ++k)
      EXPECT_THAT(r.output, HasSubstr(fmt::format("rank {}: m2n send_weights failed", k)))
          << r.output;
    EXPECT_LT(r.ms, 3000) << r.output;  // far from either deadline; includes the run's teardown
    std::printf("%d trainer ranks: a refusal at %s ended the run %d ms after it\n", ranks, call,
                r.ms);
  }
}

// Eight trainer ranks into four replicas of TP 2: trainer rank 3 SIGKILLed while rounds run.
// Every other rank fails at once (its pairs close; the stall deadline, 60 s, is far off), and the
// run names the rank that died.
TEST(M2nFaults, OneOfEightTrainerRanksKilledFailsEveryOtherRankAtOnceNamingIt) {
  RunSetup s;
  s.trainer_ranks = 8;
  s.rounds = 100000;
  s.receivers = 4;
  s.receiver_tp = 2;
  s.extra_init_info = std::string(kTpRules) + "\n  transfer_timeout_s: 120\n  stall_timeout_s: 60";
  std::string text = config_text(s);
  text.replace(text.find("verify: true"), std::string("verify: true").size(), "verify: false");
  const std::string config = write_config("m2n-kill-one-of-eight.yaml", text);
  const TimedRun r = kill_trainer_rank_mid_run(config, "round 20/100000", 3);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("trainer rank 3 was killed by signal 9")) << r.output;
  for (int k = 0; k < 8; ++k) {
    if (k != 3) {
      EXPECT_THAT(r.output, HasSubstr(fmt::format("wt launch: error: rank {}: ", k))) << r.output;
    }
  }
  // 0.17 s here, teardown included; the bound leaves room for a loaded machine, and is far from
  // the stall deadline (60 s) that a rank which heard nothing would wait out.
  EXPECT_LT(r.ms, 3000) << r.output;
  std::printf(
      "8 trainer ranks: trainer rank 3 killed, every rank failed and the run ended %d ms "
      "after the kill\n",
      r.ms);
}

}  // namespace
}  // namespace wt
