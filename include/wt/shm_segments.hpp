// wt's POSIX shared-memory segments: naming, creation and the sweep of dead creators' segments.
// Names are /wt-<pid>-<process start time>-<128 random bits>: unguessable, and they identify the
// creating process, so a segment whose creator died (SIGKILL) can be recognised and removed by any
// later wt process on the host. Header-only: the ipc plugin's segments and libwt's shared-memory
// weights (SafetensorsSource) are created, named and swept alike.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace wt::shm {

inline constexpr const char* kPrefix = "wt-";

// Field 22 of /proc/<pid>/stat: the process start time, which tells a reused pid apart. Empty
// when the process does not exist.
inline std::string process_start_time(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return "";
  auto close = line.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos || close + 2 > line.size()) return "";
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i)
    if (i == 22) return field;
  return "";
}

// A fresh segment name for this process ("/wt-...", ready for shm_open).
inline std::string new_segment_name() {
  unsigned char raw[16];
  std::size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  static const std::string self_start = process_start_time(getpid());
  static const char* hex = "0123456789abcdef";
  std::string name = "/" + std::string(kPrefix) + std::to_string(getpid()) + "-" + self_start + "-";
  for (unsigned char c : raw) {
    name += hex[c >> 4];
    name += hex[c & 15];
  }
  return name;
}

// A new segment (O_CREAT | O_EXCL, mode 0600) of `size` bytes, mapped read-write and shared. On
// failure nothing is left behind: `addr` is null, `step` says what failed and `error` is errno.
struct Created {
  std::string name;
  void* addr = nullptr;
  const char* step = nullptr;  // "create" | "size" | "map"
  int error = 0;
};
inline Created create_segment(std::size_t size) {
  Created c{new_segment_name()};
  int fd = shm_open(c.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return {c.name, nullptr, "create", errno};
  void* addr = MAP_FAILED;
  const char* step = "size";
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    step = "map";
    addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    shm_unlink(c.name.c_str());
    return {c.name, nullptr, step, err};
  }
  c.addr = addr;
  return c;
}

// True when `name` ("[/]wt-<pid>-<start>-<hex>") is a wt segment whose creating process no longer
// exists (no such pid, or the pid now belongs to a process started at another time).
inline bool segment_creator_dead(const std::string& name) {
  std::string n = !name.empty() && name[0] == '/' ? name.substr(1) : name;
  if (n.compare(0, std::strlen(kPrefix), kPrefix) != 0) return false;
  std::istringstream parts(n.substr(std::strlen(kPrefix)));
  std::string pid_text, start;
  if (!std::getline(parts, pid_text, '-') || !std::getline(parts, start, '-')) return false;
  long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  if (pid <= 0) return false;
  std::string now = process_start_time(pid);
  return now.empty() || now != start;
}

// The wt segments currently in /dev/shm (names without the leading '/').
inline std::vector<std::string> list_wt_segments() {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) == 0) out.emplace_back(e->d_name);
    closedir(d);
  }
  return out;
}

// Unlinks every wt segment in /dev/shm whose creator is dead. Returns how many were removed.
inline int sweep_orphaned_segments() {
  int removed = 0;
  for (const auto& n : list_wt_segments())
    if (segment_creator_dead(n) && shm_unlink(("/" + n).c_str()) == 0) ++removed;
  return removed;
}

}  // namespace wt::shm
