// The lazy registry and the factory, against the test-plugin matrix (tests/plugins).
#include <wt/wt.hpp>

#include "support/plugin_fixtures.hpp"
#include "support/recording_client.hpp"
#include "support/vector_source.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

using ::testing::AllOf;
using ::testing::HasSubstr;

namespace wt {
namespace {

void use_path(const std::string& path) {
  ::setenv("WT_PLUGIN_PATH", path.c_str(), 1);
}

InitInfo info_for(const std::string& backend) {
  return InitInfo::from_json(R"({"backend": ")" + backend + R"(", "rank": 0})");
}

// Expects trainer_init of `backend` to fail with `code` and a message containing every part.
void expect_trainer_init_error(const std::string& backend, wt_status code,
                               std::vector<std::string> parts) {
  test::RecordingClient client;
  test::VectorSource source;
  try {
    trainer_init(info_for(backend), client, &source);
    FAIL() << "trainer_init of " << backend << " succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(status_name(e.code()), status_name(code)) << e.what();
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
  EXPECT_TRUE(client.calls().empty()) << "a broken plugin reached the client";
}

TEST(Registry, NothingIsLoadedBeforeTheFirstTrainerInit) {
  use_path(WT_TEST_GOOD_DIR);
  auto& reg = Registry::instance();
  EXPECT_TRUE(reg.loaded().empty());
  InitInfo info = info_for("testgood");  // building an init info loads nothing
  EXPECT_EQ(info.backend(), "testgood");
  EXPECT_TRUE(reg.loaded().empty());

  test::RecordingClient client;
  test::VectorSource source;
  auto engine = trainer_init(info, client, &source);
  EXPECT_EQ(reg.loaded(), std::vector<std::string>{"testgood"});
  EXPECT_EQ(reg.load_count("testgood"), 1);
  EXPECT_EQ(reg.load_count("testother"), 0);
  EXPECT_EQ(engine->plugin().version(), "9.9.9");
  EXPECT_EQ(engine->plugin().path(), std::string(WT_TEST_GOOD_DIR) + "/libwt_testgood.so");
}

TEST(Registry, EightThreadsRacingOnTheFirstTrainerInitLoadOnce) {
  use_path(WT_TEST_GOOD_DIR);
  constexpr int kThreads = 8;
  std::barrier sync(kThreads);
  std::vector<std::unique_ptr<TrainerEngine>> engines(kThreads);
  std::vector<test::RecordingClient> clients(kThreads);
  std::vector<test::VectorSource> sources(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      sync.arrive_and_wait();
      engines[i] = trainer_init(info_for("testgood"), clients[i], &sources[i]);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(Registry::instance().load_count("testgood"), 1);
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_NE(engines[i], nullptr);
    EXPECT_EQ(&engines[i]->plugin(), &engines[0]->plugin())
        << "thread " << i << " got another load";
    EXPECT_EQ(clients[i].methods(), std::vector<std::string>{"init"});
  }
}

TEST(Registry, TrainerEngineDrivesTheClientThroughThePlugin) {
  use_path(WT_TEST_GOOD_DIR);
  test::RecordingClient client;
  test::VectorSource source;
  source.add("a", {kDLFloat, 32, 1}, {2, 2}, 1);
  source.add("b", {kDLInt, 64, 1}, {3}, 2);
  auto engine = trainer_init(info_for("testgood"), client, &source);
  SendOptions opts;
  opts.weight_version = "step-7";
  engine->send_weights(opts);
  auto calls = client.calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].method, "init");
  EXPECT_EQ(calls[0].payload, R"({"echo":true})");
  EXPECT_EQ(calls[1].method, "start");
  EXPECT_EQ(calls[2].payload, R"({"names":["a","b"]})");
  EXPECT_EQ(calls[3].method, "finish");
  EXPECT_EQ(calls[3].payload, "step-7");
  EXPECT_EQ(source.passes(), 1);
  EXPECT_EQ(source.ends(), 1);
}

TEST(Registry, ClientFailureSurfacesWithTheClientsReason) {
  use_path(WT_TEST_GOOD_DIR);
  test::RecordingClient client;
  test::VectorSource source;
  auto engine = trainer_init(info_for("testgood"), client, &source);
  client.fail_next("update", "server said 400: bad update");
  try {
    engine->send_weights();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("server said 400: bad update"));
  }
  // The failed round is ended on the inference side (end_weight_update, which this client sends
  // as vLLM understands it: an update it must refuse).
  ASSERT_EQ(client.methods(), (std::vector<std::string>{"init", "start", "update", "update"}));
  EXPECT_THAT(client.calls()[3].payload, HasSubstr("wt_end_weight_update"));
}

