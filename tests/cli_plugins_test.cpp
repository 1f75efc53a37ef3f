// `wt plugins` and `wt --version` as a user runs them: a real process.
#include "support/plugin_fixtures.hpp"
#include "support/process.hpp"

#include <wt/version.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <regex>

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
  // Each plugin's own version (plugins/<backend>/CMakeLists.txt, CHANGELOG.md).
  const std::map<std::string, std::string> versions{
      {"ipc", "0.3.0"}, {"nccl", "0.3.0"}, {"sparse_nccl", "0.3.0"}};
  for (const auto& [b, v] : versions) {
    ASSERT_TRUE(by.count(b)) << r.output;
    EXPECT_TRUE(by[b]["usable"].get<bool>()) << by[b].dump();
    EXPECT_EQ(by[b]["plugin_version"], v) << b;
    EXPECT_EQ(by[b]["abi_version"], 2);
  }
  auto text = test::run_process(wt_cmd("env -u WT_PLUGIN_PATH", "plugins"));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const auto& [b, v] : versions) EXPECT_THAT(text.output, HasSubstr(v)) << text.output;
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
  EXPECT_THAT(r.output,
              HasSubstr("its API table pointer 0x10 does not point into readable memory"));
  EXPECT_THAT(r.output, HasSubstr("claims a size of 4294967295 bytes"));
  EXPECT_THAT(r.output, HasSubstr("is not NUL-terminated within 64 bytes"));
  // The real plugins are still listed after the broken ones.
  EXPECT_THAT(r.output, HasSubstr("libwt_ipc.so"));
}

// The hostile-plugin finding: one malformed plugin used to crash `wt plugins` (exit 139) and hide
// every good one; a FIFO or a wt_plugin_get that never returns used to hang it.
std::string hostile_path(const test::RefusedPlugins& r) {
  return std::string(WT_TEST_BROKEN_DIR) + ":" + test::hostile_plugin_dir() + ":" + r.path_list() +
         ":" + WT_TEST_GOOD_DIR;
}

TEST(CliPlugins, HostilePluginsAreReportedAndEveryGoodOneIsStillListed) {
  test::RefusedPlugins r;
  auto t0 = std::chrono::steady_clock::now();
  auto res = test::run_process(wt_cmd("WT_PLUGIN_PATH=" + hostile_path(r), "plugins"));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_LT(took, std::chrono::seconds(20)) << "every probe has a 5 s deadline, all run at once";
  std::string hostile = test::hostile_plugin_dir();
  std::string broken = WT_TEST_BROKEN_DIR;
  for (const std::string& reason : std::vector<std::string>{
           "unusable: plugin " + hostile + "/libwt_crashes.so crashed with SIGSEGV while loading",
           "unusable: plugin " + hostile +
               "/libwt_hangs.so did not answer within 5 s while loading (its wt_plugin_get or a "
               "static constructor never returned); the probe was killed",
           "unusable: plugin " + broken +
               "/libwt_garbageapi.so is unusable: its API table pointer 0x10 does not point "
               "into readable memory",
           "unusable: plugin " + broken +
               "/libwt_fftable.so is unusable: its API table claims a size of 4294967295 bytes "
               "(struct_size), more than any wt ABI table can have (65536 at most)",
           "unusable: plugin " + broken +
               "/libwt_badname.so is unusable: its backend string 'Bad Name!\\x01' is not "
               "valid: it must be non-empty and made of printable characters other than /",
           "unusable: plugin " + broken + "/libwt_unterminated.so is unusable: its backend string",
           std::string("is not NUL-terminated within 64 bytes"),
           "unusable: plugin " + broken +
               "/libwt_badvtable.so is unusable: its trainer table pointer 0x20 does not point "
               "into readable memory",
           "unusable: plugin " + r.fifo + " is a FIFO, not a regular file: refusing to load it",
           "unusable: plugin " + r.file0666 +
               " is writable by others (mode 0666): refusing to load it",
           "unusable: plugin " + r.file0664 +
               " is writable by its group, gid 54321 (mode 0664): refusing to load it",
           "unusable: plugin directory " + r.dir0777 +
               " is writable by others (mode 0777): refusing to load " + r.in_dir0777 + " from it",
       })
    EXPECT_THAT(res.output, HasSubstr(reason));
  // Every good plugin, after the bad ones, in the table's usual columns.
  EXPECT_THAT(res.output, HasSubstr("testother      9.9.9     2    trainer,worker,host"));
  EXPECT_THAT(res.output, HasSubstr("initfails      9.9.9     2    trainer,worker,host"));
  EXPECT_THAT(res.output, HasSubstr("9.9.9     2    trainer,worker,host              " +
                                    std::string(WT_TEST_GOOD_DIR) +
                                    "/libwt_testgood.so  (shadowed by an earlier directory)"));
  EXPECT_THAT(res.output, HasSubstr("libwt_ipc.so"));
  EXPECT_THAT(res.output, HasSubstr("libwt_sparse_nccl.so"));
}

