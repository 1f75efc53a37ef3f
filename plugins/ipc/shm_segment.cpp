#include "shm_segment.hpp"

#include <wt/sdk/errors.hpp>
#include <wt/sdk/prefault.hpp>
#include <wt/sdk/shm_segments.hpp>

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

bool ShmSegment::prefault(unsigned threads) const {
  if (addr_ == nullptr) return true;
  return populate(addr_, size_, owner_ ? kMadvPopulateWrite : kMadvPopulateRead, threads) == 0;
}

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

namespace {

const char* file_type(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string path_of(const std::string& name) {
  return std::string(shm::kDir) + name;
}

}  // namespace

ShmSegment ShmSegment::open(const std::string& name, std::size_t expected_size) {
  if (name.size() < 2 || name.size() > NAME_MAX || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || name == "/." || name == "/..")
    sdk::fail(WT_ERR_INVALID_ARGUMENT, "'{}' is not a shared-memory segment name", name);
  // Only wt's own segments: a worker that mapped any file an update names would let whoever may
  // send updates read every file in /dev/shm its user can read (back through the checksums).
  if (!shm::is_segment_name(name))
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory file {} is not a wt segment (/wt-<pid>-<token>-<random>): the ipc "
              "worker maps only segments wt created",
              name);
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: no symbolic links.
  int fd = ::open(path_of(name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      sdk::fail(WT_ERR_NOT_FOUND,
                "shared-memory segment {} does not exist: its trainer unlinked it (segments are "
                "removed once every worker of a round has mapped them) or died",
                name);
    if (errno == ELOOP)
      sdk::fail(WT_ERR_INVALID_ARGUMENT,
                "shared-memory segment {} is a symbolic link: refused (only regular files are "
                "mapped)",
                name);
    if (errno == ENXIO)
      sdk::fail(WT_ERR_INVALID_ARGUMENT,
                "shared-memory segment {} is not a regular file (a socket?): refused", name);
    sdk::fail(WT_ERR_SYSTEM, "cannot open shared-memory segment {}: {}", name, errno_text());
  }
  struct Fd {
    int fd;
    ~Fd() { close(fd); }
  } guard{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0)
    sdk::fail(WT_ERR_SYSTEM, "cannot stat shared-memory segment {}: {}", name, errno_text());
  if (!S_ISREG(st.st_mode))
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory segment {} is {}: refused (only regular files are mapped)", name,
              file_type(st.st_mode));
  if (st.st_uid != geteuid())
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory segment {} belongs to uid {}, not to this process's user (uid {}): "
              "refused (the trainer and the worker must run as the same user)",
              name, static_cast<unsigned long>(st.st_uid), static_cast<unsigned long>(geteuid()));
  // A wt segment has one name; a second link is someone else's file under a wt-like name.
  if (st.st_nlink > 1)
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory segment {} has {} links: refused (a wt segment has one name)", name,
              static_cast<unsigned long>(st.st_nlink));
  if (static_cast<std::size_t>(st.st_size) < expected_size)
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory segment {} holds {} bytes, but the handle says {}", name,
              static_cast<std::size_t>(st.st_size), expected_size);
  std::size_t size = expected_size == 0 ? 1 : expected_size;
  void* addr = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED)
    sdk::fail(WT_ERR_SYSTEM, "cannot map shared-memory segment {}: {}", name, errno_text());
  // Shrunk between the check and the mapping? Reading past its end would raise SIGBUS. (Later
  // shrinking is caught by the host's guarded copy: wt::guarded_parallel_copy.)
  struct stat now {};
  if (fstat(fd, &now) != 0 || static_cast<std::size_t>(now.st_size) < expected_size) {
    munmap(addr, size);
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "shared-memory segment {} shrank to {} bytes while being mapped; the handle says {}",
              name, static_cast<std::size_t>(now.st_size), expected_size);
  }
  ShmSegment s;
  s.name_ = name;
  s.addr_ = addr;
  s.size_ = size;
  s.inode_ = st.st_ino;
  s.device_ = st.st_dev;
  return s;
}

bool ShmSegment::is_current() const {
  struct stat st {};
  if (lstat(path_of(name_).c_str(), &st) != 0) return true;
  // Another file (or not a file) under the name, or a file shrunk under the mapping (reading the
  // bytes past its end would raise SIGBUS).
  return S_ISREG(st.st_mode) && st.st_ino == inode_ && st.st_dev == device_ &&
         static_cast<std::size_t>(st.st_size) >= size_;
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
    device_ = o.device_;
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
