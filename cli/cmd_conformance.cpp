// `wt conformance PATH`: runs the conformance checks on one plugin file and prints a table. The
// checks run in a child process (its own process group, with the `wt serve` it starts), reporting
// one JSON line per event through a pipe; a check that crashes or outlives its deadline fails, by
// name, and the child is killed with everything it started. This process never loads the plugin:
// it reads the reports as claims (Reports) and judges the witness itself (conformance/witness.hpp).
#include "commands.hpp"
#include "conformance/conformance.hpp"
#include "conformance/process_tree.hpp"
#include "conformance/witness.hpp"

#include <wt/error.hpp>
#include <wt/json_parse.hpp>
#include <wt/sdk/shm_segments.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace wt::cli {
namespace {

using conformance::Outcome;

// The child's side: each event one JSON line on the pipe.
class PipeReporter : public conformance::Reporter {
 public:
  PipeReporter(int fd, std::string nonce) : fd_(fd), nonce_(std::move(nonce)) {}
  void plugin(const nlohmann::json& info) override { write({{"plugin", info}}); }
  void begin(const std::string& check) override { write({{"begin", check}}); }
  void end(const std::string& check, Outcome o, const std::string& detail) override {
    const char* r = o == Outcome::pass   ? "pass"
                    : o == Outcome::fail ? "FAIL"
                    : o == Outcome::skip ? "skip"
                                         : "n/a";
    write({{"end", check}, {"result", r}, {"detail", detail}});
  }

 private:
  void write(nlohmann::json j) {
    j["nonce"] = nonce_;
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    const char* p = line.data();
    std::size_t n = line.size();
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  int fd_;
  std::string nonce_;
};

nlohmann::json json_option(const std::string& text, const char* option) {
  if (text.empty()) return nlohmann::json::object();
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const JsonError& e) {
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{} is not valid JSON: {}", option, e.what()));
  }
  if (!j.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{} must be a JSON object", option));
  j.erase("backend");
  return j;
}

std::string self_program() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(WT_ERR_SYSTEM, "cannot find this program (/proc/self/exe)");
  return p.string();
}

std::string signal_text(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return fmt::format("crashed with SIG{}", name ? name : std::to_string(WTERMSIG(status)));
  }
  // A sanitizer that catches the crash ends the process with an exit status of its own.
  return fmt::format(
      "ended with exit status {} (a crash a sanitizer caught, or exit() in the "
      "plugin)",
      WEXITSTATUS(status));
}

volatile sig_atomic_t g_stop_signal = 0;
volatile pid_t g_checks_group = 0;
void on_stop_signal(int sig) {
  g_stop_signal = sig;
  if (g_checks_group > 0) {
    ::kill(-g_checks_group, SIGKILL);
    ::kill(g_checks_group, SIGKILL);  // it may have left its group
  }
}

struct Row {
  std::string result = "-", detail = "not run";
};

// The last lines of the child's log, for a failed run.
std::string log_tail(const std::string& path, std::size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "    " + all[i] + "\n";
  return out;
}

