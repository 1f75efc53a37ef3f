// Point-to-point sends and receives of one round on the authenticated Gloo mesh: posted (Gloo
// moves a message only once both ends posted it, so nothing lands where no receive waits), then
// waited for in posting order, all within one deadline counted from the first post since the last
// wait_all. abort() from any
// thread ends the wait in progress and every later one (WT_ERR_ABORTED); a failed or aborted round
// leaves the transfers broken for good: the mesh no longer lines up and must be made again.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wt::m2n {

class PairTransfers {
 public:
  PairTransfers(std::shared_ptr<gloo::rendezvous::Context> mesh,
                std::chrono::milliseconds transfer_timeout);
  ~PairTransfers();

  // `peer` is a mesh rank; `what` names the message in errors ("piece 2 of 'w' from trainer
  // rank 1"). The memory must stay valid until wait_all() returned or clear() ran.
  void post_send(int peer, uint64_t slot, const void* data, std::size_t bytes, std::string what);
  void post_recv(int peer, uint64_t slot, void* data, std::size_t bytes, std::string what);
  // Waits for every message posted since the last wait_all, in order; throws sdk::Error naming
  // the first that failed (WT_ERR_TIMEOUT: its peer did not take part within the deadline or went
  // away; WT_ERR_ABORTED). Every posted message is forgotten either way.
  void wait_all();
  // Waits, in posting order, for the messages posted since the last wait_all up to the n-th
  // (counted from 0: posted() - 1 is the last so far), so that their memory may be reused; throws
  // as wait_all (and then forgets every message). The messages stay posted until wait_all.
  void wait_through(std::size_t n);
  std::size_t posted() const { return ops_.size(); }

  void abort();
  bool broken() const { return broken_; }
  // On the posting thread, after a failure: forgets every posted message before the memory they
  // point at goes, closes every pair (the peers' waits end at once) and leaves the transfers
  // broken. wait_all does it when a wait fails.
  void discard();

 private:
  struct Op {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    bool send = false;
    std::string what;
  };
  void post(bool send, int peer, uint64_t slot, void* data, std::size_t bytes, std::string what);
  void clear();
  std::shared_ptr<gloo::rendezvous::Context> mesh_;
  std::chrono::milliseconds timeout_;
  std::vector<Op> ops_;
  std::size_t waited_ = 0;                         // ops_[0, waited_) are done
  std::chrono::steady_clock::time_point until_{};  // the deadline of the messages in ops_
  std::atomic<bool> broken_{false};
  std::mutex mu_;  // guards current_ and aborted_
  gloo::transport::UnboundBuffer* current_ = nullptr;
  bool aborted_ = false;
};

}  // namespace wt::m2n
