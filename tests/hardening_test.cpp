// Regression tests for what a hostile test broke in libwt and `wt launch`: inputs wt did not create
// (directories, FIFOs, YAML, JSON), session rules under abandoned rounds, secrets in argv and
// processes orphaned by a killed coordinator.
#include <wt/dtype.hpp>
#include <wt/init_info.hpp>
#include <wt/json_parse.hpp>
#include <wt/sdk/shm_segments.hpp>
#include <wt/services/checkpoint_gen.hpp>
#include <wt/services/receiver.hpp>
#include <wt/services/safetensors.hpp>
#include <wt/services/yaml_json.hpp>
#include <wt/wt.hpp>

#include "support/process.hpp"
#include "support/vector_source.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

using ::testing::HasSubstr;
using ::testing::Not;

namespace wt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path fresh_dir(const std::string& name) {
  auto d = fs::path(WT_BUILD_DIR) / "hardening" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string launch_config(const fs::path& dir, const std::string& name, const std::string& text) {
  auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

test::ProcessResult launch(const std::string& config, const std::string& env = "") {
  return test::run_process(env + " timeout 120 " + WT_CLI_PATH + " launch " + config);
}

// --- 1. source.generate.dir never deletes what wt did not create -------------------------------

TEST(GenerateDir, AUsersDirectoryIsRefusedAndKept) {
  auto d = fresh_dir("gen_user_dir");
  auto target = d / "mine";
  fs::create_directories(target / "sub");
  std::ofstream(target / "notes.txt") << "precious";
  auto cfg = launch_config(
      d, "c.yaml",
      "backend: ipc\nsource: {generate: {model: tiny, dir: " + target.string() + "}}\nrounds: 1\n");
  auto r = launch(cfg);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("source.generate.dir: " + target.string() + ": exists and is not empty"));
  EXPECT_THAT(r.output, HasSubstr("never deletes what it did not create"));
  EXPECT_EQ(slurp(target / "notes.txt"), "precious");
  EXPECT_TRUE(fs::is_directory(target / "sub"));
}

TEST(GenerateDir, ARegularFileOrAFifoIsRefusedAndKept) {
  auto d = fresh_dir("gen_file");
  std::ofstream(d / "file") << "keep me";
  ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0600), 0);
  auto layout = model_layout("tiny", {kDLBfloat, 16, 1});
  for (const char* name : {"file", "fifo"}) {
    auto msg = error_of([&] { write_synthetic_checkpoint((d / name).string(), layout, 1, 1); });
    EXPECT_THAT(msg, HasSubstr("exists and is not a directory")) << name;
  }
  EXPECT_EQ(slurp(d / "file"), "keep me");
  EXPECT_TRUE(fs::is_fifo(d / "fifo"));
  // Nothing half-written is left beside them.
  int entries = 0;
  for (auto& e : fs::directory_iterator(d))
    entries += e.path().filename().string().find(".wt-partial") == std::string::npos;
  EXPECT_EQ(entries, 2);
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 2);
}

TEST(GenerateDir, NewOrEmptyDirectoryIsGeneratedOnceThenReused) {
  auto d = fresh_dir("gen_new");
  auto layout = model_layout("tiny", {kDLBfloat, 16, 1});
  fs::create_directories(d / "empty");
  for (const char* name : {"new", "empty", "slash/"}) {
    auto files = write_synthetic_checkpoint((d / name).string(), layout, 3, 2);
    ASSERT_EQ(files.size(), 2u);
    EXPECT_TRUE(generated_checkpoint_present((d / name).string(), layout, 3, 2));
    EXPECT_FALSE(generated_checkpoint_present((d / name).string(), layout, 4, 2)) << "other seed";
    SafetensorsSource s({(d / name).string()});
    EXPECT_EQ(s.total_bytes(), layout.total_bytes());
  }
  // A second generation into the same directory is refused, not overwritten.
  auto msg = error_of([&] { write_synthetic_checkpoint((d / "new").string(), layout, 4, 2); });
  EXPECT_THAT(msg, HasSubstr("exists and is not empty"));
  // And `wt launch` reuses what it generated.
  auto cfg = launch_config(d, "c.yaml",
                           "backend: ipc\nsource: {generate: {model: tiny, seed: 3, shards: 2, "
                           "dir: " +
                               (d / "new").string() + "}}\nrounds: 1\n");
  auto r = launch(cfg);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("generating")));
}

// --- 4. a FIFO where a file is expected never blocks ---------------------------------------------

