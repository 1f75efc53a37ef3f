#include "parallel_copy.hpp"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

namespace wt::detail {
namespace {

// Copies bytes [begin, end) of the batch seen as one concatenated stream.
void copy_range(const std::vector<CopyJob>& jobs, std::size_t begin, std::size_t end) {
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

}  // namespace

void parallel_copy(const std::vector<CopyJob>& jobs, unsigned threads) {
  std::size_t total = 0;
  for (const auto& j : jobs) total += j.n;
  if (threads <= 1 || total < kParallelCopyMinBytes) {
    copy_range(jobs, 0, total);
    return;
  }
  // Shares on 4 KiB multiples of the stream: whole pages per thread where buffers are aligned.
  constexpr std::size_t kAlign = 4096;
  const std::size_t share = (total / threads + kAlign - 1) / kAlign * kAlign;
  std::vector<std::pair<std::size_t, std::size_t>> mine = {{0, std::min(total, share)}};
  {
    std::vector<std::jthread> helpers;
    helpers.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) {
      const std::size_t begin = std::min(total, share * t), end = std::min(total, begin + share);
      if (begin >= end) continue;
      try {
        helpers.emplace_back([&jobs, begin, end] { copy_range(jobs, begin, end); });
      } catch (const std::system_error&) {
        mine.emplace_back(begin, end);  // no thread to spare: this one copies that share too
      }
    }
    for (auto [begin, end] : mine) copy_range(jobs, begin, end);
  }  // helpers join here
}

unsigned default_copy_threads() {
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

}  // namespace wt::detail
