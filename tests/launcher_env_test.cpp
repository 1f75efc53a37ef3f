// What a cluster launcher's environment says about this process: SLURM's compressed host lists in
// the forms real clusters print, and each launcher's variables as it sets them.
#include "launcher_env.hpp"
#include "cluster_place.hpp"

#include <wt/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace wt::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(SlurmNodelist, ExpandsEveryFormSlurmPrints) {
  const std::map<std::string, std::vector<std::string>> table = {
      {"node1", {"node1"}},
      {"node1,node2", {"node1", "node2"}},
      {"gpu[01-04,07]", {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}},
      {"gpu[08-11]", {"gpu08", "gpu09", "gpu10", "gpu11"}},  // the padding is the low bound's
      {"n[8-10]", {"n8", "n9", "n10"}},
      {"a[1-2],b3,c[5]", {"a1", "a2", "b3", "c5"}},
      {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
      {"tux[0001-0002].cluster", {"tux0001.cluster", "tux0002.cluster"}},
      {"x[1,3-4],y[009-010]", {"x1", "x3", "x4", "y009", "y010"}},
      {"host-1.example.org", {"host-1.example.org"}},
  };
  for (const auto& [list, hosts] : table) EXPECT_EQ(expand_slurm_nodelist(list), hosts) << list;
}

TEST(SlurmNodelist, MalformedListsAreRefusedNamingThem) {
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("gpu[01-04"); }),
              HasSubstr("host list 'gpu[01-04': a '[' is not closed"));
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("gpu01-04]"); }),
              HasSubstr("a ']' without its '['"));
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("gpu[04-01]"); }),
              HasSubstr("the range '04-01' runs backwards"));
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("gpu[a-b]"); }),
              HasSubstr("'[a-b]' holds 'a-b', which is neither a number nor a range"));
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("a,,b"); }), HasSubstr("an empty host name"));
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("n[0-999999999]"); }),
              HasSubstr("names more than 65536 hosts"));
  EXPECT_THAT(error_of([] { expand_slurm_nodelist("a[0-999]b[0-999]"); }),
              HasSubstr("names more than 65536 hosts"));
}

Getenv env(std::map<std::string, std::string> vars) {
  auto m = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [m](const char* name) -> const char* {
    auto it = m->find(name);
    return it == m->end() ? nullptr : it->second.c_str();
  };
}

