// The stall deadline: a wait on which no byte moves for `stall` fails, apart from the round's
// overall bound. A round on a loaded machine may take long and still make progress; a peer that
// stopped (SIGSTOP, a hung process) or a cut link moves nothing, and is told apart within the
// stall deadline instead of the whole round's (compiled into each plugin, plugins/common).
//
// One watch serves one waiting thread at a time. Its own thread looks a few times per deadline;
// when an armed wait has seen no progress (and was not begun) within the deadline, it calls the
// wait's interrupt, and again every millisecond until the wait is disarmed. Whatever that thread
// reads it owns: the progress and interrupt functions are copied into the watch, and the watch
// joins its thread before they go.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace wt::plugins {

// How long a wait may stay open after the pair of a peer it waits on closed: bytes the peer sent
// before it closed are read before the close is seen, so a wait still open a moment later can
// never be served.
inline constexpr std::chrono::milliseconds kClosedPeerGrace{200};

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StallWatch(std::chrono::milliseconds stall);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // A wait begins: `progress` says when bytes last moved for it; `interrupt` (called on the
  // watch's thread, never while the waiting thread is in arm or disarm) ends it. `ended`, when
  // given, ends it at once once true (a peer whose leaving ends the round left); the waiter asks
  // it again to tell that from a stall.
  void arm(std::function<Clock::time_point()> progress, std::function<void()> interrupt,
           std::function<bool()> ended = nullptr);
  // The wait ended (or is abandoned): whether the watch interrupted it as stalled.
  bool disarm();
  std::chrono::milliseconds deadline() const { return stall_; }

 private:
  void loop();
  const std::chrono::milliseconds stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  bool fired_ = false;
  Clock::time_point armed_at_{};
  std::function<Clock::time_point()> progress_;
  std::function<void()> interrupt_;
  std::function<bool()> ended_;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace wt::plugins
