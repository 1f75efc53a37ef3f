// Packed chunks in flight: a thread of its own runs the broadcasts of a communicator in the order
// they were submitted, while the caller fills the next buffer (trainer) or drains the previous one
// (worker). Each of the rotating buffers is a slot: wait(slot) returns when the broadcast last
// submitted for it is done, and rethrows the first failure of any broadcast.
//
// A pipeline destroyed with broadcasts still queued or running (its owner failed midway) aborts
// the communicator first, so it never waits on a peer; the domain is then broken.
#pragma once

#include "../common/communicator.hpp"

#include <wt/sdk/errors.hpp>

#include <condition_variable>
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
      if (!queue_.empty() || busy_) comm_.abort();
      cv_.notify_all();
    }
    thread_.join();
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
      l.unlock();
      std::exception_ptr err;
      try {
        comm_.broadcast(job.data, job.bytes, job.dtype, 0, job.what);
      } catch (...) {
        err = std::current_exception();
      }
      l.lock();
      busy_ = false;
      --pending_[job.slot];
      if (err && !error_) error_ = err;
      cv_.notify_all();
    }
  }

  Communicator& comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<std::size_t> pending_;  // per slot: broadcasts submitted, not yet done
  std::exception_ptr error_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace wt::plugins
