// What a cluster launcher's environment says about this process: SLURM's compressed host lists in
// the forms real clusters print, and each launcher's variables as it sets them.
#include "launcher_env.hpp"

#include <wt/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace wt::cli