TEST(Registry, WrongAbiVersionNamesBothVersions) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error("badabi", WT_ERR_INCOMPATIBLE,
                            {"libwt_badabi.so", "speaks wt ABI version 99", "ABI versions 1 to 2"});
}

TEST(Registry, MissingEntrySymbolNamesTheFileAndSymbol) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "noentry", WT_ERR_INCOMPATIBLE,
      {"libwt_noentry.so", "does not export the entry symbol 'wt_plugin_get'"});
}

TEST(Registry, NullMandatorySlotIsNamed) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "nullslot", WT_ERR_INCOMPATIBLE,
      {"libwt_nullslot.so", "mandatory slot(s) missing or NULL: trainer.send_weights"});
}

TEST(Registry, FailingInitKeepsThePluginsCodeAndReason) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error("initfails", WT_ERR_SYSTEM, {"trainer init failed on purpose"});
}

TEST(Registry, ExceptionInsideThePluginBecomesAnInternalError) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error("throws", WT_ERR_INTERNAL, {"exception thrown inside the plugin"});
}

TEST(Registry, DeclaredBackendMustMatchTheFileName) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error("misnamed", WT_ERR_INCOMPATIBLE,
                            {"declares backend 'somethingelse'", "file name says 'misnamed'"});
}

TEST(Registry, NonElfFileIsRejectedWithTheLoadersReason) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error("bogus", WT_ERR_INCOMPATIBLE, {"cannot load plugin", "libwt_bogus.so"});
}

TEST(Registry, EveryBrokenPluginFailsAndTheProcessCarriesOn) {
  use_path(std::string(WT_TEST_BROKEN_DIR) + ":" + WT_TEST_GOOD_DIR);
  for (const char* b :
       {"badabi", "noentry", "nullslot", "initfails", "throws", "misnamed", "bogus", "garbageapi",
        "misaligned", "fftable", "unterminated", "runsoff", "badname", "badvtable", "badslot"}) {
    test::RecordingClient client;
    test::VectorSource source;
    EXPECT_THROW(trainer_init(info_for(b), client, &source), Error) << b;
  }
  test::RecordingClient client;
  test::VectorSource source;
  auto engine = trainer_init(info_for("testgood"), client, &source);
  engine->send_weights();
  EXPECT_EQ(client.methods().back(), "finish");
}

// ---- Malformed tables, strings and pointers: caught in-process, never by a fault ----------------

TEST(Registry, GarbageApiPointerIsRefusedWithoutTouchingIt) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "garbageapi", WT_ERR_INCOMPATIBLE,
      {std::string("plugin ") + WT_TEST_BROKEN_DIR +
       "/libwt_garbageapi.so is unusable: its API table pointer 0x10 does not point into "
       "readable memory"});
}

TEST(Registry, MisalignedApiPointerIsRefused) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "misaligned", WT_ERR_INCOMPATIBLE,
      {"libwt_misaligned.so is unusable: its API table pointer 0x", "is not aligned to 8 bytes"});
}

TEST(Registry, TableOfFfBytesIsRefusedByItsSize) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "fftable", WT_ERR_INCOMPATIBLE,
      {"libwt_fftable.so is unusable: its API table claims a size of 4294967295 bytes "
       "(struct_size), more than any wt ABI table can have (65536 at most)"});
}

TEST(Registry, BackendStringWithoutNulWithinTheBoundIsRefused) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "unterminated", WT_ERR_INCOMPATIBLE,
      {"libwt_unterminated.so is unusable: its backend string at 0x",
       "is not NUL-terminated within 64 bytes (it starts 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...')"});
}

TEST(Registry, BackendStringRunningIntoAnUnreadablePageIsRefused) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error("runsoff", WT_ERR_INCOMPATIBLE,
                            {"libwt_runsoff.so is unusable: its backend string at 0x",
                             "('runsoff') runs into unreadable memory before its NUL terminator"});
}

