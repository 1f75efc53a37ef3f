// Looking at /dev/shm from tests: the wt segments created by given processes.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace wt::test {

// wt segment names in /dev/shm created by process `pid` (default: this one).
inline std::vector<std::string> wt_segments_of(long pid = ::getpid()) {
  std::vector<std::string> out;
  std::string prefix = "wt-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.emplace_back(e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace wt::test
