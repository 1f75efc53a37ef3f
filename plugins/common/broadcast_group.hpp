// One broadcast domain over Gloo (host memory): the trainer's sender is rank 0 and hosts the
// rendezvous store at master_address:master_port; every worker joins with its own rank. Shared by
// the nccl and sparse_nccl backends (compiled into each, plugins/common).
//
// Trust (docs/security.md): the store admits only holders of the session secret; once the mesh
// formed, every pair answers a challenge under the secret each way, on its socket, before Gloo
// reads or sends anything on it, and rank 0 then closes the store. Every broadcast is preceded by a
// 16-byte frame naming its length and its number in the session, so a receiver takes exactly the
// bytes it expects or refuses the broadcast before a byte of it lands. SIGPIPE is blocked around
// every Gloo call.
#pragma once

#include "communicator.hpp"
#include "proving_device.hpp"
#include "stall_watch.hpp"
#include "tcp_store.hpp"

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wt::plugins {

class BroadcastGroup final : public Communicator {
 public:
  using Options = CommunicatorOptions;
  // Blocks until every rank joined and proved the secret, within rendezvous_timeout as a whole;
  // throws sdk::Error (WT_ERR_TIMEOUT naming the rendezvous and the ranks expected, WT_ERR_REMOTE
  // for a peer that failed the challenge, WT_ERR_SYSTEM when the store cannot listen). Rank 0
  // hosts `store` when given (opened before the workers were told where to meet), else opens it.
  explicit BroadcastGroup(const Options& options, std::unique_ptr<TcpStoreServer> store = nullptr);
  ~BroadcastGroup() override;
  BroadcastGroup(const BroadcastGroup&) = delete;
  BroadcastGroup& operator=(const BroadcastGroup&) = delete;

  // Broadcasts `bytes` bytes at `data` from `root` to every rank, within the transfer deadline.
  // A receiver whose `bytes` differs from the root's fails (WT_ERR_REMOTE, both sizes named in
  // `what`) before receiving any of it. A peer that dies or stalls fails it (WT_ERR_TIMEOUT /
  // WT_ERR_REMOTE) naming `what`: within stall_timeout once no byte moves on any of this rank's
  // pairs, within transfer_timeout in any case. The group is then broken for good (broken()).
  void broadcast(void* data, std::size_t bytes, int root, const std::string& what);
  void broadcast(void* data, std::size_t bytes, DLDataType, int root,
                 const std::string& what) override {
    broadcast(data, bytes, root, what);
  }
  // From any thread: the broadcast in progress, if any, stops waiting and fails with
  // WT_ERR_ABORTED, as does every later one; the group is broken. Gloo has no abort of its own and
  // an interrupt ends one wait only, so abort interrupts again until the broadcast returned: the
  // root of a tree over N ranks waits once per child. The destination memory is never written
  // after the broadcast returned: the buffer Gloo would write through is gone with it.
  void abort() override;
  bool broken() const override { return broken_; }
  int rank() const { return options_.rank; }
  int size() const { return options_.world_size; }

  // The frame before each broadcast: magic, the broadcast's number, its length.
  static constexpr std::size_t kFrameBytes = 16;

 private:
  void run(void* data, std::size_t bytes, int root, const std::string& what);
  Options options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::atomic<bool> broken_{false};
  uint32_t sequence_ = 0;                              // broadcasts so far in this session
  std::mutex abort_mu_;                                // guards current_ and aborted_
  gloo::transport::UnboundBuffer* current_ = nullptr;  // the broadcast in progress
  bool aborted_ = false;
  std::vector<std::shared_ptr<const PairProgress>> progress_;  // every pair's
  // The first peer whose pair closed (it died, or gave the group up), or -1.
  int closed_peer() const;
  StallWatch stall_;  // last: its thread interrupts through current_ under abort_mu_
};

}  // namespace wt::plugins
