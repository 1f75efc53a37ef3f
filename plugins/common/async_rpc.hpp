// One control-plane call on a side thread, so the trainer can pack the next buffer while the
// workers load the previous one. Waiting ends at once on abort (an sdk::AbortSignal); a failed
// round never joins the thread (it may still be blocked in the RPC): the owner parks it and joins
// it when the engine is destroyed, bounded by the client's own deadline.
#pragma once

#include <wt/sdk/abortable_wait.hpp>
#include <wt/sdk/errors.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace wt::plugins {

class AsyncRpc {
 public:
  // `wake`: the engine's abort signal, notified when the call ends so that wait() returns at once
  // (the signal outlives the thread: engines destroy their parked calls before their signal).
  // `on_error`: called on the call's thread when it fails, before waiters are woken (the round
  // bracket stops a transfer with it).
  explicit AsyncRpc(std::function<void()> call, sdk::AbortSignal* wake = nullptr,
                    std::function<void()> on_error = {})
      : state_(std::make_shared<State>()) {
    thread_ = std::thread([st = state_, call = std::move(call), wake, on_error] {
      std::exception_ptr err;
      try {
        call();
      } catch (...) {
        err = std::current_exception();
      }
      if (err && on_error) {
        try {
          on_error();
        } catch (...) {
        }
      }
      {
        std::lock_guard<std::mutex> l(st->mu);
        st->error = err;
        st->done = true;
        st->cv.notify_all();
      }
      if (wake != nullptr) wake->notify();
    });
  }
  ~AsyncRpc() {
    if (thread_.joinable()) thread_.join();
  }
  AsyncRpc(const AsyncRpc&) = delete;
  AsyncRpc& operator=(const AsyncRpc&) = delete;

  bool done() const {
    std::lock_guard<std::mutex> l(state_->mu);
    return state_->done;
  }
  // Whether the call ends within `d`.
  bool finished_within(std::chrono::milliseconds d) const {
    std::unique_lock<std::mutex> l(state_->mu);
    return state_->cv.wait_for(l, d, [&] { return state_->done; });
  }
  // The call's error, once it ended (null if it succeeded or has not ended).
  std::exception_ptr error() const {
    std::lock_guard<std::mutex> l(state_->mu);
    return state_->error;
  }
  // Returns when the call finished (rethrowing its error) or throws WT_ERR_ABORTED as soon as
  // `aborted` is. No deadline of its own: the client's call has one (HttpClient's timeout).
  void wait(sdk::AbortSignal& aborted) {
    aborted.wait_until([this] { return done(); },
                       sdk::Deadline::after(std::chrono::hours(24 * 365)), "update_weights");
    std::lock_guard<std::mutex> l(state_->mu);
    if (state_->error) std::rethrow_exception(state_->error);
  }

 private:
  struct State {
    mutable std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace wt::plugins
