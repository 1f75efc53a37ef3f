#include "shm_segment.hpp"

#include <wt/sdk/errors.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

namespace wt::ipc {
namespace {

constexpr const char* kPrefix = "wt-";

// Field 22 of /proc/<pid>/stat: the process start time, which tells a reused pid apart.
std::string process_start_time(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return "";
  auto close = line.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return "";
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
    if (i == 22) return field;
  }
  return "";
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      sdk::fail(WT_ERR_SYSTEM, "getrandom failed: {}", std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

ShmSegment ShmSegment::create(std::size_t size) {
  if (size == 0) size = 1;
  static const std::string self_start = process_start_time(getpid());
  ShmSegment s;
  s.name_ = "/" + std::string(kPrefix) + std::to_string(getpid()) + "-" + self_start + "-" +
            random_hex(16);
  int fd = shm_open(s.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) sdk::fail(WT_ERR_SYSTEM, "shm_open({}) failed: {}", s.name_, errno_text());
  s.owner_ = true;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    std::string why = errno_text();
    close(fd);
    shm_unlink(s.name_.c_str());
    sdk::fail(WT_ERR_SYSTEM, "cannot size shared-memory segment {} to {} bytes: {}", s.name_, size,
              why);
  }
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (addr == MAP_FAILED) {
    std::string why = errno_text();
    shm_unlink(s.name_.c_str());
    sdk::fail(WT_ERR_SYSTEM, "cannot map shared-memory segment {} ({} bytes): {}", s.name_, size,
              why);
  }
  s.addr_ = addr;
  s.size_ = size;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, std::size_t expected_size) {
  // wt's own segments, or a file in /dev/shm a trainer's tensors already live in.
  if (name.size() < 2 || name.size() > NAME_MAX || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || name == "/." || name == "/..")
    sdk::fail(WT_ERR_INVALID_ARGUMENT, "'{}' is not a shared-memory segment name", name);
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    if (errno == ENOENT)
      sdk::fail(WT_ERR_NOT_FOUND,
                "shared-memory segment {} does not exist: its trainer unlinked it (segments are "
                "removed once every worker of a round has mapped them) or died",
                name);
    sdk::fail(WT_ERR_SYSTEM, "cannot open shared-memory segment {}: {}", name, errno_text());
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string why = errno_text();
    close(fd);
    sdk::fail(WT_ERR_SYSTEM, "cannot stat shared-memory segment {}: {}", name, why);
  }
  if (static_cast<std::size_t>(st.st_size) < expected_size) {
    close(fd);
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory segment {} holds {} bytes, but the handle says {}", name,
              static_cast<std::size_t>(st.st_size), expected_size);
  }
  std::size_t size = expected_size == 0 ? 1 : expected_size;
  void* addr = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (addr == MAP_FAILED)
    sdk::fail(WT_ERR_SYSTEM, "cannot map shared-memory segment {}: {}", name, errno_text());
  ShmSegment s;
  s.name_ = name;
  s.addr_ = addr;
  s.size_ = size;
  s.inode_ = st.st_ino;
  return s;
}

bool ShmSegment::is_current() const {
  int fd = shm_open(name_.c_str(), O_RDONLY, 0);
  if (fd < 0) return true;
  struct stat st {};
  // A file shrunk under the mapping would fault (SIGBUS) on the bytes past its end.
  bool same =
      fstat(fd, &st) != 0 || (st.st_ino == inode_ && static_cast<std::size_t>(st.st_size) >= size_);
  close(fd);
  return same;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept {
  *this = std::move(o);
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    addr_ = o.addr_;
    size_ = o.size_;
    owner_ = o.owner_;
    unlinked_ = o.unlinked_;
    inode_ = o.inode_;
    o.addr_ = nullptr;
    o.size_ = 0;
    o.owner_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  release();
}

void ShmSegment::release() {
  if (addr_ != nullptr) munmap(addr_, size_);
  addr_ = nullptr;
  if (owner_) unlink();
  owner_ = false;
}

void ShmSegment::unlink() {
  if (owner_ && !unlinked_) {
    shm_unlink(name_.c_str());
    unlinked_ = true;
  }
}

bool segment_creator_dead(const std::string& name) {
  // name: [/]wt-<pid>-<starttime>-<hex>
  std::string n = name[0] == '/' ? name.substr(1) : name;
  if (n.compare(0, std::strlen(kPrefix), kPrefix) != 0) return false;
  std::istringstream parts(n.substr(std::strlen(kPrefix)));
  std::string pid_text, start;
  if (!std::getline(parts, pid_text, '-') || !std::getline(parts, start, '-')) return false;
  long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  if (pid <= 0) return false;
  std::string now = process_start_time(pid);
  return now.empty() || now != start;
}

std::vector<std::string> list_wt_segments() {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) == 0) out.emplace_back(e->d_name);
  }
  closedir(d);
  return out;
}

int sweep_orphaned_segments() {
  int removed = 0;
  for (const auto& n : list_wt_segments()) {
    if (segment_creator_dead(n) && shm_unlink(("/" + n).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace wt::ipc
