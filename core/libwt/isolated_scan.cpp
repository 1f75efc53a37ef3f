// Registry::scan_isolated(): every plugin file on the search path is loaded and checked in a
// forked child process (Probe, drain, reap, verdict), so that a plugin whose wt_plugin_get or
// static constructor crashes, hangs or exits takes only its probe with it. Kept apart from
// registry.cpp: this is the only code of libwt that forks, waits and kills.
#include <wt/registry.hpp>

#include "load_checks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace wt {
namespace {

using detail::Candidate;

// ---- Probing files in child processes (scan_isolated) -----------------------------------------

std::string signal_text(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGABRT:
      return "SIGABRT";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGSYS:
      return "SIGSYS";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return fmt::format("signal {}", sig);
  }
}

std::string seconds_text(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

// The child: check one file, write one JSON line into fd, and leave without running any exit
// handler (the plugin's static destructors included).
[[noreturn]] void probe_child(int fd, const Candidate& c) {
  ::setpgid(0, 0);  // its own group, so a plugin's own children die with it
  struct rlimit no_core {};
  ::setrlimit(RLIMIT_CORE, &no_core);    // a crashing plugin leaves no core file
  ::dup2(STDERR_FILENO, STDOUT_FILENO);  // a plugin's chatter must not reach the lister's stdout
  // A crash must end the probe by its signal, so the lister can name it: no handler inherited from
  // the lister (a sanitizer's, say) may turn it into an ordinary exit.
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, SIG_DFL);
  std::string line;
  try {
    PluginInfo i = probe_plugin_file(c.path, c.backend);
    line = nlohmann::json{{"usable", i.usable},
                          {"problem", i.problem},
                          {"plugin_version", i.plugin_version},
                          {"abi_version", i.abi_version},
                          {"capabilities", i.capabilities}}
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (...) {
    line = R"({"usable":false,"problem":"the probe failed inside wt"})";
  }
  line += '\n';
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::_exit(0);
}

struct Probe {
  std::size_t index = 0;
  pid_t pid = -1;
  int fd = -1;
  std::chrono::steady_clock::time_point started;
  std::string answer;
  bool eof = false;
  bool reaped = false;
  bool status_known = true;
  bool timed_out = false;
  int status = 0;
};

// Reads what the child has written so far; notes EOF.
void drain(Probe& p) {
  char buf[4096];
  while (!p.eof) {
    ssize_t n = ::read(p.fd, buf, sizeof buf);
    if (n > 0) {
      if (p.answer.size() < (1u << 20)) p.answer.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      p.eof = true;
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) p.eof = true;
      return;
    }
  }
}

void reap(Probe& p, bool block) {
  while (!p.reaped) {
    pid_t r = ::waitpid(p.pid, &p.status, block ? 0 : WNOHANG);
    if (r == p.pid) {
      p.reaped = true;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0) {  // ECHILD: someone else reaped it (SIGCHLD ignored)
      p.reaped = true;
      p.status_known = false;
    } else {
      return;  // still running
    }
  }
}

