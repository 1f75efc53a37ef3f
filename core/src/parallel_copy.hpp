// Copies a batch of host buffers with several threads. One core copies at a fraction of what the
// memory system can move, and a receiver that loads a whole model per round is otherwise idle, so
// a large batch is split into equal byte ranges, one per thread (the caller's thread included).
#pragma once

#include <cstddef>
#include <vector>

namespace wt::detail {

struct CopyJob {
  void* dst;
  const void* src;
  std::size_t n;
};

// Below this many bytes in a batch, one thread copies (starting threads would cost more).
inline constexpr std::size_t kParallelCopyMinBytes = std::size_t{32} << 20;

// `threads` <= 1 copies on the calling thread. Returns when every byte is copied.
void parallel_copy(const std::vector<CopyJob>& jobs, unsigned threads);

// The default thread count: the hardware's, capped at 8 (more rarely helps a memory-bound copy).
unsigned default_copy_threads();

}  // namespace wt::detail
