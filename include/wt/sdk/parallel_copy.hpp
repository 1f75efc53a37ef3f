// Copying a batch of host buffers with several threads. One core copies at a fraction of what the
// memory system can move, so a large batch is split into equal byte ranges, one per thread (the
// caller's thread included). Header-only: libwt's receiver and the plugins' packing share it.
//
// guarded_parallel_copy() is the same copy for sources that another process may shrink under the
// copy (a mapped shared-memory file): a source that raises SIGBUS fails the copy and names its job
// instead of killing the process (<wt/sdk/sigbus_guard.hpp>).
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/sdk/sigbus_guard.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
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

// Calls copy(begin, end) for byte ranges of [0, total), `threads` ranges at a time at most, and
// returns when every call has returned.
template <typename F>
void split_range(std::size_t total, unsigned threads, F&& copy) {
  if (threads <= 1 || total < kParallelCopyMinBytes) {
    copy(std::size_t{0}, total);
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
      helpers.emplace_back([&copy, begin, end] { copy(begin, end); });
    } catch (const std::system_error&) {
      mine.emplace_back(begin, end);  // no thread to spare: this one copies that share too
    }
  }
  for (auto [begin, end] : mine) copy(begin, end);
}  // helpers join as they go out of scope

// split_range over the bytes of the batch seen as one concatenated stream.
template <typename F>
void split_stream(const std::vector<CopyJob>& jobs, unsigned threads, F&& copy) {
  std::size_t total = 0;
  for (const auto& j : jobs) total += j.n;
  split_range(total, threads, std::forward<F>(copy));
}

// Copies bytes [begin, end) of the stream, one memcpy-like call per job piece; stops at the first
// piece for which copy_piece returns false and returns that job's index.
template <typename Piece>
std::optional<std::size_t> copy_stream_range(const std::vector<CopyJob>& jobs, std::size_t begin,
                                             std::size_t end, Piece&& copy_piece) {
  std::size_t pos = 0;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const auto& j = jobs[k];
    const std::size_t lo = std::max(begin, pos), hi = std::min(end, pos + j.n);
    if (lo < hi && !copy_piece(k, static_cast<unsigned char*>(j.dst) + (lo - pos),
                               static_cast<const unsigned char*>(j.src) + (lo - pos), hi - lo))
      return k;
    pos += j.n;
    if (pos >= end) break;
  }
  return std::nullopt;
}

}  // namespace detail

// Copies every job; `threads` <= 1 (or a small batch) copies on the calling thread. Returns when
// every byte is copied. The jobs must not overlap.
inline void parallel_copy(const std::vector<CopyJob>& jobs, unsigned threads) {
  detail::split_stream(jobs, threads, [&jobs](std::size_t begin, std::size_t end) {
    detail::copy_stream_range(jobs, begin, end,
                              [](std::size_t, void* d, const void* s, std::size_t n) {
                                std::memcpy(d, s, n);
                                return true;
                              });
  });
}

// A copy whose source vanished: reading it raised SIGBUS.
struct CopyFault {
  std::size_t job = 0;        // index in the batch of the job whose source faulted
  const void* src = nullptr;  // that job's source

  // "the source memory of <what> vanished during the copy (shared-memory file truncated?)"
  std::string message_for(std::string_view what) const {
    return "the source memory of " + std::string(what) +
           " vanished during the copy (shared-memory file truncated?)";
  }
  // The same, naming the tensor of `tensors` (wt_tensor-like: name, tensor.data,
  // tensor.byte_offset) the job copied, found by its source address.
  template <typename Tensors>
  requires requires(const Tensors& ts) { std::begin(ts)->tensor.byte_offset; }
  std::string message(const Tensors& tensors) const {
    for (const auto& t : tensors)
      if (static_cast<const unsigned char*>(t.tensor.data) + t.tensor.byte_offset == src)
        return message_for("tensor '" + std::string(t.name != nullptr ? t.name : "") + "'");
    return message_for("copy job " + std::to_string(job));
  }
};

// parallel_copy() for sources that may vanish under the copy (a shared-memory file truncated by
// another process): a source that raises SIGBUS ends that thread's share and the call returns the
// fault (the lowest faulting job when several did) instead of the process dying. Nothing is
// promised about the destinations then. Returns nullopt when every byte was copied. The caller
// turns the fault into its error, e.g.
//   if (auto f = guarded_parallel_copy(jobs, threads)) throw Error(WT_ERR_SYSTEM, f->message(ts));
inline std::optional<CopyFault> guarded_parallel_copy(const std::vector<CopyJob>& jobs,
                                                      unsigned threads) {
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::atomic<std::size_t> first{kNone};
  detail::split_stream(jobs, threads, [&](std::size_t begin, std::size_t end) {
    auto faulted = detail::copy_stream_range(
        jobs, begin, end, [&first](std::size_t k, void* d, const void* s, std::size_t n) {
          // A job after a known fault need not be copied: the batch has failed.
          return k > first.load(std::memory_order_relaxed) || sigbus::guarded_memcpy(d, s, n);
        });
    if (!faulted) return;
    std::size_t cur = first.load();
    while (*faulted < cur && !first.compare_exchange_weak(cur, *faulted)) {
    }
  });
  const std::size_t k = first.load();
  if (k == kNone) return std::nullopt;
  return CopyFault{k, jobs[k].src};
}

// A default thread count for copies: the hardware's, capped at 8 (more rarely helps a
// memory-bound copy).
inline unsigned default_copy_threads() {
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

}  // namespace wt