// The checks process: forked, in a process group of its own, its output in `log`, its reports on
// `report_fd`. Never returns in the child.
pid_t start_checks_process(const conformance::Options& opts, int fds[2], const std::string& log) {
  std::fflush(stdout);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(WT_ERR_SYSTEM, "fork failed");
  if (pid > 0) return pid;
  ::setpgid(0, 0);
  // Dies with `wt conformance` (however it ends), taking what it started with it: its `wt serve`
  // dies with it in turn (Child's PR_SET_PDEATHSIG).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  ::close(fds[0]);
  int lf = ::open(log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (lf >= 0) ::dup2(lf, 1), ::dup2(lf, 2);
  // The plugin's processes and the worker's `wt serve` inherit these, not the report pipe
  // (close-on-exec); a plugin's forked children are ended after each check.
  ::setenv("TMPDIR", (opts.work_dir + "/tmp").c_str(), 1);
  if (::chdir((opts.work_dir + "/cwd").c_str()) != 0) ::_exit(1);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  PipeReporter reporter(fds[1], opts.nonce);
  try {
    conformance::run_checks(opts, reporter);
  } catch (...) {
  }
  std::fflush(nullptr);
  ::_exit(0);  // a check may have left a thread blocked in the plugin
}

// The judge's reading of the checks process's reports. They are claims from a process the plugin
// runs in: each must carry this run's nonce, name the check that runs next in the list, begin
// once and end once; anything else is forged, and fails the check it came in. Deadlines come from
// the list, never from what the reports say: a report cannot extend one.
class Reports {
 public:
  explicit Reports(const conformance::Options& opts) : opts_(opts) {
    for (const auto& d : conformance::checks())
      if (!d.judged_outside) order_.push_back(d);
    for (auto& d : order_)
      if (std::string(d.name) == "loopback") d.deadline_s += 20 * opts.rounds;  // full syncs
  }
  // A deadline for the next report: the running check's, or 30 s between two checks.
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  const std::optional<std::string>& current() const { return current_; }
  int current_deadline_s() const { return next_ < order_.size() ? order_[next_].deadline_s : 0; }

  void line(std::string_view text) {
    nlohmann::json j;
    try {
      j = parse_json(text);
    } catch (const JsonError&) {
      j = nullptr;
    }
    if (!j.is_object() || !j.contains("nonce") || !j["nonce"].is_string() ||
        j["nonce"].get<std::string>() != opts_.nonce)
      return forged();  // not the checks' own line: written into a descriptor it does not own
    // Every field of a line has the type the checks write, or the line is not theirs.
    auto string_if_present = [&](const char* key) {
      return !j.contains(key) || j[key].is_string();
    };
    if (!string_if_present("begin") || !string_if_present("end") || !string_if_present("result") ||
        !string_if_present("detail"))
      return forged();
    if (j.contains("plugin")) {
      const auto& p = j["plugin"];
      if (!p.is_object() || !p.value("backend", nlohmann::json()).is_string() ||
          !p.value("plugin_version", nlohmann::json()).is_string() ||
          !p.value("abi_version", nlohmann::json()).is_number_unsigned() ||
          !p.value("capabilities", nlohmann::json()).is_array())
        return forged();
      for (const auto& c : p["capabilities"])
        if (!c.is_string()) return forged();
      plugin = p;
    }
    if (j.contains("begin")) {
      if (current_ || next_ >= order_.size() || !j["begin"].is_string() ||
          j["begin"].get<std::string>() != order_[next_].name)
        return forged();  // a check begun twice, or out of order
      current_ = order_[next_].name;
      deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(order_[next_].deadline_s);
    }
    if (j.contains("end")) {
      if (!current_ || !j["end"].is_string() || j["end"].get<std::string>() != *current_)
        return forged();
      const std::string name = *current_;
      rows[name] = {j.value("result", "?"), j.value("detail", "")};
      if (forged_in.count(name) != 0)
        rows[name] = {"FAIL",
                      "something other than the checks wrote into the report channel during this "
                      "check (a line without this run's nonce, or out of order): the plugin "
                      "writes into descriptors it does not own"};
      current_.reset();
      ++next_;
      deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    }
  }
  // Text that never ends a line is not kept past 1 MiB (the checks' own lines are far shorter).
  void overlong() { forged(); }

  std::map<std::string, Row> rows;
  nlohmann::json plugin;
  bool any_forged = false;
  std::set<std::string> forged_in;

 private:
  void forged() {
    any_forged = true;
    forged_in.insert(current_                ? *current_
                     : next_ < order_.size() ? std::string(order_[next_].name)
                                             : std::string("file"));
  }
  const conformance::Options& opts_;
  std::vector<conformance::CheckDef> order_;
  std::size_t next_ = 0;
  std::optional<std::string> current_;
  std::chrono::steady_clock::time_point deadline_ =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
};

// Reads the checks process's reports until it ends or a deadline passes (then it is killed, and
// the check it was in fails). Returns its wait status.
int read_reports(int fd, pid_t pid, Reports& reports) {
  std::string buf;
  bool exited = false;
  int status = 0;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    reports.deadline() - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd, POLLIN, 0};
    // Woken at least every 200 ms to see whether the checks process ended: a process the
    // plugin forked may hold the pipe open after it.
    int r = left > 0 ? ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200))) : 0;
    if (g_stop_signal != 0) break;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && left > 0) {
      if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
      pollfd q{fd, POLLIN, 0};
      if (exited && ::poll(&q, 1, 0) <= 0) break;  // nothing more to read
      continue;
    }
    if (r == 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      if (reports.current())
        reports.rows[*reports.current()] = {
            "FAIL", fmt::format("did not finish within {} s; the checks were killed (a call into "
                                "the plugin never returned?)",
                                reports.current_deadline_s())};
      break;
    }
    char chunk[4096];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    if (buf.size() > (std::size_t{1} << 20) && buf.find('\n') == std::string::npos) {
      buf.clear();
      reports.overlong();
    }
    for (std::size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1))
      reports.line(std::string_view(buf).substr(0, nl));
  }
  // Anything the checks started and left behind goes, before the leader is reaped (its process
  // group must still exist), and then whatever left the group (setsid) and was orphaned to us.
  // The leader itself too: a plugin can move it into another process group.
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  if (!exited) ::waitpid(pid, &status, 0);
  g_checks_group = 0;
  conformance::kill_descendants(::getpid());
  if (reports.current() && g_stop_signal == 0 && reports.rows[*reports.current()].result != "FAIL")
    reports.rows[*reports.current()] = {
        "FAIL", fmt::format("the checks process {} during this check", signal_text(status))};
  return status;
}

