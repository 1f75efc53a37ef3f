// Copies that survive their source vanishing. Reading a MAP_SHARED mapping past the end of its
// file raises SIGBUS, and a shared-memory file can be truncated, while a receiver copies out of
// it, by any process that holds it open. guarded_memcpy() turns that fault into a return value:
//
// - A process-wide SIGBUS handler is installed at the first guarded copy (install() does it
//   earlier). It remembers the handler that was there before.
// - Each guarded copy arms its thread with a sigjmp_buf and the source range it reads. A SIGBUS
//   raised by the kernel for an address inside the armed range of the faulting thread jumps
//   back (siglongjmp) and the copy returns false.
// - Every other SIGBUS — a fault outside an armed range (the destination, another mapping, a thread
//   that is not copying) or one sent with kill() — goes to the previous handler; under the default
//   action the process dies of SIGBUS exactly as it would have without the guard.
//
// The armed ranges live in a fixed table of lock-free slots indexed by thread id (no thread_local:
// the handler must not allocate). A handler installed later that does not chain to the one it
// replaced disables the guard. Header-only and host-side: libwt's receiver copies with it through
// guarded_parallel_copy() (<wt/sdk/parallel_copy.hpp>); plugins keep no process-wide state and do
// not install it.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

namespace wt::sigbus {
namespace detail {

struct Armed {
  std::atomic<long> tid{0};       // the thread copying; 0: free
  std::uintptr_t lo = 0, hi = 0;  // the source range it reads
  sigjmp_buf* jump = nullptr;
};

inline constexpr std::size_t kSlots = 256;  // copies guarded at the same time (more wait)
inline Armed g_armed[kSlots];
inline struct sigaction g_previous {};

inline long current_tid() noexcept {
  return static_cast<long>(::syscall(SYS_gettid));
}

// What the process would have done without the guard.
inline void call_previous(int sig, siginfo_t* info, void* ctx) noexcept {
  const struct sigaction& p = g_previous;
  const bool sent = info == nullptr || info->si_code <= 0;  // kill(), tgkill(), sigqueue()
  if (p.sa_handler == SIG_IGN) {
    if (sent) return;  // ignored, as before; a fault cannot be ignored
  } else if (p.sa_handler != SIG_DFL) {
    if (p.sa_flags & SA_SIGINFO)
      p.sa_sigaction(sig, info, ctx);
    else
      p.sa_handler(sig);
    return;
  }
  // The default action: terminate with a core dump.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (sent) raise(sig);  // pending while this handler runs; delivered when it returns
  // A fault: returning re-runs the access, which faults again under the default action.
}

inline void on_sigbus(int sig, siginfo_t* info, void* ctx) noexcept {
  const int saved_errno = errno;
  if (info != nullptr && info->si_code > 0) {  // raised by the kernel for an access
    const long self = current_tid();
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (auto& a : g_armed)
      if (a.tid.load(std::memory_order_relaxed) == self && addr >= a.lo && addr < a.hi)
        siglongjmp(*a.jump, 1);
  }
  call_previous(sig, info, ctx);
  errno = saved_errno;
}

inline Armed* claim(long self) noexcept {
  const std::size_t first = static_cast<std::size_t>(self) % kSlots;
  for (;;) {
    for (std::size_t k = 0; k < kSlots; ++k) {
      Armed& a = g_armed[(first + k) % kSlots];
      long expected = 0;
      if (a.tid.load(std::memory_order_relaxed) == 0 &&
          a.tid.compare_exchange_strong(expected, self, std::memory_order_acquire))
        return &a;
    }
    std::this_thread::yield();
  }
}

inline void release(Armed* a) noexcept {
  a->tid.store(0, std::memory_order_release);
}

}  // namespace detail

// Installs the process-wide handler (once; later calls return the first call's result). Returns
// false if sigaction failed, in which case guarded copies are plain copies.
inline bool install() noexcept {
  static const bool installed = [] {
    struct sigaction previous {};
    if (sigaction(SIGBUS, nullptr, &previous) != 0) return false;
    detail::g_previous = previous;
    struct sigaction act {};
    act.sa_sigaction = &detail::on_sigbus;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    return sigaction(SIGBUS, &act, nullptr) == 0;
  }();
  return installed;
}

// Copies n bytes from src to dst (they must not overlap). Returns false, instead of the process
// dying, when reading src raised SIGBUS (its file was truncated under the mapping); dst then holds
// an unspecified part of the bytes. A fault writing dst is not caught.
inline bool guarded_memcpy(void* dst, const void* src, std::size_t n) noexcept {
  if (n == 0) return true;
  if (!install()) {
    std::memcpy(dst, src, n);
    return true;
  }
  detail::Armed* const slot = detail::claim(detail::current_tid());
  sigjmp_buf jump;
  slot->lo = reinterpret_cast<std::uintptr_t>(src);
  slot->hi = slot->lo + n;
  slot->jump = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // armed before the first read of src
  if (sigsetjmp(jump, 1) != 0) {  // 1: the jump restores the signal mask (SIGBUS unblocked)
    detail::release(slot);
    return false;
  }
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  detail::release(slot);
  return true;
}

}  // namespace wt::sigbus