TEST(Registry, BackendStringWithForbiddenCharactersIsRefused) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "badname", WT_ERR_INCOMPATIBLE,
      {"libwt_badname.so is unusable: its backend string 'Bad Name!\\x01' is not valid: it must "
       "be non-empty and made of printable characters other than /"});
}

TEST(Registry, GarbageVtablePointerIsRefused) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "badvtable", WT_ERR_INCOMPATIBLE,
      {"libwt_badvtable.so is unusable: its trainer table pointer 0x20 does not point into "
       "readable memory"});
}

TEST(Registry, SlotPointingIntoDataIsRefused) {
  use_path(WT_TEST_BROKEN_DIR);
  expect_trainer_init_error(
      "badslot", WT_ERR_INCOMPATIBLE,
      {"libwt_badslot.so is unusable: slot(s) pointing outside any executable mapping: "
       "trainer.create (0x"});
}

// ---- Files that must not be opened or loaded at all ---------------------------------------------

TEST(Registry, FifoNamedLikeAPluginIsRefusedWithoutBlocking) {
  ::alarm(30);  // a blocking open() would otherwise hang the test until ctest's timeout
  test::RefusedPlugins r;
  use_path(r.fifo_dir);
  expect_trainer_init_error(
      "fifo", WT_ERR_INCOMPATIBLE,
      {"plugin " + r.fifo + " is a FIFO, not a regular file: refusing to load it"});
  ::alarm(0);
}

TEST(Registry, PluginFileWritableByOthersIsRefused) {
  test::RefusedPlugins r;
  use_path(r.file0666_dir + ":" + WT_TEST_GOOD_DIR);  // the first match wins, and is refused
  expect_trainer_init_error(
      "testgood", WT_ERR_INCOMPATIBLE,
      {"plugin " + r.file0666 + " is writable by others (mode 0666): refusing to load it"});
  EXPECT_TRUE(Registry::instance().loaded().empty());
}

TEST(Registry, PluginFileWritableByItsGroupIsRefused) {
  test::RefusedPlugins r;
  use_path(r.file0664_dir);
  expect_trainer_init_error(
      "testgood", WT_ERR_INCOMPATIBLE,
      {"plugin " + r.file0664 +
       " is writable by its group, gid 54321 (mode 0664): refusing to load it"});
}

TEST(Registry, PluginDirectoryWritableByOthersIsRefused) {
  test::RefusedPlugins r;
  use_path(r.dir0777);
  expect_trainer_init_error(
      "testgood", WT_ERR_INCOMPATIBLE,
      {"plugin directory " + r.dir0777 + " is writable by others (mode 0777): refusing to load " +
       r.in_dir0777 + " from it"});
}

TEST(Registry, SymlinkIntoADirectoryWritableByOthersIsRefused) {
  test::RefusedPlugins r;
  test::TempDir tmp;
  std::string links = tmp.subdir("links");
  std::filesystem::create_symlink(r.in_dir0777, links + "/libwt_testgood.so");
  use_path(links);
  expect_trainer_init_error(
      "testgood", WT_ERR_INCOMPATIBLE,
      {"plugin directory " + r.dir0777 + " is writable by others (mode 0777): refusing to load " +
       links + "/libwt_testgood.so from it"});
}

TEST(Registry, PluginOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file away";
  test::TempDir tmp;
  std::string dir = tmp.subdir("owned");
  std::string file = test::copy_good_plugin(dir);
  ASSERT_EQ(::chown(file.c_str(), 12345, 12345), 0);
  use_path(dir);
  expect_trainer_init_error(
      "testgood", WT_ERR_INCOMPATIBLE,
      {"plugin " + file +
       " is owned by uid 12345, neither root nor this process's user (uid 0): refusing to load "
       "it"});
}

TEST(Registry, AGoodCopyInAPrivateDirectoryStillLoads) {
  test::TempDir tmp;
  std::string dir = tmp.subdir("fine");
  std::string file = test::copy_good_plugin(dir);
  use_path(dir);
  test::RecordingClient client;
  test::VectorSource source;
  auto engine = trainer_init(info_for("testgood"), client, &source);
  EXPECT_EQ(engine->plugin().path(), file);
}

