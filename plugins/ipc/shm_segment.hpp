// POSIX shared-memory segments for host-memory tensors. Segments are created 0600 with O_EXCL,
// named by <wt/sdk/shm_segments.hpp> (unguessable, and carrying the creating process's liveness
// token, so any later wt process on the host can remove the segments of a creator that died:
// sweep_orphaned_segments).
#pragma once

#include <wt/sdk/shm_segments.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace wt::ipc {

class ShmSegment {
 public:
  // Creates and maps a new read-write segment of `size` bytes (size 0 is rounded up to 1).
  static ShmSegment create(std::size_t size);
  // Maps the first `expected_size` bytes of an existing wt segment read-only. Refused, with an
  // error naming the segment: a name that is not a wt segment's (whatever else lives in
  // /dev/shm), a file that is not this user's (owner != euid), anything that is not a regular
  // file (a FIFO, a symbolic link, ...; the open never blocks and never follows a link), and a
  // file shorter than expected_size, checked before and again after mapping. Throws
  // wt::sdk::Error (WT_ERR_NOT_FOUND if it is gone, WT_ERR_INVALID_ARGUMENT if refused).
  static ShmSegment open(const std::string& name, std::size_t expected_size);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps; unlinks too if this process created it and has not unlinked yet

  const std::string& name() const { return name_; }
  std::size_t size() const { return size_; }
  unsigned char* data() const { return static_cast<unsigned char*>(addr_); }
  bool linked() const { return owner_ && !unlinked_; }
  // Removes the name from /dev/shm; the mapping stays valid. Idempotent.
  void unlink();
  // For an opened segment: false when its name now refers to another file (its owner replaced
  // it, or put something else there) or the file became shorter than the mapping, so a cached
  // mapping must be redone. A name that is gone keeps the mapping current: wt unlinks its
  // segments' names as soon as every worker has mapped them. Never opens the file.
  bool is_current() const;
  // Faults every page of the mapping in ahead of use, with `threads` threads: a created segment's
  // pages are allocated (MADV_POPULATE_WRITE), an opened one's mapped (MADV_POPULATE_READ), so
  // the round that fills or reads it takes no page faults. Best effort: false where the kernel
  // cannot (before Linux 5.14) or a page is gone (a segment cut short; never a SIGBUS).
  bool prefault(unsigned threads = 1) const;

 private:
  void release();  // unmaps, and unlinks what this process created and has not unlinked

  std::string name_;
  void* addr_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;
  bool unlinked_ = false;
  unsigned long inode_ = 0, device_ = 0;  // of the file opened (open() only)
};

// Naming, the dead-creator test and the sweep live in <wt/sdk/shm_segments.hpp>.
using shm::is_segment_name;
using shm::list_wt_segments;
using shm::segment_creator_dead;
using shm::sweep_orphaned_segments;

}  // namespace wt::ipc
