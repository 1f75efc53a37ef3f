#include "shm_segment.hpp"

#include <wt/sdk/errors.hpp>
#include <wt/shm_segments.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace wt::ipc {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

ShmSegment ShmSegment::create(std::size_t size) {
  if (size == 0) size = 1;
  auto c = shm::create_segment(size);
  if (c.addr == nullptr)
    sdk::fail(WT_ERR_SYSTEM, "cannot {} shared-memory segment {} ({} bytes): {}", c.step, c.name,
              size, std::strerror(c.error));
  ShmSegment s;
  s.name_ = std::move(c.name);
  s.owner_ = true;
  s.addr_ = c.addr;
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

}  // namespace wt::ipc
