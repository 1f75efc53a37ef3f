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

namespace wt::detail {

class StagingArena {
 public:
  // Address space one mapping reserves (a larger block gets a mapping its own size).
  static constexpr std::size_t kReserve = std::size_t{64} << 30;

  // `nbytes` (0 is taken as 1) at an address aligned to `align` (a power of two, at most 4096),
  // right after the previous block when the alignment allows it. Throws wt::Error (WT_ERR_SYSTEM)
  // when no memory can be mapped.
  std::shared_ptr<unsigned char> allocate(std::size_t nbytes, std::size_t align);

 private:
  struct Mapping;
  std::mutex mu_;
  std::shared_ptr<Mapping> current_;
};

}  // namespace wt::detail
