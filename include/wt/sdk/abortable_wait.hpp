// Abortable, deadline-bounded waits: what every networked or streaming backend needs while
// update_weights / send_weights is outstanding. Rule 8 of the ABI: every blocking wait has a
// deadline, and abort() from another thread ends it promptly. One AbortSignal per engine:
//
//   class MyWorker : public wt::sdk::WorkerBase {
//     wt::sdk::AbortSignal abort_;
//     void start() override { abort_.reset(); ... }
//     void receive(const nlohmann::json& info, const wt::sdk::LoaderRef& loader) override {
//       auto deadline = wt::sdk::Deadline::after(std::chrono::seconds(30));
//       abort_.wait_fd(sock_, POLLIN, deadline, "the trainer's next chunk");  // or throws
//       ...
//     }
//     void abort() override { abort_.abort(); }  // any thread; wakes every wait below
//   };
//
// Which error wins: abort() does. A wait that finds the signal aborted throws WT_ERR_ABORTED even
// when its deadline has passed too, so an engine that was told to stop reports "aborted", not a
// time-out it did not cause; a time-out is WT_ERR_TIMEOUT naming what was awaited and for how long.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/sdk/errors.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

namespace wt::sdk {

// A point in time on the steady clock plus the budget it was made from, so a time-out can say
// "after 30 s" rather than a raw time.
class Deadline {
 public:
  using clock = std::chrono::steady_clock;
  static Deadline after(std::chrono::milliseconds budget) {
    return Deadline(clock::now() + budget, budget);
  }
  bool passed() const { return clock::now() >= at_; }
  // Milliseconds left, never negative.
  std::chrono::milliseconds left() const {
    auto l = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - clock::now());
    return l.count() > 0 ? l : std::chrono::milliseconds(0);
  }
  clock::time_point at() const { return at_; }
  std::chrono::milliseconds budget() const { return budget_; }
  // "30 s", "250 ms": the budget, for messages.
  std::string budget_text() const {
    const auto ms = budget_.count();
    return ms % 1000 == 0 ? fmt::format("{} s", ms / 1000) : fmt::format("{} ms", ms);
  }

 private:
  Deadline(clock::time_point at, std::chrono::milliseconds budget) : at_(at), budget_(budget) {}
  clock::time_point at_;
  std::chrono::milliseconds budget_;
};

// An abort flag that waits can sleep on. abort() is safe from any thread, at any time, any
// number of times; reset() re-arms it (at the start of the next round). Waits on file
// descriptors are woken through an eventfd, waits on conditions through a condition variable.
class AbortSignal {
 public:
  AbortSignal() : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (efd_ < 0) fail(WT_ERR_SYSTEM, "eventfd failed: {}", std::strerror(errno));
  }
  ~AbortSignal() { ::close(efd_); }
  AbortSignal(const AbortSignal&) = delete;
  AbortSignal& operator=(const AbortSignal&) = delete;

  void abort() noexcept {
    {
      std::lock_guard<std::mutex> l(mu_);
      aborted_ = true;
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(efd_, &one, sizeof one);
    cv_.notify_all();
  }
  void reset() noexcept {
    std::lock_guard<std::mutex> l(mu_);
    aborted_ = false;
    uint64_t drained = 0;
    [[maybe_unused]] ssize_t r = ::read(efd_, &drained, sizeof drained);
  }
  bool aborted() const noexcept { return aborted_.load(); }
  // Throws WT_ERR_ABORTED ("aborted while waiting for <what>") if abort() was called.
  void check(const std::string& what) const {
    if (aborted_.load()) fail(WT_ERR_ABORTED, "aborted while waiting for {}", what);
  }

  // Waits until pred() holds. pred is evaluated with this signal's lock held; whoever makes it
  // true calls notify() after changing the state it reads. Throws WT_ERR_ABORTED or
  // WT_ERR_TIMEOUT ("timed out after 30 s waiting for <what>").
  template <typename Pred>
  void wait_until(Pred pred, const Deadline& deadline, const std::string& what) {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      check(what);
      if (pred()) return;
      if (deadline.passed())
        fail(WT_ERR_TIMEOUT, "timed out after {} waiting for {}", deadline.budget_text(), what);
      cv_.wait_until(l, deadline.at());
    }
  }
  // Wakes wait_until() to look at its condition again.
  void notify() {
    { std::lock_guard<std::mutex> l(mu_); }
    cv_.notify_all();
  }
  // Sleeps for `d` or until abort() (then throws WT_ERR_ABORTED): a polling loop's pause.
  void sleep_for(std::chrono::milliseconds d, const std::string& what) {
    const auto until = Deadline::clock::now() + d;
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_until(l, until, [&] { return aborted_.load(); });
    check(what);
  }
  // Waits until `fd` is ready for `events` (POLLIN, POLLOUT). Returns the revents (POLLHUP and
  // POLLERR included, for the caller to read the error from the socket). Throws WT_ERR_ABORTED,
  // WT_ERR_TIMEOUT, or WT_ERR_SYSTEM if poll itself fails.
  short wait_fd(int fd, short events, const Deadline& deadline, const std::string& what) {
    for (;;) {
      check(what);
      const auto left = deadline.left();
      if (left.count() == 0)
        fail(WT_ERR_TIMEOUT, "timed out after {} waiting for {}", deadline.budget_text(), what);
      pollfd p[2] = {{fd, events, 0}, {efd_, POLLIN, 0}};
      const int ms = static_cast<int>(std::min<int64_t>(left.count(), 60'000));
      const int r = ::poll(p, 2, ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(WT_ERR_SYSTEM, "poll failed waiting for {}: {}", what, std::strerror(errno));
      check(what);
      if (r > 0 && p[0].revents != 0) return p[0].revents;
    }
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> aborted_{false};
  int efd_;
};

}  // namespace wt::sdk