TEST(Fifo, AsACheckpointOrAConfigIsRefusedAtOnce) {
  auto d = fresh_dir("fifo");
  auto fifo = d / "model.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(error_of([&] { SafetensorsSource s({fifo.string()}); }),
              HasSubstr(fifo.string() + ": not a regular file"));
  auto cfg = d / "config.yaml";
  ASSERT_EQ(mkfifo(cfg.c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { load_yaml_file(cfg.string()); }),
              HasSubstr(cfg.string() + ": not a regular file"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

// --- 11. YAML: aliases, duplicate keys, extra documents ------------------------------------------

TEST(Yaml, RecursiveAliasIsAnErrorNotACrash) {
  EXPECT_THAT(error_of([] { load_yaml("x: &r [*r]\n", "c.yaml"); }),
              HasSubstr("nested deeper than 64 levels (or an alias refers to itself)"));
  EXPECT_THAT(error_of([] { InitInfo::from_yaml("backend: ipc\nx: &r {a: *r}\n", "ii.yaml"); }),
              HasSubstr("ii.yaml:"));
}

TEST(Yaml, AliasBombIsRefusedBeforeItGrows) {
  // 9 levels of 9 aliases each: 9^9 = 387 million nodes from a few hundred bytes.
  std::string y = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    y += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) y += (k ? ", *a" : "*a") + std::to_string(i - 1);
    y += "]\n";
  }
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(error_of([&] { load_yaml(y, "bomb.yaml"); }),
              HasSubstr("expands to more than 65536 nodes"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(Yaml, DuplicateKeysAndExtraDocumentsAreErrors) {
  EXPECT_THAT(error_of([] { load_yaml("a: 1\nb: 2\na: 3\n", "c.yaml"); }),
              HasSubstr("c.yaml:3:1: duplicate key 'a'"));
  EXPECT_THAT(error_of([] { load_yaml("a: {x: 1, x: 2}\n", "c.yaml"); }),
              HasSubstr("duplicate key 'x'"));
  EXPECT_THAT(error_of([] { load_yaml("a: 1\n---\nb: 2\n", "c.yaml"); }),
              HasSubstr("c.yaml:3:1: a second YAML document"));
  EXPECT_THAT(error_of([] { load_yaml("? [a]\n: 1\n", "c.yaml"); }),
              HasSubstr("a key must be a plain string"));
  // yaml-cpp's LoadAll yields documents forever on this input (found by fuzzing): an error, now.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(error_of([] { load_yaml(",L\n-", "c.yaml"); }), HasSubstr("c.yaml"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(Yaml, LaunchConfigErrorsNameTheFile) {
  auto d = fresh_dir("yaml_launch");
  struct Case {
    std::string text, expected;
  } cases[] = {
      {"backend: ipc\nbackend: nccl\nsource: {generate: {model: tiny}}\n",
       ":2:1: duplicate key 'backend'"},
      {"backend: ipc\nsource: {generate: {model: tiny}}\n---\nrounds: 2\n",
       ":4:1: a second YAML document"},
      // A sequence where a path is expected used to escape as a bare "bad conversion".
      {"backend: ipc\nsource: {safetensors: [[a, b]]}\n", ":2:"},
      {"backend: ipc\nsource: {generate: {model: tiny}}\nplugin_dirs: [{a: 1}]\n", ":3:"},
      {"backend: ipc\nsource: {generate: {model: tiny}}\ntrainer: {group_timeout_s: -1}\n",
       ":3:28: 'trainer.group_timeout_s' must be a number of seconds in (0, 86400], got '-1'"},
      {"backend: ipc\nsource: {generate: {model: tiny}}\ntrainer: {group_timeout_s: .nan}\n",
       ":3:28: 'trainer.group_timeout_s' must be a number of seconds"},
      {"backend: ipc\nsource: {generate: {model: tiny}}\nreceiver: {timeout_s: .inf}\n",
       ":3:23: 'receiver.timeout_s' must be a number of seconds"},
      {"backend: ipc\nsource: {generate: {model: tiny}}\nreceiver: {timeout_s: 0}\n",
       ":3:23: 'receiver.timeout_s' must be a number of seconds"},
      {"x: &r [*r]\n", ":1:"},
  };
  int i = 0;
  for (const auto& c : cases) {
    auto cfg = launch_config(d, "c" + std::to_string(i++) + ".yaml", c.text);
    auto r = launch(cfg);
    EXPECT_EQ(r.exit_code, 1) << c.text << r.output;
    EXPECT_THAT(r.output, HasSubstr(cfg + c.expected)) << c.text;
  }
}

// --- 2. JSON nesting and number overflow outside HTTP --------------------------------------------

TEST(Json, DeepNestingAndOverflowAreClearErrors) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_THROW(parse_json(deep), JsonError);
  std::string ii = R"({"backend": "ipc", "x": )" + deep + "}";
  EXPECT_THAT(error_of([&] { InitInfo::from_json(ii, "init.json"); }),
              HasSubstr("init.json: JSON nested deeper than 64 levels"));
  EXPECT_THAT(error_of([] { InitInfo::from_json(R"({"backend": "ipc", "x": 1e999})", "i"); }),
              HasSubstr("i: not valid JSON"));
  Receiver receiver("ipc");
  InProcessClient client(receiver);
  EXPECT_THAT(error_of([&] { client.init_weight_transfer_engine(deep); }),
              HasSubstr("init_info: JSON nested deeper than 64 levels"));
}

// --- 13. sizes that overflow; names with NUL -----------------------------------------------------

std::string write_safetensors(const fs::path& p, const std::string& header,
                              std::size_t data_bytes) {
  std::ofstream f(p, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(data_bytes, '\0');
  return p.string();
}

TEST(Overflow, ShapeWhoseByteCountWrapsIsRefused) {
  uint64_t n = 0;
  const int64_t shape[] = {(int64_t{1} << 61) + 1};
  EXPECT_TRUE(checked_numel(shape, 1, &n)) << "the element count itself fits";
  EXPECT_FALSE(checked_nbytes(shape, 1, {kDLFloat, 64, 1}, &n)) << "x8 bytes wraps to 8";
  const int64_t ok[] = {3, 5};
  ASSERT_TRUE(checked_nbytes(ok, 2, {kDLFloat, 64, 1}, &n));
  EXPECT_EQ(n, 120u);

  auto d = fresh_dir("overflow");
  auto f = write_safetensors(
      d / "w.safetensors",
      R"({"w": {"dtype": "F64", "shape": [2305843009213693953], "data_offsets": [0, 8]}})", 8);
  EXPECT_THAT(error_of([&] { SafetensorsSource s({f}); }),
              HasSubstr("has more bytes than 64 bits can count"));
  auto g = write_safetensors(
      d / "nul.safetensors",
      std::string(R"({"a\u0000x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})"), 1);
  EXPECT_THAT(error_of([&] { SafetensorsSource s({g}); }), HasSubstr("holds a NUL character"));
}

TEST(Overflow, AnUpdateWhoseShapeWrapsOrWhoseNamesHoldNulIsRefused) {
  Receiver receiver("ipc");
  receiver.init_weight_transfer_engine({{"packed", false}});
  auto handle =
      nlohmann::json{{"cpu", {{"kind", "shm"}, {"name", "/wt-1-2-3"}, {"size", 8}, {"offset", 0}}}};
  receiver.start_weight_update();
  EXPECT_THAT(error_of([&] {
                receiver.update_weights({{"names", {"w"}},
                                         {"dtype_names", {"float64"}},
                                         {"shapes", {{int64_t{2305843009213693953}}}},
                                         {"ipc_handles", {handle}}});
              }),
              HasSubstr("'shapes[0]' [2305843009213693953] of float64 has a negative dimension "
                        "or more bytes than 64 bits can count"));
  receiver.start_weight_update();
  EXPECT_THAT(
      error_of([&] {
        receiver.update_weights({{"names", {std::string("a\0x", 3), std::string("a\0y", 3)}},
                                 {"dtype_names", {"uint8", "uint8"}},
                                 {"shapes", {{1}, {1}}},
                                 {"ipc_handles", {handle, handle}}});
      }),
      HasSubstr("field 'names[0]' holds a NUL character"));
  EXPECT_TRUE(receiver.names().empty());
}

// Each tensor's size fits 64 bits, their sum does not: it must not wrap to a small mapping.
TEST(Overflow, PackedSizesWhoseSumWrapsAreRefused) {
  Receiver receiver("ipc");
  receiver.init_weight_transfer_engine({{"packed", true}});
  receiver.start_weight_update();
  const int64_t huge = INT64_MAX;
  auto msg = error_of([&] {
    receiver.update_weights(
        {{"names", {"a", "b", "c"}},
         {"dtype_names", {"uint8", "uint8", "uint8"}},
         {"shapes", {{huge}, {huge}, {18}}},
         {"tensor_sizes", {huge, huge, 18}},
         {"ipc_handles",
          {{"cpu", {{"kind", "shm"}, {"name", "/wt-1-2-3"}, {"size", 16}, {"offset", 0}}}}}});
  });
  EXPECT_THAT(msg, HasSubstr("the tensors' sizes add up to more bytes than 64 bits can count"));
}

// A second name for a file is someone else's file under a wt-like name (a hard link).
TEST(Ipc, ASegmentWithASecondLinkIsRefused) {
  auto seg = shm::create_segment(64);
  ASSERT_NE(seg.addr, nullptr);
  std::memset(seg.addr, 7, 64);
  const std::string other = shm::new_segment_name();
  ASSERT_EQ(::link(("/dev/shm" + seg.name).c_str(), ("/dev/shm" + other).c_str()), 0);
  Receiver receiver("ipc");
  receiver.init_weight_transfer_engine({{"packed", false}});
  receiver.start_weight_update();
  auto msg = error_of([&] {
    receiver.update_weights(
        {{"names", {"w"}},
         {"dtype_names", {"uint8"}},
         {"shapes", {{64}}},
         {"ipc_handles",
          {{{"cpu", {{"kind", "shm"}, {"name", other}, {"size", 64}, {"offset", 0}}}}}}});
  });
  EXPECT_THAT(msg, HasSubstr("has 2 links: refused (a wt segment has one name)"));
  EXPECT_TRUE(receiver.names().empty());
  shm_unlink(other.c_str());
  shm_unlink(seg.name.c_str());
  munmap(seg.addr, 64);
}

// --- 7. an abandoned round never reaches a later finish ------------------------------------------

// Forwards to a receiver, but can cut the trainer off after its first update, as a trainer that
// dies mid-round: the session it opened stays open with what it staged.
class CuttableClient : public Client {
 public:
  explicit CuttableClient(Receiver& r) : inner_(r) {}
  bool cut_after_first_update = false;
  void init_weight_transfer_engine(std::string_view j) override {
    if (!cut_) inner_.init_weight_transfer_engine(j);
  }
  void start_weight_update() override {
    if (!cut_) inner_.start_weight_update();
  }
  void update_weights(std::string_view j) override {
    if (cut_) return;
    inner_.update_weights(j);
    cut_ = cut_after_first_update;
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    if (cut_) throw Error(WT_ERR_SYSTEM, "the trainer died");
    inner_.finish_weight_update(v);
  }

 private:
  InProcessClient inner_;
  bool cut_ = false;
};

TEST(Receiver, ReinitAndStartDiscardWhatAnAbandonedRoundStaged) {
  Receiver receiver("ipc");
  auto info = InitInfo::from_object({{"backend", "ipc"}, {"rank", 0}, {"packed", false}});
  test::VectorSource w1, w2;
  w1.add("w1", {kDLFloat, 32, 1}, {64}, 1);
  w2.add("w2", {kDLFloat, 32, 1}, {64}, 2);
  {
    CuttableClient dying(receiver);
    dying.cut_after_first_update = true;
    auto engine = trainer_init(info, dying, &w1);
    EXPECT_THROW(engine->send_weights(), Error);
  }
  EXPECT_TRUE(receiver.session_active()) << "the dead trainer left its session open";
  CuttableClient next(receiver);
  auto engine = trainer_init(info, next, &w2);  // re-init, start, update w2 only, finish
  engine->send_weights();
  EXPECT_EQ(receiver.names(), std::vector<std::string>{"w2"}) << "w1 was never finished";
  EXPECT_EQ(*receiver.bytes_of("w2"), w2.tensors()[0].bytes);
}

// --- 10 and 13. a killed coordinator leaves no orphan; the token is not in argv ----------------

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

std::string cmdline_of(pid_t pid) {
  auto s = slurp(fs::path("/proc") / std::to_string(pid) / "cmdline");
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

TEST(Launch, KilledCoordinatorLeavesNoOrphanAndTheTokenIsNotInArgv) {
  auto d = fresh_dir("orphans");
  auto cfg = launch_config(d, "c.yaml",
                           "backend: ipc\nsource: {generate: {model: tiny}}\nrounds: 100000\n"
                           "training_step: {perturb_fraction: 0.001}\nverify: false\n");
  const std::string secret = "s3cret-token-" + std::to_string(getpid());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("WT_RECEIVER_TOKEN", secret.c_str(), 1);
    setenv("WT_CACHE_DIR", (fs::path(WT_BUILD_DIR) / "cache").c_str(), 1);
    int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(WT_CLI_PATH, WT_CLI_PATH, "launch", cfg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the receiver and the trainer rank to run.
  std::vector<pid_t> kids;
  for (int i = 0; i < 300 && kids.size() < 2; ++i) {
    std::this_thread::sleep_for(100ms);
    kids = children_of(pid);
  }
  ASSERT_EQ(kids.size(), 2u) << "receiver and one trainer rank";
  for (auto k : kids) EXPECT_THAT(cmdline_of(k), Not(HasSubstr(secret))) << cmdline_of(k);
  std::this_thread::sleep_for(500ms);  // mid-transfer
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  for (auto k : kids) {
    bool gone = false;
    for (int i = 0; i < 150 && !gone; ++i) {
      std::this_thread::sleep_for(100ms);
      // Orphans are reparented; a dead child is a zombie until its new parent reaps it.
      auto st = slurp(fs::path("/proc") / std::to_string(k) / "stat");
      gone = st.empty() || st.find(") Z") != std::string::npos;
    }
    EXPECT_TRUE(gone) << "process " << k << " outlived its coordinator";
  }
}

}  // namespace
}  // namespace wt
