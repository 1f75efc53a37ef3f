// Looking at /dev/shm from tests: the wt segments and liveness files of given processes.
#pragma once

#include <wt/sdk/shm_segments.hpp>

#include <dirent.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace wt::test {

namespace detail {
inline std::vector<std::string> wt_names_of(long pid, bool segments) {
  std::vector<std::string> out;
  const std::string self = std::to_string(pid);
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      auto p = shm::parse_name(e->d_name);
      bool want = segments
                      ? p.kind == shm::NameKind::segment
                      : (p.kind == shm::NameKind::liveness || p.kind == shm::NameKind::pending);
      if (want && p.pid == self) out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}
}  // namespace detail

// wt segment names in /dev/shm created by process `pid` (default: this one), as its pid field
// says. Liveness files are not segments.
inline std::vector<std::string> wt_segments_of(long pid = ::getpid()) {
  return detail::wt_names_of(pid, true);
}

// The liveness files (and pending ones) in /dev/shm of process `pid`.
inline std::vector<std::string> liveness_files_of(long pid = ::getpid()) {
  return detail::wt_names_of(pid, false);
}

}  // namespace wt::test
