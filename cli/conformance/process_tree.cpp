#include "process_tree.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace fs = std::filesystem;

namespace wt::cli::conformance {
namespace {

std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long v = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
  }
  ::closedir(d);
  return out;
}

// The parent pid from /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold spaces).
pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(in, s);
  auto close = s.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(s.substr(close + 1));
  char state = 0;
  pid_t ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

std::string command_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

int count_entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

}  // namespace

std::vector<ProcessInfo> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (pid_t p : all_pids()) children.emplace(parent_of(p), p);
  std::vector<ProcessInfo> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [b, e] = children.equal_range(p);
    for (auto it = b; it != e; ++it) {
      out.push_back({it->second, command_of(it->second)});
      todo.push_back(it->second);
    }
  }
  return out;
}

std::vector<ProcessInfo> kill_descendants(pid_t root, const std::set<pid_t>& keep) {
  std::vector<ProcessInfo> killed;
  // A process may fork while we look: a few passes, until a pass finds nothing new.
  for (int pass = 0; pass < 5; ++pass) {
    std::set<pid_t> spared;
    for (pid_t k : keep) {
      spared.insert(k);
      for (const auto& d : descendants(k)) spared.insert(d.pid);
    }
    bool any = false;
    for (const auto& d : descendants(root)) {
      if (spared.count(d.pid) != 0) continue;
      if (::kill(d.pid, SIGKILL) == 0) {
        any = true;
        bool seen = false;
        for (const auto& k : killed) seen |= k.pid == d.pid;
        if (!seen) killed.push_back(d);
      }
    }
    // Our own children are reaped here (orphans re-parent to us, the subreaper); the others are
    // reaped by their parents, or re-parented to us when those die, and reaped next pass.
    for (const auto& k : killed)
      if (parent_of(k.pid) == ::getpid()) ::waitpid(k.pid, nullptr, 0);
    if (!any) break;
    ::usleep(20000);
  }
  return killed;
}

int open_fds(pid_t pid) {
  return count_entries("/proc/" + std::to_string(pid) + "/fd");
}

int threads(pid_t pid) {
  return count_entries("/proc/" + std::to_string(pid) + "/task");
}

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    out.insert(it->path().filename().string());
  return out;
}

bool in_use(const std::string& path) {
  for (pid_t p : all_pids()) {
    const std::string base = "/proc/" + std::to_string(p);
    std::error_code ec;
    for (auto it = fs::directory_iterator(base + "/fd", ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      std::error_code rl;
      auto target = fs::read_symlink(it->path(), rl);
      // A file opened under another name and then linked to this one (wt's liveness files are
      // made as <name>.new) shows the name it was opened under.
      if (!rl && (target == path || target.string() == path + " (deleted)" ||
                  target.string() == path + ".new (deleted)"))
        return true;
    }
    std::ifstream maps(base + "/maps");
    for (std::string line; std::getline(maps, line);)
      if (line.size() >= path.size() &&
          line.compare(line.size() - path.size(), path.size(), path) == 0)
        return true;
  }
  return false;
}

}  // namespace wt::cli::conformance
