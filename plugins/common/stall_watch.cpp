#include "stall_watch.hpp"

#include <algorithm>

namespace wt::plugins {

StallWatch::StallWatch(std::chrono::milliseconds stall)
    : stall_(std::max(stall, std::chrono::milliseconds(1))), thread_([this] { loop(); }) {}

StallWatch::~StallWatch() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatch::arm(std::function<Clock::time_point()> progress, std::function<void()> interrupt,
                     std::function<bool()> ended) {
  std::lock_guard<std::mutex> l(mu_);
  progress_ = std::move(progress);
  interrupt_ = std::move(interrupt);
  ended_ = std::move(ended);
  armed_at_ = Clock::now();
  armed_ = true;
  fired_ = false;
}

bool StallWatch::disarm() {
  std::lock_guard<std::mutex> l(mu_);
  armed_ = false;
  progress_ = nullptr;
  interrupt_ = nullptr;
  ended_ = nullptr;
  return fired_;
}

void StallWatch::loop() {
  // A few looks per deadline, never busier than every 10 ms nor lazier than every 100 ms (a peer
  // that left is noticed within that).
  const auto period =
      std::clamp(stall_ / 8, std::chrono::milliseconds(10), std::chrono::milliseconds(100));
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    // Once fired, again every millisecond until disarmed: an interrupt ends one Gloo wait, and a
    // collective may wait several times (the root of a tree once per child).
    cv_.wait_for(l, fired_ ? std::chrono::milliseconds(1) : period);
    if (stop_ || !armed_) continue;
    if (!fired_) {
      const auto last = std::max(armed_at_, progress_());
      if (Clock::now() - last < stall_ && !(ended_ && ended_())) continue;
      fired_ = true;
    }
    // Under the watch's lock: the waiting thread cannot disarm (and free what interrupt uses)
    // while it runs; interrupt takes the wait's own lock, which is never held across arm/disarm.
    interrupt_();
  }
}

}  // namespace wt::plugins