// The table, the summary line and, for a failed run, the checks' last log lines. Returns the
// exit status: 0 when every check passed or does not apply.
int print_report(const conformance::Options& opts, const Reports& reports,
                 std::map<std::string, Row> rows, const std::string& log) {
  fmt::print("wt conformance: {}\n", opts.path);
  const nlohmann::json& plugin = reports.plugin;
  if (plugin.is_object()) {
    std::vector<std::string> caps = plugin.value("capabilities", std::vector<std::string>{});
    fmt::print("plugin: backend {}, version {}, ABI {}, capabilities {}\n",
               plugin.value("backend", "?"), plugin.value("plugin_version", "?"),
               plugin.value("abi_version", 0), fmt::join(caps, ", "));
  }
  const auto& defs = conformance::checks();
  fmt::print("\n  {:<16} {:<4} {:<6} {}\n", "check", "ABI", "result", "detail");
  if (reports.any_forged && reports.forged_in.count("file") != 0 && rows["file"].result == "pass")
    rows["file"] = {"FAIL", "something other than the checks wrote into the report channel"};
  int passed = 0, failed = 0, skipped = 0, not_applicable = 0, not_run = 0;
  for (const auto& d : defs) {
    const Row& row = rows[d.name];
    const std::string abis = d.min_abi == d.max_abi ? std::to_string(d.min_abi)
                                                    : fmt::format("{}-{}", d.min_abi, d.max_abi);
    fmt::print("  {:<16} {:<4} {:<6} {}\n", d.name, abis, row.result, row.detail);
    if (row.result == "pass")
      ++passed;
    else if (row.result == "FAIL")
      ++failed;
    else if (row.result == "skip")
      ++skipped;
    else if (row.result == "n/a")
      ++not_applicable;
    else
      ++not_run;
  }
  fmt::print("\n{} checks: {} passed, {} failed, {} skipped{}{}\n", defs.size(), passed, failed,
             skipped,
             not_applicable ? fmt::format(", {} not applicable to its ABI", not_applicable) : "",
             not_run ? fmt::format(", {} not run", not_run) : "");
  if (failed + not_run > 0) {
    std::string tail = log_tail(log, 20);
    if (!tail.empty()) fmt::print("\nlast lines the checks logged:\n{}", tail);
  }
  return failed + not_run > 0 ? 1 : 0;
}