TEST(CliPlugins, HostilePluginsInJsonWithAShorterDeadline) {
  test::RefusedPlugins r;
  auto t0 = std::chrono::steady_clock::now();
  auto res = test::run_process(
      wt_cmd("WT_PLUGIN_PATH=" + hostile_path(r), "plugins --json --probe-timeout 2"));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_LT(took, std::chrono::seconds(15));
  // The JSON is stdout; what the probed plugins print goes to stderr, which run_process merges in.
  const auto begin = res.output.find("[\n"), end = res.output.rfind(']');
  ASSERT_TRUE(begin != std::string::npos && end != std::string::npos && end > begin) << res.output;
  auto arr = nlohmann::json::parse(res.output.substr(begin, end - begin + 1));
  std::map<std::string, nlohmann::json> by_path;
  for (auto& p : arr) by_path[p["path"]] = p;
  std::string hostile = test::hostile_plugin_dir();
  auto& crash = by_path[hostile + "/libwt_crashes.so"];
  EXPECT_EQ(crash["backend"], "crashes");
  EXPECT_FALSE(crash["usable"].get<bool>());
  EXPECT_EQ(crash["problem"],
            "plugin " + hostile + "/libwt_crashes.so crashed with SIGSEGV while loading");
  EXPECT_EQ(crash["plugin_version"], "");
  EXPECT_EQ(crash["abi_version"], 0);
  EXPECT_EQ(crash["capabilities"], "-");
  auto& hang = by_path[hostile + "/libwt_hangs.so"];
  EXPECT_FALSE(hang["usable"].get<bool>());
  EXPECT_EQ(hang["problem"], "plugin " + hostile +
                                 "/libwt_hangs.so did not answer within 2 s while loading (its "
                                 "wt_plugin_get or a static constructor never returned); the "
                                 "probe was killed");
  EXPECT_EQ(by_path[r.fifo]["problem"],
            "plugin " + r.fifo + " is a FIFO, not a regular file: refusing to load it");
  EXPECT_FALSE(by_path[r.in_dir0777]["usable"].get<bool>());
  auto& good = by_path[std::string(WT_TEST_GOOD_DIR) + "/libwt_testother.so"];
  EXPECT_TRUE(good["usable"].get<bool>()) << good.dump();
  EXPECT_EQ(good["plugin_version"], "9.9.9");
  EXPECT_EQ(good["abi_version"], 2);
  EXPECT_EQ(good["capabilities"], "trainer,worker,host");
  EXPECT_EQ(good["shadowed"], false);
  EXPECT_EQ(good["problem"], "");
  for (auto& [path, p] : by_path)
    if (p["backend"] == "ipc") {
      EXPECT_TRUE(p["usable"].get<bool>()) << p.dump();
    }
}

// wt serve loads its backend's plugin at start-up: a missing one is refused at once, naming the
// backend and where it was looked for, instead of a server that fails at the first init call.
TEST(CliServe, AMissingBackendIsRefusedAtStartUp) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r =
      test::run_process(wt_cmd("env -u WT_PLUGIN_PATH", "serve --backend nosuchbackend --port 0"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("nosuchbackend"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("listening on")));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(CliPlugins, Version) {
  auto r = test::run_process(wt_cmd("", "--version"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr(std::string("wt ") + kVersion));
}

// A plugin that starts a daemon (fork, setsid, fork) in every trainer: `wt conformance` names each
// one in its `leftovers` check, and none of them outlives the run.
TEST(CliConformance, ADaemonThePluginStartsIsNamedAndEndsWithTheRun) {
  const std::string plugin = std::string(WT_TEST_BROKEN_DIR) + "/libwt_leaks.so";
  auto r = test::run_process(std::string(WT_CLI_PATH) + " conformance " + plugin);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::vector<int> pids;
  const std::regex daemon(R"(process ([0-9]+) \(wt-test-daemon\) still running after)");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), daemon), end; it != end; ++it)
    pids.push_back(std::stoi((*it)[1]));
  ASSERT_FALSE(pids.empty()) << r.output;
  for (int pid : pids) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    EXPECT_NE(name, "wt-test-daemon") << "pid " << pid << " outlived wt conformance";
  }
}

}  // namespace
}  // namespace wt