PluginInfo verdict(const Probe& p, const Candidate& c, std::chrono::milliseconds deadline) {
  PluginInfo info;
  info.backend = c.backend;
  info.path = c.path;
  info.shadowed = c.shadowed;
  if (!p.answer.empty() && p.answer.back() == '\n') {
    try {
      auto j = nlohmann::json::parse(p.answer);
      info.usable = j.at("usable").get<bool>();
      info.problem = j.at("problem").get<std::string>();
      info.plugin_version = j.at("plugin_version").get<std::string>();
      info.abi_version = j.at("abi_version").get<uint32_t>();
      info.capabilities = j.at("capabilities").get<uint64_t>();
      if (!info.usable && info.problem.empty())
        info.problem = fmt::format("plugin {} is unusable (no reason given)", c.path);
      return info;
    } catch (const std::exception&) {
      info.usable = false;
      info.plugin_version.clear();
      info.abi_version = 0;
      info.capabilities = 0;
      info.problem = fmt::format(
          "plugin {} is unusable: its probe process gave an answer wt "
          "cannot read (did the plugin write to file descriptors it does "
          "not own?)",
          c.path);
      return info;
    }
  }
  if (p.timed_out)
    info.problem = fmt::format(
        "plugin {} did not answer within {} while loading (its "
        "wt_plugin_get or a static constructor never returned); the probe "
        "was killed",
        c.path, seconds_text(deadline));
  else if (p.status_known && WIFSIGNALED(p.status))
    info.problem = fmt::format("plugin {} crashed with {} while loading", c.path,
                               signal_text(WTERMSIG(p.status)));
  else if (p.status_known && WIFEXITED(p.status))
    info.problem = fmt::format(
        "plugin {} ended the process (exit status {}) while loading, "
        "before it could be checked",
        c.path, WEXITSTATUS(p.status));
  else
    info.problem = fmt::format(
        "plugin {} ended the probe process while loading, before it "
        "could be checked",
        c.path);
  return info;
}

std::vector<PluginInfo> probe_isolated(const std::vector<Candidate>& cands,
                                       std::chrono::milliseconds deadline) {
  using Clock = std::chrono::steady_clock;
  constexpr std::size_t kParallel = 16;
  std::vector<PluginInfo> out(cands.size());
  std::vector<Probe> running;
  std::size_t next = 0;

  auto failed = [&](std::size_t i, const char* what) {
    PluginInfo& info = out[i];
    info.backend = cands[i].backend;
    info.path = cands[i].path;
    info.shadowed = cands[i].shadowed;
    info.problem = fmt::format("plugin {} could not be checked: {} failed: {}", cands[i].path, what,
                               std::strerror(errno));
  };
  auto start = [&](std::size_t i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return failed(i, "pipe");
    std::fflush(nullptr);  // nothing buffered may be written twice
    pid_t pid = ::fork();
    if (pid < 0) {
      failed(i, "fork");
      ::close(fds[0]);
      ::close(fds[1]);
      return;
    }
    if (pid == 0) {
      ::close(fds[0]);
      probe_child(fds[1], cands[i]);
    }
    ::close(fds[1]);
    ::setpgid(pid, pid);  // also in the child: whichever runs first
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    Probe p;
    p.index = i;
    p.pid = pid;
    p.fd = fds[0];
    p.started = Clock::now();
    running.push_back(std::move(p));
  };
  auto kill_group = [](const Probe& p) {
    ::kill(-p.pid, SIGKILL);
    if (!p.reaped) ::kill(p.pid, SIGKILL);
  };

  while (next < cands.size() || !running.empty()) {
    while (next < cands.size() && running.size() < kParallel) start(next++);
    if (running.empty()) continue;

    // Wait for an answer, an exit or the nearest deadline, checking exits every 20 ms.
    auto now = Clock::now();
    auto wait = std::chrono::milliseconds(20);
    std::vector<pollfd> fds;
    for (auto& p : running) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::max(Clock::duration::zero(), p.started + deadline - now)));
      if (!p.eof) fds.push_back({p.fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));

    for (auto it = running.begin(); it != running.end();) {
      Probe& p = *it;
      drain(p);
      reap(p, false);
      bool done = false;
      if (p.reaped) {
        drain(p);                   // everything the child wrote is in the pipe by now
        if (!p.eof) kill_group(p);  // a descendant still holds the pipe open
        done = true;
      } else if (Clock::now() - p.started >= deadline) {
        kill_group(p);
        reap(p, true);
        drain(p);
        p.timed_out = true;
        done = true;
      }
      if (!done) {
        ++it;
        continue;
      }
      out[p.index] = verdict(p, cands[p.index], deadline);
      ::close(p.fd);
      it = running.erase(it);
    }
  }
  return out;
}

}  // namespace

std::vector<PluginInfo> Registry::scan_isolated(std::chrono::milliseconds deadline) {
  return probe_isolated(detail::candidates(search_path()), deadline);
}

}  // namespace wt
