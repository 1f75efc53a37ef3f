// Host memory for received weights, handed out back to back: tensors staged in the order a backend
// asks for them lie adjacent, so a packed chunk of several tensors can be received straight into
// place (one broadcast into the first tensor's memory) instead of into a buffer and copied out.
//
// Address space is reserved in large mappings (MAP_NORESERVE: a page is only backed once written)
// and blocks are cut from the current one in order. A block released by its last owner gives its
// whole pages back to the kernel at once (MADV_DONTNEED); a mapping is unmapped when nothing cut
// from it is alive and it no longer hands out. Where the kernel refuses a large reservation
// (strict overcommit), each block gets a mapping of its own, as if there were no arena.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>

namespace wt::detail {

class StagingArena {
 public:
  // Address space one mapping reserves (a larger block gets a mapping its own size).
  static constexpr std::size_t kReserve = std::size_t{64} << 30;

  // `nbytes` (0 is taken as 1) at an address aligned to `align` (a power of two, at most 4096),
  // right after the previous block when the alignment allows it. Throws wt::Error (WT_ERR_SYSTEM)
  // when no memory can be mapped.
  std::shared_ptr<unsigned char> allocate(std::size_t nbytes, std::size_t align);

  // Faults in the next `nbytes` of address space blocks will be cut from, with `threads` threads
  // (MADV_POPULATE_WRITE): blocks allocated there are then written without page faults, which on
  // a machine whose memory is fragmented cost more than the copy (the kernel compacts memory for
  // each huge page). `wait`: returns when done; otherwise runs in the background, and a block cut
  // meanwhile is simply faulted by whoever writes it first (populating never changes what a page
  // holds). Returns the seconds it took (0 in the background), or -1 with `*error` set to the
  // errno when it could not (EINVAL: a kernel before Linux 5.14; ENOMEM: not that much memory);
  // the blocks are then faulted by their first writer, as without it.
  double prepare(std::size_t nbytes, unsigned threads, bool wait, int* error = nullptr);

  StagingArena() = default;
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

 private:
  struct Mapping;
  std::mutex mu_;
  std::shared_ptr<Mapping> current_;
  std::thread preparing_;  // a background prepare(), joined by the next one and the destructor
};

}  // namespace wt::detail
