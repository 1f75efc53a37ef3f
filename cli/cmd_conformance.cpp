// `wt conformance PATH`: runs the conformance checks on one plugin file and prints a table. The
// checks run in a child process (its own process group, with the `wt serve` it starts), reporting
// one JSON line per event through a pipe; a check that crashes or outlives its deadline fails, by
// name, and the child is killed with everything it started.
#include "commands.hpp"
#include "conformance/conformance.hpp"
#include "conformance/process_tree.hpp"

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
  if (g_checks_group > 0) ::kill(-g_checks_group, SIGKILL);
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

int run_conformance(conformance::Options opts) {
  opts.wt_program = self_program();
  std::string tmpl = (fs::temp_directory_path() / "wt-conformance-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw Error(WT_ERR_SYSTEM, fmt::format("cannot make a work directory: {}", strerror(errno)));
  opts.work_dir = tmpl;
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

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(WT_ERR_SYSTEM, "pipe failed");
  std::fflush(stdout);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(WT_ERR_SYSTEM, "fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    // Dies with `wt conformance` (however it ends), taking what it started with it: its `wt serve`
    // dies with it in turn (Child's PR_SET_PDEATHSIG).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::close(fds[0]);
    int lf = ::open(log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (lf >= 0) ::dup2(lf, 1), ::dup2(lf, 2);
    // The plugin's processes and the worker's `wt serve` inherit these, not the verdict pipe
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

  const auto& defs = conformance::checks();
  std::map<std::string, Row> rows;
  std::map<std::string, int> deadline_s;
  for (const auto& d : defs) deadline_s[d.name] = d.deadline_s;
  deadline_s["loopback"] += 20 * opts.rounds;  // every round is a full sync
  nlohmann::json plugin;
  std::optional<std::string> current;
  bool forged = false;
  std::set<std::string> forged_in;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string buf;
  bool eof = false, killed = false, exited = false;
  int status = 0;
  while (!eof) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fds[0], POLLIN, 0};
    // Woken at least every 200 ms to see whether the checks process ended: a process the
    // plugin forked may hold the pipe open after it.
    int r = left > 0 ? ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200))) : 0;
    if (g_stop_signal != 0) break;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && left > 0) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        pollfd q{fds[0], POLLIN, 0};
        if (::poll(&q, 1, 0) <= 0) break;  // nothing more to read
      }
      continue;
    }
    if (r == 0) {
      ::kill(-pid, SIGKILL);
      killed = true;
      if (current)
        rows[*current] = {"FAIL", fmt::format("did not finish within {} s; the checks were killed "
                                              "(a call into the plugin never returned?)",
                                              deadline_s[*current])};
      break;
    }
    char chunk[4096];
    ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof = true;
      break;
    }
    buf.append(chunk, static_cast<std::size_t>(n));
    // The channel is read as hostile: a line is parsed depth-bounded, and text that never ends a
    // line is not kept past 1 MiB (the checks' own lines are far shorter).
    if (buf.size() > (std::size_t{1} << 20) && buf.find('\n') == std::string::npos) {
      buf.clear();
      forged = true;
      if (current) forged_in.insert(*current);
    }
    for (std::size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1)) {
      nlohmann::json j;
      try {
        j = parse_json(std::string_view(buf).substr(0, nl));
      } catch (const JsonError&) {
        j = nullptr;
      }
      if (!j.is_object() || !j.contains("nonce") || !j["nonce"].is_string() ||
          j["nonce"].get<std::string>() != opts.nonce) {
        // Not the checks' own line: something wrote into a descriptor it does not own.
        forged = true;
        if (current) forged_in.insert(*current);
        continue;
      }
      if (j.contains("plugin")) plugin = j["plugin"];
      if (j.contains("begin")) {
        current = j["begin"].get<std::string>();
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s[*current]);
      }
      if (j.contains("end")) {
        const std::string name = j["end"].get<std::string>();
        rows[name] = {j.value("result", "?"), j.value("detail", "")};
        if (forged_in.count(name) != 0)
          rows[name] = {"FAIL",
                        "something other than the checks wrote into the verdict channel during "
                        "this check (a line without this run's nonce): the plugin writes into "
                        "descriptors it does not own"};
        current.reset();
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      }
    }
  }
  ::close(fds[0]);
  // Anything the checks started and left behind goes, before the leader is reaped (its process
  // group must still exist), and then whatever left the group (setsid) and was orphaned to us.
  ::kill(-pid, SIGKILL);
  if (!exited) ::waitpid(pid, &status, 0);
  conformance::kill_descendants(::getpid());
  if (g_stop_signal != 0) {
    std::error_code ec;
    fs::remove_all(opts.work_dir, ec);
    fmt::print(stderr, "wt conformance: stopped by {}\n",
               g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    return 128 + g_stop_signal;
  }
  if (current && !killed)
    rows[*current] = {"FAIL",
                      fmt::format("the checks process {} during this check", signal_text(status))};

  fmt::print("wt conformance: {}\n", opts.path);
  if (!plugin.is_null()) {
    std::vector<std::string> caps = plugin.value("capabilities", std::vector<std::string>{});
    fmt::print("plugin: backend {}, version {}, ABI {}, capabilities {}\n",
               plugin.value("backend", "?"), plugin.value("plugin_version", "?"),
               plugin.value("abi_version", 0), fmt::join(caps, ", "));
  }
  fmt::print("\n  {:<16} {:<4} {:<6} {}\n", "check", "ABI", "result", "detail");
  if (forged && forged_in.empty())
    rows["file"] = {"FAIL", "something other than the checks wrote into the verdict channel"};
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
  std::error_code ec;
  fs::remove_all(opts.work_dir, ec);  // made by mkdtemp above: everything in it is ours
  return failed + not_run > 0 ? 1 : 0;
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
    conformance::TrainerProcess trainer;  // the peer-killed check's trainer process
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
  // The peer-killed check runs its trainer as `wt conformance PLUGIN --trainer-for URL ...`.
  auto* trainer_for = cmd->add_option("--trainer-for", o->trainer.url)->group("");
  cmd->add_option("--trainer-fields", o->trainer.fields)->group("");
  cmd->add_option("--checkpoint", o->trainer.checkpoint)->group("");
  return [o, trainer_for]() {
    if (*trainer_for) {
      o->trainer.plugin = o->path;
      return conformance::run_trainer_process(o->trainer);
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
