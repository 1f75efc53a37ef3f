// `wt launch CONFIG --rank-from-env` as a cluster launcher runs it: one process per trainer rank,
// each told its place by torchrun's or SLURM's variables, meeting in a trainer group that only
// holders of the job's secret join, sending to running `wt serve` deployments. Real processes on
// loopback (tests/cluster/two_hosts.sh runs the same across two network namespaces).
#include "support/free_port.hpp"
#include "support/nccl_processes.hpp"
#include "support/test_configs.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

using ::testing::HasSubstr;

namespace wt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// What the suite's own launcher (a CI job under srun or torchrun) set must not decide here: each
// test sets every variable its launcher would.
const bool kLaunchersCleared = [] {
  for (const char* v :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "RAY_LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
        "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "WT_TRAINER_SECRET"})
    ::unsetenv(v);
  return true;
}();

const std::string kSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

using test::write_config;

std::string job_config(const std::string& name, const std::string& backend,
                       const std::vector<test::Served*>& receivers, const std::string& extra,
                       const std::string& trainer_extra = "") {
  std::string urls;
  for (auto* r : receivers) urls += (urls.empty() ? "" : ", ") + ("\"" + r->url + "\"");
  return write_config(name, "backend: " + backend +
                                "\ninit_info: {master_address: 127.0.0.1, master_port: " +
                                std::to_string(test::free_port()) +
                                ", transfer_timeout_s: 20}\n"
                                "trainer: {" +
                                trainer_extra + "group_port: " + std::to_string(test::free_port()) +
                                ", group_timeout_s: 4}\n"
                                "receiver: {urls: [" +
                                urls + "], timeout_s: 20}\nrounds: 2\n" + extra);
}

// One trainer rank, under the launcher's variables (NAME=value), with this secret.
std::unique_ptr<cli::Child> rank(const std::string& config, std::vector<std::string> env,
                                 const std::string& secret = kSecret) {
  env.push_back("WT_TRAINER_SECRET=" + secret);
  env.push_back(std::string("WT_CACHE_DIR=") + WT_BUILD_DIR + "/cache");
  return std::make_unique<cli::Child>(
      std::vector<std::string>{WT_CLI_PATH, "launch", config, "--rank-from-env"}, env);
}

std::vector<std::string> torchrun(int r, int world) {
  return {"RANK=" + std::to_string(r),       "WORLD_SIZE=" + std::to_string(world),
          "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=" + std::to_string(world),
          "MASTER_ADDR=127.0.0.1",           "MASTER_PORT=29500"};
}

int finish(cli::Child& c) {
  while (!c.at_eof()) c.next_line(std::chrono::milliseconds(100));
  return c.wait();
}

// Each launcher's variables as it sets them for rank r of 2 on this host.
struct Launcher {
  std::string name;
  std::function<std::vector<std::string>(int)> env;
  std::string trainer_extra;  // what the trainer section must add (Open MPI names no host)
  std::string says;           // what rank 0 logs of it
};

std::vector<Launcher> launchers() {
  return {
      {"torchrun", [](int r) { return torchrun(r, 2); }, "",
       "launcher: torchrun (from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
       "MASTER_PORT)"},
      // verl's RayWorkerGroup: torchrun's names, no LOCAL_WORLD_SIZE, Ray's own local rank.
      {"ray",
       [](int r) {
         return std::vector<std::string>{"RANK=" + std::to_string(r),
                                         "WORLD_SIZE=2",
                                         "LOCAL_RANK=" + std::to_string(r),
                                         "RAY_LOCAL_RANK=" + std::to_string(r),
                                         "RAY_LOCAL_WORLD_SIZE=2",
                                         "MASTER_ADDR=127.0.0.1",
                                         "MASTER_PORT=29500"};
       },
       "",
       "launcher: torchrun (from RANK, WORLD_SIZE, LOCAL_RANK, RAY_LOCAL_WORLD_SIZE, MASTER_ADDR, "
       "MASTER_PORT)"},
      {"openmpi",
       [](int r) {
         return std::vector<std::string>{
             "OMPI_COMM_WORLD_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_SIZE=2",
             "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_LOCAL_SIZE=2"};
       },
       "group_address: 127.0.0.1, ",
       "launcher: Open MPI (from OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, "
       "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE)"},
  };
}

class EachLauncher : public ::testing::TestWithParam<Launcher> {};

TEST_P(EachLauncher, TwoRanksSyncNcclToTwoDeploymentsVerified) {
  const Launcher& l = GetParam();
  test::Served a = test::serve_receiver("nccl", 20), b = test::serve_receiver("nccl", 20);
  const std::string config = job_config("rfe_nccl_" + l.name + ".yaml", "nccl", {&a, &b},
                                        "source: {generate: {model: tiny}}\n", l.trainer_extra);
  auto r0 = rank(config, l.env(0));
  auto r1 = rank(config, l.env(1));
  EXPECT_EQ(finish(*r0), 0) << r0->output();
  EXPECT_EQ(finish(*r1), 0) << r1->output();
  EXPECT_THAT(r0->output(), HasSubstr(l.says));
  EXPECT_THAT(r0->output(), HasSubstr("proven with the secret from WT_TRAINER_SECRET"));
  EXPECT_THAT(r0->output(), HasSubstr("round 2/2"));
  EXPECT_THAT(r0->output(), HasSubstr("verified 102/102 tensors"));  // 51 tensors × 2 receivers
  EXPECT_THAT(r0->output(), HasSubstr("OK: every round verified"));
  EXPECT_THAT(r1->output(), HasSubstr("rank 1: done, 2 round(s)"));
}

INSTANTIATE_TEST_SUITE_P(RankFromEnv, EachLauncher, ::testing::ValuesIn(launchers()),
                         [](const auto& p) { return p.param.name; });

TEST(RankFromEnv, SlurmRanksMoveTheirShardsWithM2nVerified) {
  test::Served a = test::serve_receiver("m2n", 20), b = test::serve_receiver("m2n", 20);
  const auto config = job_config("rfe_m2n.yaml", "m2n", {&a, &b},
                                 "source: {generate: {model: tiny}, shard: {rank_of: trainer, "
                                 "dim: 0}}\n");
  auto slurm = [](int r) {
    return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=2",
                                    "SLURM_LOCALID=" + std::to_string(r),
                                    "SLURM_JOB_NODELIST=localhost"};
  };
  auto r0 = rank(config, slurm(0));
  auto r1 = rank(config, slurm(1));
  EXPECT_EQ(finish(*r0), 0) << r0->output();
  EXPECT_EQ(finish(*r1), 0) << r1->output();
  EXPECT_THAT(r0->output(), HasSubstr("rendezvous at localhost:"));
  EXPECT_THAT(r0->output(), HasSubstr("(SLURM_JOB_NODELIST, trainer.group_port)"));
  EXPECT_THAT(r0->output(), HasSubstr("OK: every round verified"));
}

