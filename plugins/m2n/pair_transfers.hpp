// Transfers over the authenticated Gloo mesh, for host memory: a message is an unbound buffer
// sent or received on its slot (Gloo moves it only once both ends posted it, so nothing lands
// where no receive waits); discard() closes every pair. A round has two deadlines: its messages
// all within transfer_timeout, and each wait fails once no byte moved for stall_timeout on its
// pair nor on any other pair this round posted to (a stopped peer or a cut link, told from a slow
// round). Any pair counts because this rank's one Gloo loop thread reads a message to its end
// before it serves another pair: while it copies one peer's large piece into memory the kernel is
// slow to hand out, the pair a wait is on moves nothing, and its peer is not to blame; a peer
// that stopped is still found once the others' parts are in. A wait whose peer closed
// its pair (a process killed, a rank that gave the round up) fails within a fraction of a second,
// naming the peer: nothing more can come from it.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "../common/proving_device.hpp"
#include "../common/stall_watch.hpp"
#include "transfers.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace wt::m2n {

class PairTransfers final : public Transfers {
 public:
  PairTransfers(std::shared_ptr<gloo::rendezvous::Context> mesh,
                std::chrono::milliseconds transfer_timeout,
                std::chrono::milliseconds stall_timeout = std::chrono::seconds(60));
  ~PairTransfers() override;

  void post_send(int peer, uint64_t slot, const void* data, std::size_t bytes,
                 std::string_view what) override;
  void post_recv(int peer, uint64_t slot, void* data, std::size_t bytes,
                 std::string_view what) override;
  void wait_all() override;
  void wait_through(std::size_t n) override;
  std::size_t posted() const override { return ops_.size(); }
  void abort() override;
  bool broken() const override { return broken_; }
  void discard() override;
  // The rounds also end, at once, when the pair with `peer` closes (a trainer rank that gave up
  // the round closes its pairs, and the others may be waiting on no pair of it).
  void end_with(int peer) override;
  std::string given_up() const override;

 private:
  struct Op {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    bool send = false;
    int peer = -1;
    std::string_view what;
  };
  void post(bool send, int peer, uint64_t slot, void* data, std::size_t bytes,
            std::string_view what);
  void clear();
  std::shared_ptr<gloo::rendezvous::Context> mesh_;
  std::chrono::milliseconds timeout_;
  std::vector<std::pair<int, std::shared_ptr<const plugins::PairProgress>>> fates_;
  std::vector<Op> ops_;
  // The pairs of the round's posted messages, for the stall deadline: a snapshot the watch reads
  // (replaced, never changed, when a message goes to a new peer).
  using Progresses = std::vector<std::shared_ptr<const plugins::PairProgress>>;
  std::shared_ptr<const Progresses> round_pairs_ = std::make_shared<Progresses>();
  std::unordered_set<int> round_peers_;
  std::size_t waited_ = 0;                         // ops_[0, waited_) are done
  std::chrono::steady_clock::time_point until_{};  // the deadline of the messages in ops_
  std::atomic<bool> broken_{false};
  std::mutex mu_;  // guards current_ and aborted_
  gloo::transport::UnboundBuffer* current_ = nullptr;
  bool aborted_ = false;
  plugins::StallWatch stall_;  // last: its thread interrupts through current_ under mu_
};

}  // namespace wt::m2n
