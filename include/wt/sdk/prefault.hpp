// Faulting memory in ahead of use, on a few threads: the receiver's staging memory and the ipc
// trainer's packed buffers are made ready before a round, so its copies take no page faults
// (which on a VM with fragmented memory cost more than the copy). Header-only: libwt's receiver
// and the ipc backend share it.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/sdk/parallel_for.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <vector>

namespace wt {

#ifndef MADV_POPULATE_READ
inline constexpr int kMadvPopulateRead = 22;  // Linux 5.14
#else
inline constexpr int kMadvPopulateRead = MADV_POPULATE_READ;
#endif
#ifndef MADV_POPULATE_WRITE
inline constexpr int kMadvPopulateWrite = 23;  // Linux 5.14
#else
inline constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#endif

// Applies `advice` (kMadvPopulateWrite: pages allocated, as a write would; kMadvPopulateRead:
// pages mapped) to [p, p + n), in up to `threads` slices of whole `granule`s (a page, or a huge
// page, so that no two threads fault in one), each on its own thread. Populating never changes
// what a page already holds, nor raises SIGBUS. Returns 0, or the errno of the first slice that
// failed (EINVAL: a kernel before 5.14; ENOMEM: not that much memory).
inline int populate(void* p, std::size_t n, int advice, unsigned threads,
                    std::size_t granule = 4096) {
  if (p == nullptr || n == 0) return 0;
  threads = std::max(1u, std::min(threads, 64u));
  const std::size_t slice = std::max(granule, (n / threads + granule - 1) / granule * granule);
  const std::size_t slices = (n + slice - 1) / slice;
  std::vector<int> failed(slices, 0);
  auto* base = static_cast<unsigned char*>(p);
  parallel_for(slices, threads, [&](std::size_t k) {
    const std::size_t lo = slice * k, len = std::min(slice, n - lo);
    if (madvise(base + lo, len, advice) != 0) failed[k] = errno;
  });
  for (int e : failed)
    if (e != 0) return e;
  return 0;
}

}  // namespace wt