TEST(LauncherEnv, TorchrunSlurmAndOpenMpiAreReadAsEachSetsThem) {
  auto t = place_from_env(env({{"RANK", "3"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"MASTER_ADDR", "10.0.0.2"},
                               {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source, "torchrun");
  EXPECT_EQ(t->rank, 3);
  EXPECT_EQ(t->world_size, 8);
  EXPECT_EQ(t->local_rank, 1);
  EXPECT_EQ(t->master_addr, "10.0.0.2");
  EXPECT_EQ(t->master_port, 29500);
  EXPECT_THAT(t->variables,
              ElementsAre("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"));

  auto s = place_from_env(env({{"SLURM_PROCID", "5"},
                               {"SLURM_NTASKS", "16"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_STEP_NODELIST", "gpu[03-04,09]"},
                               {"SLURM_JOB_NODELIST", "gpu[01-12]"}}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->source, "SLURM");
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->world_size, 16);
  EXPECT_EQ(s->local_rank, 1);
  EXPECT_EQ(s->master_addr, "gpu03");  // the step's first host, not the job's
  auto job = place_from_env(
      env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a[7-8]"}}));
  EXPECT_EQ(job->master_addr, "a7");

  auto m = place_from_env(env({{"OMPI_COMM_WORLD_RANK", "2"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->source, "Open MPI");
  EXPECT_EQ(m->rank, 2);
  EXPECT_EQ(m->master_addr, "");

  EXPECT_FALSE(place_from_env(env({{"HOME", "/root"}})));
}

TEST(LauncherEnv, TorchrunUnderSrunIsTorchrunsRank) {
  // srun starting one torchrun per node: SLURM_PROCID is the node's, RANK the process's.
  auto p = place_from_env(env({{"RANK", "9"},
                               {"WORLD_SIZE", "16"},
                               {"MASTER_ADDR", "gpu01"},
                               {"SLURM_PROCID", "1"},
                               {"SLURM_NTASKS", "2"}}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "torchrun");
  EXPECT_EQ(p->rank, 9);
}

TEST(LauncherEnv, ContradictoryOrBrokenSettingsAreRefusedNamingTheVariables) {
  EXPECT_THAT(error_of([] {
                place_from_env(env({{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}));
              }),
              HasSubstr("RANK=3 is not below WORLD_SIZE=2 (set by the launcher: torchrun)"));
  EXPECT_THAT(error_of([] {
                place_from_env(env({{"RANK", "0"}}));
              }),
              HasSubstr("RANK is set but WORLD_SIZE is not: a torchrun launch sets both"));
  EXPECT_THAT(error_of([] {
                place_from_env(env({{"SLURM_NTASKS", "4"}}));
              }),
              HasSubstr("SLURM_NTASKS is set but SLURM_PROCID is not"));
  EXPECT_THAT(error_of([] {
                place_from_env(env({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
              }),
              HasSubstr("RANK=x is not a number in 0..1048575"));
  EXPECT_THAT(error_of([] {
                place_from_env(env({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
              }),
              HasSubstr("MASTER_ADDR is not: where is rank 0?"));
  EXPECT_THAT(
      error_of([] {
        place_from_env(env(
            {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}));
      }),
      HasSubstr("MASTER_PORT=70000 is not a number in 1..65535"));
  EXPECT_THAT(
      error_of([] {
        place_from_env(
            env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "gpu[1-"}}));
      }),
      HasSubstr("host list 'gpu[1-'"));
}

// --rank-from-env: the config first, then the launcher; both sides named where they disagree.
const std::string kSecret(64, 'a');

LaunchConfig config_of(int ranks = 0) {
  LaunchConfig c;
  c.file = "job.yaml";
  c.trainer_ranks_given = ranks > 0;
  if (ranks > 0) c.trainer_ranks = ranks;
  return c;
}

std::map<std::string, std::string> torchrun(int rank, int world, int local_world,
                                            const std::string& addr = "127.0.0.1") {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank % local_world)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
          {"MASTER_ADDR", addr},
          {"MASTER_PORT", "29500"},
          {"WT_TRAINER_SECRET", kSecret}};
}

TEST(ClusterPlace, TheLauncherPlacesTheRankAndTheConfigComesFirst) {
  auto p = resolve_cluster_place(config_of(), env(torchrun(1, 2, 2)));
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.group_address, "127.0.0.1");
  EXPECT_EQ(p.group_address_from, "MASTER_ADDR");
  EXPECT_EQ(p.group_port, 29510);  // the documented default, not MASTER_PORT
  EXPECT_EQ(p.secret_hex, kSecret);
  EXPECT_EQ(p.secret_from, "WT_TRAINER_SECRET");
  auto c = config_of(2);
  c.group_address = "127.0.0.2";
  c.group_port = 4000;
  auto q = resolve_cluster_place(c, env(torchrun(0, 2, 2)));
  EXPECT_EQ(q.group_address, "127.0.0.2");
  EXPECT_EQ(q.group_address_from, "trainer.group_address");
  EXPECT_EQ(q.group_port, 4000);
  auto s = resolve_cluster_place(config_of(), env({{"SLURM_PROCID", "1"},
                                                   {"SLURM_NTASKS", "2"},
                                                   {"SLURM_LOCALID", "1"},
                                                   {"SLURM_STEP_NODELIST", "localhost"},
                                                   {"WT_TRAINER_SECRET", kSecret}}));
  EXPECT_EQ(s.group_address, "localhost");
  EXPECT_EQ(s.group_address_from, "SLURM_STEP_NODELIST");
  // A group of one needs no address and no secret.
  auto one =
      resolve_cluster_place(config_of(), env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(one.world_size, 1);
  EXPECT_TRUE(one.secret_hex.empty());
}

TEST(ClusterPlace, ContradictionsAreRefusedNamingBothSides) {
  EXPECT_THAT(error_of([] { resolve_cluster_place(config_of(4), env(torchrun(0, 2, 2))); }),
              HasSubstr("job.yaml: trainer.ranks is 4, but the launcher says the world size is "
                        "2: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
                        "MASTER_PORT)"));
  auto c = config_of();
  c.group_port = 29500;
  EXPECT_THAT(error_of([&] { resolve_cluster_place(c, env(torchrun(0, 2, 2))); }),
              HasSubstr("trainer.group_port is 29500, the launcher's MASTER_PORT, which its own "
                        "store holds"));
  EXPECT_THAT(error_of([] { resolve_cluster_place(config_of(), env({})); }),
              HasSubstr("--rank-from-env: no cluster launcher found in the environment"));
  EXPECT_THAT(error_of([] {
                resolve_cluster_place(config_of(), env({{"OMPI_COMM_WORLD_RANK", "0"},
                                                        {"OMPI_COMM_WORLD_SIZE", "2"},
                                                        {"WT_TRAINER_SECRET", kSecret}}));
              }),
              HasSubstr("does not say where trainer rank 0 runs: set trainer.group_address"));
  EXPECT_THAT(error_of([] {
                auto e = torchrun(3, 4, 2, "gpu01");
                e["LOCAL_RANK"] = "2";
                resolve_cluster_place(config_of(), env(e));
              }),
              HasSubstr("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
}

TEST(ClusterPlace, ALoopbackRendezvousIsRefusedWhenTheRanksSpanHosts) {
  // One host: loopback is right.
  EXPECT_NO_THROW(resolve_cluster_place(config_of(), env(torchrun(3, 4, 4, "localhost"))));
  EXPECT_THAT(
      error_of([] { resolve_cluster_place(config_of(), env(torchrun(3, 4, 2, "localhost"))); }),
      HasSubstr("MASTER_ADDR 'localhost' resolves to "));
  EXPECT_THAT(
      error_of([] { resolve_cluster_place(config_of(), env(torchrun(3, 4, 2, "127.0.0.5"))); }),
      HasSubstr("a loopback address, but the job's 4 ranks run on 2 hosts"));
  EXPECT_THAT(error_of([] {
                resolve_cluster_place(config_of(), env({{"SLURM_PROCID", "1"},
                                                        {"SLURM_NTASKS", "2"},
                                                        {"SLURM_JOB_NODELIST", "localhost,gpu2"},
                                                        {"WT_TRAINER_SECRET", kSecret}}));
              }),
              HasSubstr("SLURM_JOB_NODELIST 'localhost' resolves to"));
  auto c = config_of();
  c.group_address = "127.0.0.1";
  EXPECT_THAT(error_of([&] {
                resolve_cluster_place(c, env({{"OMPI_COMM_WORLD_RANK", "0"},
                                              {"OMPI_COMM_WORLD_SIZE", "2"},
                                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                                              {"WT_TRAINER_SECRET", kSecret}}));
              }),
              HasSubstr("trainer.group_address '127.0.0.1' resolves to 127.0.0.1, a loopback "
                        "address, but the job's 2 ranks run on 2 hosts"));
  EXPECT_THAT(
      error_of([] {
        resolve_cluster_place(config_of(), env(torchrun(0, 2, 1, "no-such-host.invalid")));
      }),
      HasSubstr("MASTER_ADDR 'no-such-host.invalid' (trainer rank 0's host) does not resolve"));
}

TEST(ClusterPlace, AnAddressNoPeerCanDialOrThatIsNotRankZerosIsRefused) {
  for (const char* wildcard : {"0.0.0.0", "::", "224.0.0.1"})
    EXPECT_THAT(
        error_of([&] { resolve_cluster_place(config_of(), env(torchrun(1, 2, 1, wildcard))); }),
        HasSubstr("which no peer can dial (a wildcard, multicast or broadcast address)"))
        << wildcard;
  // Rank 0 listens at the group address: one of another host is refused before anything binds.
  EXPECT_THAT(
      error_of([] { resolve_cluster_place(config_of(), env(torchrun(0, 2, 1, "192.0.2.7"))); }),
      HasSubstr("this is trainer rank 0, which hosts the trainer group, but MASTER_ADDR "
                "'192.0.2.7' resolves to 192.0.2.7, none of which is an address of this "
                "host"));
  EXPECT_NO_THROW(resolve_cluster_place(config_of(), env(torchrun(1, 2, 1, "192.0.2.7"))));
  // Rank 0's own name resolving to loopback says why.
  EXPECT_THAT(
      error_of([] { resolve_cluster_place(config_of(), env(torchrun(0, 2, 1, "localhost"))); }),
      HasSubstr("/etc/hosts does for a host's own name on Debian and Ubuntu (127.0.1.1)"));
  // torchrun numbers each host's ranks together: local rank 0 of rank 5 is on another host, so
  // loopback is refused even without LOCAL_WORLD_SIZE.
  auto e = torchrun(5, 8, 4, "localhost");
  e.erase("LOCAL_WORLD_SIZE");
  e["LOCAL_RANK"] = "0";
  EXPECT_THAT(error_of([&] { resolve_cluster_place(config_of(), env(e)); }),
              HasSubstr("a loopback address, but the job's 8 ranks run on 2 hosts"));
  // Ray frameworks' count of the ranks on a host.
  auto ray = torchrun(1, 4, 2);
  ray.erase("LOCAL_WORLD_SIZE");
  ray["RAY_LOCAL_WORLD_SIZE"] = "2";
  ray["MASTER_ADDR"] = "192.0.2.7";
  EXPECT_EQ(resolve_cluster_place(config_of(), env(ray)).launcher.hosts, 2);
  // An empty step node list falls back to the job's.
  auto s = resolve_cluster_place(config_of(), env({{"SLURM_PROCID", "1"},
                                                   {"SLURM_NTASKS", "2"},
                                                   {"SLURM_STEP_NODELIST", ""},
                                                   {"SLURM_JOB_NODELIST", "localhost"},
                                                   {"WT_TRAINER_SECRET", kSecret}}));
  EXPECT_EQ(s.group_address_from, "SLURM_JOB_NODELIST");
  // The trainer group and the backend's rendezvous on one port of one host.
  auto c = config_of();
  c.group_port = 29600;
  c.init_info = {{"master_address", "127.0.0.1"}, {"master_port", 29600}};
  EXPECT_THAT(error_of([&] { resolve_cluster_place(c, env(torchrun(0, 2, 2))); }),
              HasSubstr("trainer.group_port 29600 is init_info.master_port too, on the same host"));
  LaunchConfig w = config_of();
  w.init_info = {{"master_address", "0.0.0.0"}};
  EXPECT_THAT(error_of([&] { check_rendezvous_reaches_receivers(w, {"http://127.0.0.1:1"}); }),
              HasSubstr("init_info.master_address '0.0.0.0' resolves to 0.0.0.0, which no peer "
                        "can dial"));
}

TEST(ClusterPlace, AnIpv6RendezvousIsWrittenInBrackets) {
  const auto lines = describe(resolve_cluster_place(config_of(), env(torchrun(1, 2, 2, "::1"))));
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_THAT(all, HasSubstr("rank 0 hosts its rendezvous at [::1]:29510 (MASTER_ADDR"));
  EXPECT_THAT(all, HasSubstr("launcher's store: [::1]:29500"));
}

TEST(ClusterPlace, SeveralRanksNeedOneSecretFromAFileOfTheirsOrTheEnvironment) {
  auto no_secret = torchrun(0, 2, 2);
  no_secret.erase("WT_TRAINER_SECRET");
  EXPECT_THAT(error_of([&] { resolve_cluster_place(config_of(), env(no_secret)); }),
              HasSubstr("none was given: export WT_TRAINER_SECRET=$(openssl rand -hex 32)"));
  auto short_secret = torchrun(0, 2, 2);
  short_secret["WT_TRAINER_SECRET"] = "abc";
  EXPECT_THAT(
      error_of([&] { resolve_cluster_place(config_of(), env(short_secret)); }),
      HasSubstr("WT_TRAINER_SECRET must hold the trainer group's secret, 64 hex digits (got "
                "3 characters)"));

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("wt-secret-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "secret").string();
  std::ofstream(file) << std::string(64, 'B') << "\n";  // upper case and a newline are fine
  auto c = config_of();
  c.secret_file = file;
  ::chmod(file.c_str(), 0644);
  EXPECT_THAT(error_of([&] { resolve_cluster_place(c, env(no_secret)); }),
              HasSubstr("can be read or written by others (mode 0644): chmod 600 it"));
  ::chmod(file.c_str(), 0600);
  auto p = resolve_cluster_place(c, env(no_secret));
  EXPECT_EQ(p.secret_hex, std::string(64, 'b'));
  EXPECT_EQ(p.secret_from, "trainer.secret_file (" + file + ")");
  EXPECT_THAT(error_of([&] { resolve_cluster_place(c, env(torchrun(0, 2, 2))); }),
              HasSubstr("and WT_TRAINER_SECRET hold different secrets"));
  // A link, a FIFO: refused, and the FIFO does not block.
  fs::create_symlink(file, dir / "link");
  c.secret_file = (dir / "link").string();
  EXPECT_THAT(error_of([&] { resolve_cluster_place(c, env(no_secret)); }),
              HasSubstr("cannot be opened"));
  ::mkfifo((dir / "fifo").c_str(), 0600);
  c.secret_file = (dir / "fifo").string();
  EXPECT_THAT(error_of([&] { resolve_cluster_place(c, env(no_secret)); }),
              HasSubstr("is not a regular file"));
  fs::remove_all(dir);
}

TEST(ClusterPlace, ARendezvousOnLoopbackIsRefusedForReceiversOnAnotherHost) {
  EXPECT_EQ(url_host("http://10.0.0.2:8000"), "10.0.0.2");
  EXPECT_EQ(url_host("http://gpu07.cluster/"), "gpu07.cluster");
  EXPECT_EQ(url_host("http://[::1]:8000/x"), "::1");
  EXPECT_EQ(url_host("http://user@host:1"), "host");
  for (const char* a : {"127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_address(a)) << a;
  for (const char* a : {"10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "localhost", ""})
    EXPECT_FALSE(is_loopback_address(a)) << a;

  LaunchConfig c = config_of();
  c.init_info = {{"master_address", "localhost"}, {"master_port", 29600}};
  c.init_info_marks["master_address"] = {3, 17};
  EXPECT_THAT(
      error_of([&] {
        check_rendezvous_reaches_receivers(c, {"http://127.0.0.1:8000", "http://192.0.2.7:8000"});
      }),
      HasSubstr("job.yaml:3:17: init_info.master_address 'localhost' resolves to "));
  EXPECT_THAT(error_of([&] { check_rendezvous_reaches_receivers(c, {"http://192.0.2.7:8000"}); }),
              HasSubstr("a loopback address, but receiver http://192.0.2.7:8000 is on another "
                        "host (192.0.2.7): its workers could never reach the rendezvous there"));
  EXPECT_NO_THROW(check_rendezvous_reaches_receivers(c, {"http://127.0.0.3:8000"}));
  c.init_info["master_address"] = "192.0.2.1";
  EXPECT_NO_THROW(check_rendezvous_reaches_receivers(c, {"http://192.0.2.7:8000"}));
}

}  // namespace
}  // namespace wt::cli