TEST(RankFromEnv, ARankWithAnotherSecretIsKeptOutAndTheJobFailsWithinTheGroupDeadline) {
  test::Served a = test::serve_receiver("nccl", 20);
  const auto config =
      job_config("rfe_secret.yaml", "nccl", {&a}, "source: {generate: {model: tiny}}\n");
  const auto t0 = Clock::now();
  auto r0 = rank(config, torchrun(0, 2));
  auto r1 = rank(config, torchrun(1, 2), std::string(64, 'f'));
  EXPECT_EQ(finish(*r1), 1);
  const double intruder_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(finish(*r0), 1);
  const double job_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_THAT(r1->output(), HasSubstr("refused this session"));
  EXPECT_THAT(r0->output(), HasSubstr("trainer group: rendezvous of 2 ranks at 127.0.0.1:"));
  EXPECT_THAT(r0->output(), HasSubstr("FAILED"));
  // group_timeout_s is 4: the real rank gives up then, not later.
  EXPECT_LT(job_s, 4 + 3.0) << r0->output();
  std::printf("a rank with another secret was refused after %.2f s; rank 0 failed after %.2f s\n",
              intruder_s, job_s);
  EXPECT_EQ(::kill(a.process->pid(), 0), 0) << "the receiver died";
}

TEST(RankFromEnv, EmbeddedReceiversAreRefused) {
  const auto embedded =
      write_config("rfe_embedded.yaml", "backend: ipc\nsource: {generate: {model: tiny}}\n");
  auto e = rank(embedded, torchrun(0, 1));
  EXPECT_EQ(finish(*e), 1);
  EXPECT_THAT(e->output(), HasSubstr("--rank-from-env runs one trainer rank of a job; its "
                                     "receivers must be running deployments: set receiver.urls"));
}

}  // namespace
}  // namespace wt
