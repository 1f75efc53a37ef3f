// Running independent pieces of work on a few threads: the per-patch scans and copies of a sparse
// round, which one core does at a fraction of what the memory system allows. Header-only: libwt's
// receiver and the sparse backends share it.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace wt {

// Calls work(i) once for every i in [0, count), on up to `threads` threads (the caller's thread
// included; items are taken in order, one at a time, so uneven items balance). Returns when every
// call has returned. `work` must not throw: record a failure in the item's result instead. If no
// thread can be started, the caller's thread does all the work.
template <typename Work>
void parallel_for(std::size_t count, unsigned threads, Work&& work) {
  std::atomic<std::size_t> next{0};
  auto run = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) work(i);
  };
  std::vector<std::jthread> helpers;
  const std::size_t wanted = std::min<std::size_t>(threads, count);
  helpers.reserve(wanted);  // before any thread starts: only starting one can fail below
  for (std::size_t t = 1; t < wanted; ++t) {
    try {
      helpers.emplace_back(run);
    } catch (const std::system_error&) {
      break;
    }
  }
  run();
}  // helpers join as they go out of scope

}  // namespace wt
