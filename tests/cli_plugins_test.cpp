// `wt plugins` and `wt --version` as a user runs them: a real process.
#include "support/process.hpp"

#include <wt/version.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using ::testing::HasSubstr;

namespace wt {
namespace {

std::string wt_cmd(const std::string& env, const std::string& args) {
  return env + " " + WT_CLI_PATH + " " + args;
}

TEST(CliPlugins, ListsTheThreeBackendsWithVersions) {
  auto r = test::run_process(wt_cmd("env -u WT_PLUGIN_PATH", "plugins --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto arr = nlohmann::json::parse(r.output);
  std::map<std::string, nlohmann::json> by;
  for (auto& p : arr) by[p["backend"]] = p;
  for (const char* b : {"ipc", "nccl", "sparse_nccl"}) {
    ASSERT_TRUE(by.count(b)) << r.output;
    EXPECT_TRUE(by[b]["usable"].get<bool>()) << by[b].dump();
    EXPECT_EQ(by[b]["plugin_version"], "0.1.0");
    EXPECT_EQ(by[b]["abi_version"], 1);
  }
}

TEST(CliPlugins, MalformedPluginsOnThePathNeverCrashIt) {
  auto r =
      test::run_process(wt_cmd(std::string("WT_PLUGIN_PATH=") + WT_TEST_BROKEN_DIR, "plugins"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("speaks wt ABI version 99"));
  EXPECT_THAT(r.output, HasSubstr("does not export the entry symbol 'wt_plugin_get'"));
  EXPECT_THAT(r.output, HasSubstr("trainer.send_weights"));
  EXPECT_THAT(r.output, HasSubstr("declares backend 'somethingelse'"));
  EXPECT_THAT(r.output, HasSubstr("libwt_bogus.so"));
  EXPECT_THAT(r.output, HasSubstr("cannot load plugin"));
  // The real plugins are still listed after the broken ones.
  EXPECT_THAT(r.output, HasSubstr("libwt_ipc.so"));
}

TEST(CliPlugins, Version) {
  auto r = test::run_process(wt_cmd("", "--version"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr(std::string("wt ") + kVersion));
}

}  // namespace
}  // namespace wt