TEST(Registry, ScanReportsRefusedFilesWithTheirReasons) {
  ::alarm(30);
  test::RefusedPlugins r;
  use_path(r.path_list());
  std::map<std::string, PluginInfo> by_path;
  for (auto& i : Registry::instance().scan()) by_path[i.path] = i;
  ASSERT_EQ(by_path.count(r.fifo), 1u);
  EXPECT_FALSE(by_path[r.fifo].usable);
  EXPECT_EQ(by_path[r.fifo].backend, "fifo");
  EXPECT_EQ(by_path[r.fifo].problem,
            "plugin " + r.fifo + " is a FIFO, not a regular file: refusing to load it");
  EXPECT_EQ(by_path[r.file0666].problem,
            "plugin " + r.file0666 + " is writable by others (mode 0666): refusing to load it");
  EXPECT_EQ(by_path[r.in_dir0777].problem, "plugin directory " + r.dir0777 +
                                               " is writable by others (mode 0777): refusing "
                                               "to load " +
                                               r.in_dir0777 + " from it");
  EXPECT_TRUE(by_path[r.in_dir0777].shadowed);
  EXPECT_TRUE(Registry::instance().loaded().empty());
  ::alarm(0);
}

// ---- Out-of-process probing: survives what cannot be checked in-process -------------------------

TEST(Registry, ScanIsolatedSurvivesCrashingAndHangingPlugins) {
  test::RefusedPlugins r;
  use_path(std::string(WT_TEST_BROKEN_DIR) + ":" + test::hostile_plugin_dir() + ":" +
           r.path_list() + ":" + WT_TEST_GOOD_DIR);
  auto t0 = std::chrono::steady_clock::now();
  auto infos = Registry::instance().scan_isolated(std::chrono::milliseconds(1000));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(10)) << "the probes run side by side, each with 1 s";
  std::map<std::string, PluginInfo> by;
  for (auto& i : infos)
    if (!i.shadowed) by[i.backend] = i;
  std::string hostile = test::hostile_plugin_dir();
  EXPECT_FALSE(by["crashes"].usable);
  EXPECT_EQ(by["crashes"].problem,
            "plugin " + hostile + "/libwt_crashes.so crashed with SIGSEGV while loading");
  EXPECT_FALSE(by["hangs"].usable);
  EXPECT_EQ(by["hangs"].problem,
            "plugin " + hostile +
                "/libwt_hangs.so did not answer within 1 s while loading (its wt_plugin_get or "
                "a static constructor never returned); the probe was killed");
  EXPECT_EQ(by["fifo"].problem,
            "plugin " + r.fifo + " is a FIFO, not a regular file: refusing to load it");
  EXPECT_THAT(by["garbageapi"].problem,
              HasSubstr("its API table pointer 0x10 does not point into readable memory"));
  EXPECT_THAT(by["fftable"].problem, HasSubstr("claims a size of 4294967295 bytes"));
  // The same answers as an in-process scan for everything that one survives.
  EXPECT_THAT(by["badabi"].problem, HasSubstr("speaks wt ABI version 99"));
  EXPECT_TRUE(by["initfails"].usable);
  EXPECT_EQ(by["initfails"].plugin_version, "9.9.9");
  // Good plugins are all still there, with their details.
  EXPECT_TRUE(by["testother"].usable);
  EXPECT_EQ(by["testother"].plugin_version, "9.9.9");
  EXPECT_EQ(by["testother"].abi_version, 2u);
  EXPECT_EQ(by["testother"].capabilities, WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY);
  EXPECT_TRUE(by["ipc"].usable);
  bool good_copy_listed = false;
  for (auto& i : infos)
    if (i.path == std::string(WT_TEST_GOOD_DIR) + "/libwt_testgood.so") {
      good_copy_listed = true;
      EXPECT_TRUE(i.usable) << i.problem;
      EXPECT_TRUE(i.shadowed);  // the refused copies come first on the path
    }
  EXPECT_TRUE(good_copy_listed);
  EXPECT_TRUE(Registry::instance().loaded().empty()) << "nothing is loaded into this process";
}

