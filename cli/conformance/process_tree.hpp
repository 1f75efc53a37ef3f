// What a plugin leaves behind, read from /proc: the processes below a process (whatever they did:
// setsid or a double fork only re-parents them to the nearest subreaper, which `wt conformance`
// makes itself), their open descriptors and threads, and files in a directory that appeared and
// that no process holds open or mapped.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace wt::cli::conformance {

struct ProcessInfo {
  pid_t pid;
  std::string command;  // /proc/<pid>/comm
};

// Every process below `root` (children, theirs, ...), parents before children.
std::vector<ProcessInfo> descendants(pid_t root);
// Kills (SIGKILL) every process below `root` except the subtrees rooted at `keep`, reaps those
// that are this process's children, and returns what it killed.
std::vector<ProcessInfo> kill_descendants(pid_t root, const std::set<pid_t>& keep = {});
// Open descriptors and threads of a process (-1 when it cannot be read).
int open_fds(pid_t pid);
int threads(pid_t pid);
// The names in a directory (not recursive; empty when it cannot be read).
std::set<std::string> list_dir(const std::string& dir);
// Whether any process has `path` open or mapped.
bool in_use(const std::string& path);

}  // namespace wt::cli::conformance
