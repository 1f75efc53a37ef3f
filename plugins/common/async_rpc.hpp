// One control-plane call on a side thread, so the trainer can pack the next buffer while the
// workers load the previous one. Waiting honours abort(); a failed round never joins the thread
// (it may still be blocked in the RPC): the owner parks it and joins it when the engine is
// destroyed, bounded by the client's own deadline.
#pragma once

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
  explicit AsyncRpc(std::function<void()> call) : state_(std::make_shared<State>()) {
    thread_ = std::thread([st = state_, call = std::move(call)] {
      std::exception_ptr err;
      try {
        call();
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> l(st->mu);
      st->error = err;
      st->done = true;
      st->cv.notify_all();
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
  // Returns when the call finished (rethrowing its error) or throws WT_ERR_ABORTED.
  void wait(const std::atomic<bool>& aborted) {
    std::unique_lock<std::mutex> l(state_->mu);
    while (!state_->done) {
      if (aborted.load()) sdk::fail(WT_ERR_ABORTED, "aborted while waiting for update_weights");
      state_->cv.wait_for(l, std::chrono::milliseconds(20));
    }
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