TEST(Registry, AddedDirectoriesAreReportedInOrderOnce) {
  auto& reg = Registry::instance();
  EXPECT_TRUE(reg.added_directories().empty());
  reg.add_directory("/first");
  reg.add_directory("/second");
  reg.add_directory("/first");
  EXPECT_EQ(reg.added_directories(), (std::vector<std::string>{"/first", "/second"}));
}

TEST(Registry, MissingPluginNamesEveryDirectoryAndTheBackendsFound) {
  use_path(std::string(WT_TEST_GOOD_DIR) + ":/nonexistent/wt-plugins");
  test::RecordingClient client;
  test::VectorSource source;
  try {
    trainer_init(info_for("nosuchbackend"), client, &source);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_NOT_FOUND);
    std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("libwt_nosuchbackend.so"));
    for (const auto& dir : Registry::instance().search_path()) EXPECT_THAT(m, HasSubstr(dir));
    EXPECT_THAT(m, HasSubstr("/nonexistent/wt-plugins"));
    EXPECT_THAT(m, HasSubstr("testgood"));
    EXPECT_THAT(m, HasSubstr("testother"));
    EXPECT_THAT(m, HasSubstr("ipc"));  // the plugin directory next to libwt is searched last
  }
}

TEST(Registry, SearchOrderIsEnvThenConfigThenDefault) {
  use_path("/a:/b");
  Registry::instance().add_directory("/from-config");
  auto dirs = Registry::instance().search_path();
  ASSERT_EQ(dirs.size(), 4u);
  EXPECT_EQ(dirs[0], "/a");
  EXPECT_EQ(dirs[1], "/b");
  EXPECT_EQ(dirs[2], "/from-config");
  EXPECT_THAT(dirs[3], HasSubstr("wt/plugins"));
}

TEST(Registry, ScanReportsEveryFileWithoutCreatingEngines) {
  use_path(std::string(WT_TEST_BROKEN_DIR) + ":" + WT_TEST_GOOD_DIR);
  auto infos = Registry::instance().scan();
  std::map<std::string, PluginInfo> by;
  for (auto& i : infos)
    if (!i.shadowed) by[i.backend] = i;
  for (const char* b :
       {"badabi", "noentry", "nullslot", "misnamed", "bogus", "garbageapi", "misaligned", "fftable",
        "unterminated", "runsoff", "badname", "badvtable", "badslot"}) {
    ASSERT_TRUE(by.count(b)) << b;
    EXPECT_FALSE(by[b].usable) << b;
    EXPECT_FALSE(by[b].problem.empty()) << b;
  }
  // These load fine; their failures only show when an engine is made.
  EXPECT_TRUE(by["initfails"].usable);
  EXPECT_TRUE(by["testgood"].usable);
  EXPECT_EQ(by["testgood"].plugin_version, "9.9.9");
  EXPECT_TRUE(by["ipc"].usable);
  EXPECT_TRUE(Registry::instance().loaded().empty());
}

TEST(Registry, PluginLogsArriveThroughTheHostCallback) {
  ::setenv("WT_LOG_LEVEL", "info", 1);
  use_path(WT_TEST_GOOD_DIR);
  std::ostringstream captured;
  auto l = logger("wt.testgood");
  l->set_level(spdlog::level::info);
  l->sinks().push_back(std::make_shared<spdlog::sinks::ostream_sink_mt>(captured));
  test::RecordingClient client;
  test::VectorSource source;
  auto engine =
      trainer_init(InitInfo::from_json(R"({"backend":"testgood","rank":3})"), client, &source);
  EXPECT_THAT(captured.str(), HasSubstr("[test] trainer created (rank 3)"));
  EXPECT_TRUE(client.calls().empty()) << "rank 3 is not the sender and must make no RPC";
}

TEST(Registry, WorkerEngineLoadsLazilyToo) {
  use_path(WT_TEST_GOOD_DIR);
  EXPECT_TRUE(Registry::instance().loaded().empty());
  auto worker = WorkerEngine::create("testother", "{}");
  EXPECT_EQ(Registry::instance().loaded(), std::vector<std::string>{"testother"});
  try {
    worker->receive("{}", [](std::span<const wt_tensor>) {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_STATE);
    EXPECT_THAT(e.what(), HasSubstr("receive before start"));
  }
  worker->start();
  worker->receive("{}", [](std::span<const wt_tensor>) {});
  worker->finish();
}

}  // namespace
}  // namespace wt
