// Copying a batch of host buffers with several threads. One core copies at a fraction of what the
// memory system can move, so a large batch is split into equal byte ranges, one per thread (the
// caller's thread included). Header-only: libwt's receiver and the plugins' packing share it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace wt {

struct CopyJob {
  void* dst;
  const void* src;
  std::size_t n;
};

// Below this many bytes in a batch, one thread copies (starting threads would cost more).
inline constexpr std::size_t kParallelCopyMinBytes = std::size_t{32} << 20;

namespace detail {
// Copies bytes [begin, end) of the batch seen as one concatenated stream.
inline void copy_stream_range(const std::vector<CopyJob>& jobs, std::size_t begin,
                              std::size_t end) {
  std::size_t pos = 0;
  for (const auto& j : jobs) {
    const std::size_t lo = std::max(begin, pos), hi = std::min(end, pos + j.n);
    if (lo < hi)
      std::memcpy(static_cast<unsigned char*>(j.dst) + (lo - pos),
                  static_cast<const unsigned char*>(j.src) + (lo - pos), hi - lo);
    pos += j.n;
    if (pos >= end) break;
  }
}
}  // namespace detail

// Copies every job; `threads` <= 1 (or a small batch) copies on the calling thread. Returns when
// every byte is copied. The jobs must not overlap.
inline void parallel_copy(const std::vector<CopyJob>& jobs, unsigned threads) {
  std::size_t total = 0;
  for (const auto& j : jobs) total += j.n;
  if (threads <= 1 || total < kParallelCopyMinBytes) {
    detail::copy_stream_range(jobs, 0, total);
    return;
  }
  // Shares on 4 KiB multiples of the stream: whole pages per thread where buffers are aligned.
  constexpr std::size_t kAlign = 4096;
  const std::size_t share = (total / threads + kAlign - 1) / kAlign * kAlign;
  std::vector<std::pair<std::size_t, std::size_t>> mine = {{0, std::min(total, share)}};
  std::vector<std::jthread> helpers;
  helpers.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) {
    const std::size_t begin = std::min(total, share * t), end = std::min(total, begin + share);
    if (begin >= end) continue;
    try {
      helpers.emplace_back([&jobs, begin, end] { detail::copy_stream_range(jobs, begin, end); });
    } catch (const std::system_error&) {
      mine.emplace_back(begin, end);  // no thread to spare: this one copies that share too
    }
  }
  for (auto [begin, end] : mine) detail::copy_stream_range(jobs, begin, end);
}  // helpers join as they go out of scope

// A default thread count for copies: the hardware's, capped at 8 (more rarely helps a
// memory-bound copy).
inline unsigned default_copy_threads() {
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

}  // namespace wt
