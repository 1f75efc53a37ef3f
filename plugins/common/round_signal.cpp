#include "round_signal.hpp"

#include "tcp_store.hpp"

#include <wt/sdk/errors.hpp>

#include <fmt/format.h>

namespace wt::plugins {

using Clock = std::chrono::steady_clock;

RoundSignal::RoundSignal(std::string address, int port, SessionKeys keys)
    : address_(std::move(address)), port_(port), keys_(std::move(keys)) {}

std::string RoundSignal::raise(uint32_t round, const std::string& why) noexcept {
  try {
    TcpStoreClient store(address_, port_, keys_, Clock::now() + std::chrono::seconds(2));
    if (store.raise_fate(round, why)) return {};
    if (auto f = store.fate(round, std::chrono::seconds(2)); f && f->rank != keys_.rank())
      return describe(f->rank, round, f->why);
  } catch (...) {
  }
  return {};
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

namespace {

// What a rank said, as text every log line and JSON body takes: printable ASCII, the rest '?'
// (a reason cut at 1 KiB may end inside a character, and a rank may send any bytes).
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return out;
}

}  // namespace

std::string RoundSignal::describe(int rank, uint32_t round, const std::string& why) {
  return fmt::format("trainer rank {} ended round {}: {}", rank, round, printable(why));
}

void RoundSignal::Watch::run(const RoundSignal& signal, uint32_t round,
                             const std::function<void(const std::string&)>& on_fate) {
  auto stopped = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return stop_;
  };
  // A store that is gone, or does not answer within a request's deadline, ends the watching
  // quietly: the round goes on, bounded by its transfers' own deadline as without the signal
  // (rank 0 may have ended its engine after the last round while this rank still finishes).
  try {
    TcpStoreClient store(signal.address_, signal.port_, signal.keys_,
                         Clock::now() + std::chrono::seconds(10), stopped);
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu_);
        if (cv_.wait_for(l, kPoll, [&] { return stop_; })) return;
      }
      if (auto f = store.fate(round, kRequestDeadline); f && f->rank != signal.keys_.rank()) {
        const std::string fate = describe(f->rank, round, f->why);
        {
          std::lock_guard<std::mutex> l(mu_);
          if (stop_) return;
          fate_ = fate;
        }
        on_fate(fate);
        return;
      }
    }
  } catch (const std::exception&) {
  }
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
