// Packed chunks in flight: a thread of its own runs the broadcasts of a communicator in the order
// they were submitted, while the caller fills the next buffer (trainer) or drains the previous one
// (worker). Each of the rotating buffers is a slot: wait(slot) returns when the broadcast last
// submitted for it is done and settled (Communicator::broadcast_then: a digesting receiver still
// hashes a chunk while the next one arrives), and rethrows the first failure of any broadcast.
//
// A pipeline destroyed with broadcasts still queued or running (its owner failed midway) aborts
// the communicator first, so it never waits on a peer; the domain is then broken. It also waits
// for every broadcast it ran to settle: nothing reads a slot's buffer once it is gone.
#pragma once

#include "communicator.hpp"

#include <wt/sdk/errors.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wt::plugins {

class BroadcastPipeline {
 public:
  BroadcastPipeline(Communicator& comm, std::size_t slots) : comm_(comm), pending_(slots, 0) {
    thread_ = std::thread([this] { run(); });
  }
  ~BroadcastPipeline() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      // A broadcast that is over but not yet settled (a digest of it being computed) is left be.
      if (!queue_.empty() || (busy_ && !running_done_)) comm_.abort();
      cv_.notify_all();
    }
    thread_.join();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return unsettled_ == 0; });
  }
  BroadcastPipeline(const BroadcastPipeline&) = delete;
  BroadcastPipeline& operator=(const BroadcastPipeline&) = delete;

  void submit(std::size_t slot, void* data, std::size_t bytes, DLDataType dtype, std::string what) {
    std::lock_guard<std::mutex> l(mu_);
    ++pending_.at(slot);
    queue_.push_back({slot, data, bytes, dtype, std::move(what)});
    cv_.notify_all();
  }

  // Returns when `slot` has no broadcast pending; throws the first failure of any.
  void wait(std::size_t slot) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return error_ || pending_.at(slot) == 0; });
    if (error_) std::rethrow_exception(error_);
  }

  void drain() {
    for (std::size_t s = 0; s < pending_.size(); ++s) wait(s);
  }

 private:
  struct Job {
    std::size_t slot;
    void* data;
    std::size_t bytes;
    DLDataType dtype;
    std::string what;
  };

  void run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() || error_) {
        if (stop_) return;
        queue_.clear();
        continue;
      }
      Job job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      const uint64_t id = ++running_;
      running_done_ = false;
      ++unsettled_;
      l.unlock();
      std::exception_ptr err;
      const std::size_t slot = job.slot;
      try {
        comm_.broadcast_then(job.data, job.bytes, job.dtype, 0, job.what, [this, slot, id] {
          std::lock_guard<std::mutex> g(mu_);
          if (running_ == id) running_done_ = true;
          --pending_[slot];
          --unsettled_;
          cv_.notify_all();
        });
      } catch (...) {
        err = std::current_exception();
      }
      l.lock();
      busy_ = false;
      if (err) {  // never settled: the slot is free, the failure is the pipeline's
        --pending_[slot];
        --unsettled_;
        if (!error_) error_ = err;
      }
      cv_.notify_all();
    }
  }

  Communicator& comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<std::size_t> pending_;  // per slot: broadcasts submitted, not yet settled
  std::size_t unsettled_ = 0;         // broadcasts begun, not yet settled
  std::exception_ptr error_;
  bool busy_ = false, stop_ = false;
  uint64_t running_ = 0;       // the broadcast the thread runs (or ran last), counted from 1
  bool running_done_ = false;  // and whether it settled
  std::thread thread_;
};

}  // namespace wt::plugins
