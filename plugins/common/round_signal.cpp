#include "round_signal.hpp"

#include "tcp_store.hpp"

#include <wt/sdk/errors.hpp>

#include <fmt/format.h>

namespace wt::plugins {

using Clock = std::chrono::steady_clock;

RoundSignal::RoundSignal(std::string address, int port, SessionKeys keys,
                         std::chrono::milliseconds round_bound)
    : address_(std::move(address)),
      port_(port),
      keys_(std::move(keys)),
      round_bound_(round_bound) {}

bool RoundSignal::raise(uint32_t round, const std::string& why) noexcept {
  try {
    TcpStoreClient store(address_, port_, keys_, Clock::now() + std::chrono::seconds(2));
    return store.raise_fate(round, why);
  } catch (...) {
    return false;
  }
}

std::unique_ptr<RoundSignal::Watch> RoundSignal::watch(
    uint32_t round, std::function<void(const std::string&)> on_fate) {
  std::unique_ptr<Watch> w(new Watch());
  Watch* self = w.get();
  // The thread is the Watch's, joined by its destructor before anything it touches goes.
  w->thread_ = std::thread(
      [self, this, round, on_fate = std::move(on_fate)] { self->run(*this, round, on_fate); });
  return w;
}

void RoundSignal::Watch::run(const RoundSignal& signal, uint32_t round,
                             const std::function<void(const std::string&)>& on_fate) {
  auto stopped = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return stop_;
  };
  auto heard = [&](std::string fate) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      fate_ = fate;
    }
    on_fate(fate);
  };
  std::string gone;
  try {
    TcpStoreClient store(signal.address_, signal.port_, signal.keys_,
                         Clock::now() + signal.round_bound_ + std::chrono::seconds(10), stopped);
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (cv_.wait_for(l, kPoll, [&] { return stop_; })) return;
      }
      if (auto f = store.fate(round); f && f->rank != signal.keys_.rank()) {
        heard(fmt::format("trainer rank {} ended round {}: {}", f->rank, round, f->why));
        return;
      }
    }
  } catch (const std::exception& e) {
    gone = e.what();
  }
  if (!stopped())
    heard(
        fmt::format("the round signal of round {} (the store trainer rank 0 hosts at {}:{}) went "
                    "away while the round ran: {}",
                    round, signal.address_, signal.port_, gone));
}

RoundSignal::Watch::~Watch() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string RoundSignal::Watch::fate() const {
  std::lock_guard<std::mutex> l(mu_);
  return fate_;
}

}  // namespace wt::plugins