int run_conformance(conformance::Options opts) {
  opts.wt_program = self_program();
  std::string tmpl = (fs::temp_directory_path() / "wt-conformance-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw Error(WT_ERR_SYSTEM, fmt::format("cannot make a work directory: {}", strerror(errno)));
  opts.work_dir = tmpl;
  // However this ends (an exception included): what the checks or the witness started goes, and
  // the work directory (made by mkdtemp above: everything in it is ours).
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      conformance::kill_descendants(::getpid());
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{opts.work_dir};
  opts.nonce = shm::random_hex(16);  // 128 bits (conformance::Options::nonce)
  const std::string log = opts.work_dir + "/checks.log";
  // The checks' own temp and working directories (the `leftovers` check reads them).
  for (const char* d : {"/tmp", "/cwd"})
    if (::mkdir((opts.work_dir + d).c_str(), 0700) != 0)
      throw Error(WT_ERR_SYSTEM,
                  fmt::format("cannot make {}{}: {}", opts.work_dir, d, strerror(errno)));
  // Whatever the checks start and orphan (a daemon that called setsid, a double fork) becomes
  // our child instead of init's, so it is found and ended below.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // No process of the same user reads this one's memory (the nonce, the witness's seed) through
  // /proc/PID/mem or ptrace: a plugin's process may try.
  ::prctl(PR_SET_DUMPABLE, 0);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(WT_ERR_SYSTEM, "pipe failed");
  const pid_t pid = start_checks_process(opts, fds, log);
  ::setpgid(pid, pid);
  ::close(fds[1]);
  // Ctrl-C or a SIGTERM kills the checks' process group at once; the loop below then cleans up.
  g_checks_group = pid;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll returns EINTR
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  Reports reports(opts);
  read_reports(fds[0], pid, reports);
  ::close(fds[0]);
  std::map<std::string, Row> rows = reports.rows;
  // The witness, judged here whatever the checks process reported (a claim of "skip" or of a
  // failed load must not spare a plugin the one check it cannot write itself).
  for (const auto& d : conformance::checks()) {
    if (!d.judged_outside || g_stop_signal != 0) continue;
    auto w = conformance::run_witness(opts, d.deadline_s);
    rows[d.name] = {w.outcome == Outcome::pass   ? "pass"
                    : w.outcome == Outcome::fail ? "FAIL"
                    : w.outcome == Outcome::skip ? "skip"
                                                 : "n/a",
                    w.detail};
    conformance::kill_descendants(::getpid());
  }
  if (g_stop_signal != 0) {
    fmt::print(stderr, "wt conformance: stopped by {}\n",
               g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    return 128 + g_stop_signal;
  }
  return print_report(opts, reports, std::move(rows), log);
}

}  // namespace

Run add_conformance_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "conformance",
      "Check a plugin file against the wt plugin ABI: loading, negotiation, tables, parsers, and "
      "a verified loopback sync between its own trainer and worker in two processes");
  struct Opts {
    std::string path, init_info, worker_options;
    int rounds = 3;
    conformance::TrainerProcess trainer;  // peer-killed and broken-mid-tensor's trainer process
    conformance::WitnessTrainer witness;  // the witness's processes
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("plugin", o->path, "The plugin file, libwt_<backend>.so")->required();
  cmd->add_option("--init-info", o->init_info,
                  "JSON object: the backend's own init-info fields the loopback needs (e.g. a "
                  "directory); master_address, master_port, world_size and rank are filled in "
                  "when the plugin asks for them");
  cmd->add_option("--worker-options", o->worker_options,
                  "JSON object: receiver-side backend options for the worker (as wt serve "
                  "--weight-transfer-config takes them)");
  cmd->add_option("--rounds", o->rounds, "Verified rounds in the loopback check")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  // peer-killed and broken-mid-tensor run their trainer as `wt conformance PLUGIN --trainer-for
  // URL ...`.
  auto* trainer_for = cmd->add_option("--trainer-for", o->trainer.url)->group("");
  cmd->add_option("--trainer-fields", o->trainer.fields)->group("");
  cmd->add_option("--checkpoint", o->trainer.checkpoint)->group("");
  cmd->add_option("--stop-worker", o->trainer.stop_worker)->group("");
  // The witness's processes (conformance/witness.hpp), started by `wt conformance` itself.
  auto* witness_for = cmd->add_option("--witness-for", o->witness.url)->group("");
  cmd->add_flag("--witness-probe", o->witness.probe)->group("");
  cmd->add_option("--witness-world-size", o->witness.worker_world_size)->group("");
  cmd->add_option("--witness-seed", o->witness.seed)->group("");
  return [o, trainer_for, witness_for]() {
    if (*trainer_for) {
      o->trainer.plugin = o->path;
      return conformance::run_trainer_process(o->trainer);
    }
    if (*witness_for || o->witness.probe) {
      o->witness.plugin = o->path;
      o->witness.checkpoint = o->trainer.checkpoint;
      o->witness.init_info = json_option(o->init_info, "--init-info");
      return conformance::run_witness_trainer(o->witness);
    }
    conformance::Options opts;
    std::error_code ec;
    opts.path = fs::absolute(o->path, ec).lexically_normal().string();
    if (ec) opts.path = o->path;
    opts.init_info = json_option(o->init_info, "--init-info");
    opts.worker_options = json_option(o->worker_options, "--worker-options");
    opts.rounds = o->rounds;
    return run_conformance(std::move(opts));
  };
}

}  // namespace wt::cli
