#include "staging_arena.hpp"

#include <wt/error.hpp>
#include <wt/sdk/prefault.hpp>

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace wt::detail {

namespace {

constexpr std::size_t kHuge = std::size_t{2} << 20;

std::size_t page_size() {
  static const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

// One reserved range, 2 MiB-aligned so that the kernel can back it with transparent huge pages
// (requested with MADV_HUGEPAGE: fewer TLB misses on the copies and receives that fill it).
struct StagingArena::Mapping {
  unsigned char* base = nullptr;
  std::size_t size = 0, used = 0;

  // nullptr when the kernel refuses the reservation.
  static std::shared_ptr<Mapping> reserve(std::size_t size) {
    const std::size_t reserve = size + kHuge;
    void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* start = static_cast<unsigned char*>(p);
    auto* aligned = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<uintptr_t>(start) + kHuge - 1) & ~(uintptr_t{kHuge} - 1));
    if (aligned > start) munmap(start, static_cast<std::size_t>(aligned - start));
    if (auto* tail = aligned + size; tail < start + reserve)
      munmap(tail, static_cast<std::size_t>(start + reserve - tail));
    if (size >= kHuge) madvise(aligned, size, MADV_HUGEPAGE);
    auto m = std::make_shared<Mapping>();
    m->base = aligned;
    m->size = size;
    return m;
  }
  ~Mapping() {
    if (base != nullptr) munmap(base, size);
  }
};

StagingArena::~StagingArena() {
  if (preparing_.joinable()) preparing_.join();
}

double StagingArena::prepare(std::size_t nbytes, unsigned threads, bool wait, int* error) {
  if (preparing_.joinable()) preparing_.join();
  unsigned char* from = nullptr;
  std::size_t size = 0;
  std::shared_ptr<Mapping> keep;  // the range stays mapped while it is populated
  {
    std::lock_guard<std::mutex> l(mu_);
    if (nbytes == 0 || nbytes > SIZE_MAX - 2 * kHuge) return 0;
    const std::size_t exact = round_up(nbytes, page_size());
    std::size_t offset = current_ ? round_up(current_->used, page_size()) : 0;
    if (!current_ || offset > current_->size || exact > current_->size - offset) {
      auto fresh = Mapping::reserve(std::max(kReserve, exact));
      if (!fresh) {  // allocate() reserves block by block then: nothing to prepare
        if (error != nullptr) *error = ENOMEM;
        return -1;
      }
      current_ = std::move(fresh);
      offset = 0;
    }
    keep = current_;
    from = current_->base + offset;
    size = exact;
  }
  // Slices of whole huge pages, each on its own thread.
  auto populate = [from, size, threads] {
    return wt::populate(from, size, kMadvPopulateWrite, threads, kHuge);
  };
  if (!wait) {
    try {
      preparing_ = std::thread([populate, keep] {
        try {
          populate();
        } catch (...) {  // best effort: the blocks are faulted by their first writer instead
        }
      });
    } catch (const std::system_error& e) {
      if (error != nullptr) *error = e.code().value();
      return -1;
    }
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (const int e = populate(); e != 0) {
    if (error != nullptr) *error = e;
    return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<unsigned char> StagingArena::allocate(std::size_t nbytes, std::size_t align) {
  if (nbytes == 0) nbytes = 1;
  if (align == 0 || (align & (align - 1)) != 0 || align > 4096) align = 64;
  std::lock_guard<std::mutex> l(mu_);
  std::size_t offset = current_ ? round_up(current_->used, align) : 0;
  if (!current_ || offset > current_->size || nbytes > current_->size - offset) {
    if (nbytes > SIZE_MAX - 2 * kHuge)
      throw Error(WT_ERR_SYSTEM,
                  fmt::format("cannot allocate {} bytes for received weights", nbytes));
    const std::size_t exact = round_up(nbytes, page_size());
    auto fresh = Mapping::reserve(std::max(kReserve, exact));
    if (!fresh) fresh = Mapping::reserve(exact);
    if (!fresh)
      throw Error(WT_ERR_SYSTEM, fmt::format("cannot allocate {} bytes for received weights: {}",
                                             nbytes, std::strerror(errno)));
    current_ = std::move(fresh);
    offset = 0;
  }
  current_->used = offset + nbytes;
  unsigned char* p = current_->base + offset;
  // The block's owner holds the mapping; its whole pages go back when the block is released.
  return std::shared_ptr<unsigned char>(p, [mapping = current_, nbytes](unsigned char* q) {
    const std::size_t page = page_size();
    auto first = round_up(reinterpret_cast<uintptr_t>(q), page);
    auto last = (reinterpret_cast<uintptr_t>(q) + nbytes) / page * page;
    if (last > first)
      madvise(reinterpret_cast<void*>(first), static_cast<std::size_t>(last - first),
              MADV_DONTNEED);
  });
}

}  // namespace wt::detail
