// A child process with its stdout+stderr on a pipe: wt launch runs its receiver and trainer ranks
// this way, and cross-process tests their servers and trainers. The caller can wait for a line
// (e.g. "listening on http://127.0.0.1:PORT"), read lines as they come, signal it and reap it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <memory>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace wt::cli {

// The child dies with the thread that started it (PR_SET_PDEATHSIG, SIGTERM so a `wt serve`
// still stops cleanly): a coordinator killed with SIGKILL leaves no orphan behind. Start children
// from a thread that lives as long as they should.
class Child {
 public:
  // `env` entries ("NAME=value") are added to the child's environment: the way to hand it a
  // secret, since argv is visible to every user of the host.
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    // Everything the child needs is built before fork: after it, only async-signal-safe calls
    // (the coordinator has threads, and one may hold the allocator's lock).
    std::vector<char*> args, envp;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> names;
    for (const auto& e : env) names.push_back(e.substr(0, e.find('=') + 1));
    for (char** v = environ; *v != nullptr; ++v) {
      bool replaced = false;
      for (const auto& n : names) replaced |= std::strncmp(*v, n.c_str(), n.size()) == 0;
      if (!replaced) envp.push_back(*v);
    }
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output() const { return out_; }

  // Reads output until it contains `text` (returns the output) or the deadline passes.
  std::optional<std::string> wait_for(const std::string& text, std::chrono::milliseconds deadline) {
    auto end = std::chrono::steady_clock::now() + deadline;
    while (out_.find(text) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) return std::nullopt;
    }
    return out_;
  }
  // The next complete output line (without the newline), or nullopt at end of output / deadline.
  std::optional<std::string> next_line(std::chrono::milliseconds deadline) {
    auto end = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      auto nl = out_.find('\n', consumed_);
      if (nl != std::string::npos) {
        std::string line = out_.substr(consumed_, nl - consumed_);
        consumed_ = nl + 1;
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) return std::nullopt;
    }
  }
  // Reads whatever output is ready, without waiting, so the child never blocks on a full pipe.
  // Bounded: a child that never stops writing does not keep the caller here.
  void drain() {
    for (int i = 0; i < 256 && read_some(0); ++i) {
    }
  }
  // True once the child closed its output (it exited, or closed stdout and stderr).
  bool at_eof() const { return eof_; }
  int fd() const { return fd_; }
  void kill(int sig) { ::kill(pid_, sig); }
  // Waits for exit (collecting the rest of the output); returns the exit code, or 128+signal.
  int wait() {
    while (read_some(60000)) {
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Waits up to `deadline` for it to exit, reading its output meanwhile but not waiting for that
  // to end (a process it started may hold the pipe open). Returns as wait() does, or nullopt.
  std::optional<int> wait_exit(std::chrono::milliseconds deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        drain();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      if (!read_some(20)) ::usleep(20000);
    }
  }
  // Kills it and reaps it without waiting for its output to end: a process it started may hold
  // its pipe open. Returns as wait() does.
  int kill_and_reap(int sig) {
    ::kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    out_.append(buf, static_cast<std::size_t>(n));
    // What is kept is bounded too: the last 4 MiB (what callers look for is recent output).
    constexpr std::size_t kKeep = std::size_t{4} << 20;
    if (out_.size() > 2 * kKeep) {
      const std::size_t drop = out_.size() - kKeep;
      out_.erase(0, drop);
      consumed_ = consumed_ > drop ? consumed_ - drop : 0;
    }
    return true;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  bool eof_ = false;
  std::string out_;
  std::size_t consumed_ = 0;
};

// Starts `wt serve --port 0 ARGS...` and returns it with its URL. `startup`: how long it may take
// to listen (more when it faults in a large model's staging memory first).
inline std::pair<std::unique_ptr<Child>, std::string> start_server(
    const std::string& wt, std::vector<std::string> args, const std::vector<std::string>& env = {},
    std::chrono::milliseconds startup = std::chrono::seconds(20)) {
  std::vector<std::string> argv{wt, "serve", "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = std::make_unique<Child>(argv, env);
  // The banner "... listening on http://HOST:PORT (...)"; log lines may come before it.
  const auto end = std::chrono::steady_clock::now() + startup;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    auto line = left.count() > 0 ? c->next_line(left) : std::nullopt;
    if (!line)
      throw std::runtime_error(
          c->at_eof() ? "wt serve ended before it listened: " + c->output()
                      : "wt serve did not listen within " +
                            std::to_string(
                                std::chrono::duration_cast<std::chrono::seconds>(startup).count()) +
                            " s: " + c->output());
    auto pos = line->find("listening on http://");
    if (pos == std::string::npos) continue;
    pos += 13;  // "listening on "
    auto stop = line->find(' ', pos);
    return {std::move(c), line->substr(pos, stop == std::string::npos ? stop : stop - pos)};
  }
}

}  // namespace wt::cli
